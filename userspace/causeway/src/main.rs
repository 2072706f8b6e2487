//! The `causeway` command-line tool; see `causeway --help`.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    // Prints the error chain once; a closed stdout pipe exits 141 quietly.
    causeway_core::cli_main::run(cli::main)
}
