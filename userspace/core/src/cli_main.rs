//! The one error printer for Causeway's binaries (feature `cli`):
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     causeway_core::cli_main::run(|| {
//!         // … the binary's work, returning anyhow::Result<()>
//!         Ok(())
//!     })
//! }
//! ```
//!
//! [`run`] behaves like a Unix tool: a closed pipe on stdout ends the
//! process quietly with status 141 (128 + SIGPIPE) instead of a panic in
//! `println!`; any other error is printed once as
//! `error: <outer>: <cause>: <cause>` and the status is 1.
//!
//! With SIGPIPE at its default, more than stdout is affected: a write to
//! any pipe whose reader has gone (a child's stdin, e.g. `tc -batch -`) and
//! a vectored write (`writev`) to a stream socket whose peer has gone end
//! the process with status 141, where they would have failed with `EPIPE`.
//! (Plain `write` on a std/tokio TCP or Unix socket is safe: std sends with
//! `MSG_NOSIGNAL`.) A binary that does either and must survive it — report
//! the error, undo a half-made change, drop one client — calls
//! [`ignore_sigpipe`] before that work (or at the start of `main`, giving up
//! the quiet exit on a closed stdout).
#![allow(unsafe_code)]

use std::{
    io::{self, Write},
    process::ExitCode,
};

/// The status of a process ended by SIGPIPE, as a shell reports it.
pub const BROKEN_PIPE_STATUS: u8 = 128 + libc::SIGPIPE as u8;

/// Runs a binary's `main`: restores SIGPIPE to its default first, then
/// prints an error chain once on stderr and maps it to the exit status
/// (0 on success, 141 for a broken pipe, printing nothing, 1 otherwise).
pub fn run(main: impl FnOnce() -> anyhow::Result<()>) -> ExitCode {
    restore_default_sigpipe();
    let result = main();
    let status = report(&result, &mut io::stderr().lock());
    ExitCode::from(status)
}

/// Writes what [`run`] prints for `result` to `out` and returns the exit
/// status.
pub fn report(result: &anyhow::Result<()>, out: &mut impl Write) -> u8 {
    match result {
        Ok(()) => 0,
        Err(err) if is_broken_pipe(err) => BROKEN_PIPE_STATUS,
        Err(err) => {
            // Nothing is left to report a failure to print the error to.
            let _ = writeln!(out, "{}", error_line(err));
            1
        }
    }
}

/// `error: <outer>: <cause>: <cause>`: the whole chain on one line.
pub fn error_line(err: &anyhow::Error) -> String {
    // A cause that its wrapper already spells out (`#[error("...: {source}")]`
    // beside `#[source]`) is not printed a second time.
    let mut chain: Vec<String> = Vec::new();
    for text in err.chain().map(|e| e.to_string()) {
        if chain.last().is_some_and(|outer| outer.ends_with(&text)) {
            continue;
        }
        chain.push(text);
    }
    format!("error: {}", chain.join(": "))
}

/// Whether the error's root cause is a write to a closed pipe.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.root_cause()
        .downcast_ref::<io::Error>()
        .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
}

/// Sets SIGPIPE to its default action (end the process), undoing the Rust
/// runtime's `SIG_IGN`.
pub fn restore_default_sigpipe() {
    set_sigpipe(libc::SIG_DFL);
}

/// Sets SIGPIPE to be ignored (what the Rust runtime does before `main`):
/// writes to a closed pipe or socket then fail with `EPIPE`.
pub fn ignore_sigpipe() {
    set_sigpipe(libc::SIG_IGN);
}

fn set_sigpipe(handler: libc::sighandler_t) {
    // SAFETY: `signal` with SIG_DFL or SIG_IGN installs no handler code, so
    // no async-signal-safety requirement applies; SIGPIPE is a valid signal
    // number and the call has no memory-safety preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, handler);
    }
}

#[cfg(test)]
#[path = "cli_main_tests.rs"]
mod tests;
