//! The `causeway` command-line tool; see `causeway --help`.
#![deny(unsafe_code)]

mod cli;

use std::process::ExitCode;

use causeway_core::cli_main;

fn main() -> ExitCode {
    // Prints the error chain once; a closed stdout pipe exits 141 quietly.
    cli_main::run(|| {
        // `policy apply` writes its HTB batch to `tc`'s stdin and must report
        // (and undo after) a `tc` that went away, not die of SIGPIPE; keep
        // the Rust runtime's disposition until that write cannot raise it.
        cli_main::ignore_sigpipe();
        cli::main()
    })
}
