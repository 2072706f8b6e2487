//! The `causeway` command-line tool; see `causeway --help`.
#![deny(unsafe_code)]

mod cli;

use std::process::ExitCode;

use causeway_core::cli_main;

fn main() -> ExitCode {
    // Prints the error chain once; a closed stdout pipe exits 141 quietly
    // (SIGPIPE keeps its default action: no command writes to a pipe of its
    // own, `tc` gets its batch as a file). `causeway agent`, a daemon that
    // serves sockets, ignores SIGPIPE itself.
    cli_main::run(cli::main)
}
