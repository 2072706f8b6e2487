//! Running child commands with a readable echo and a clear error.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

/// The workspace root (xtask sits one level below it).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_path_buf()
}

/// Runs `cmd` in the workspace root, echoing it; fails if it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    run_in(&root(), cmd)
}

/// Runs `cmd` in `dir`, echoing it; fails if it fails.
pub fn run_in(dir: &std::path::Path, cmd: &mut Command) -> Result<()> {
    cmd.current_dir(dir);
    eprintln!("+ {}", describe(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{}`", describe(cmd)))?;
    if killed_by_sigpipe(status) {
        // Its stdout (ours) was closed, e.g. `cargo xtask netsim status | head -1`:
        // end as quietly as the child did (cli_main exits 141 on a broken pipe).
        return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .with_context(|| format!("`{}` ended on SIGPIPE", describe(cmd)));
    }
    if !status.success() {
        bail!("`{}` failed: {status}", describe(cmd));
    }
    Ok(())
}

fn killed_by_sigpipe(status: std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    let sigpipe = i32::from(causeway_core::cli_main::BROKEN_PIPE_STATUS) - 128;
    status.signal() == Some(sigpipe)
}

/// Runs `cmd` quietly and returns whether it succeeded (for probes).
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Runs `cmd` quietly and returns its stdout, or `None` if it failed.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// The path of a binary built by `cargo build [--release]`.
/// The collective library's RDMA transport, on in every build the project
/// makes (tests, lint, benches, demo, the VM stage's worker).
pub const COLLECTIVE_RDMA: &str = "causeway-collective/rdma";

/// Builds the release binaries the WAN benchmarks run (the CLI, the netsim
/// testbed, the collective's bench and worker binaries, the demo's
/// `gradient_sync` example) in one invocation with one package set, so the
/// benches and the demo reuse each other's build.
pub fn build_wan_bench_bins() -> Result<()> {
    run(cargo().args([
        "build",
        "--release",
        "-p",
        "causeway",
        "-p",
        "causeway-netsim",
        "-p",
        "causeway-collective",
        "--features",
        COLLECTIVE_RDMA,
        "--bins",
        "--example",
        "gradient_sync",
    ]))
}

pub fn bin_path(bin: &str, release: bool) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    target
        .join(if release { "release" } else { "debug" })
        .join(bin)
}

/// A command running an already-built workspace binary.
pub fn cargo_bin(bin: &str, release: bool) -> Command {
    Command::new(bin_path(bin, release))
}

/// Whether this process runs as root (`id -u` prints 0).
pub fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_some_and(|uid| uid.trim() == "0")
}

pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_ended_by_sigpipe_is_a_quiet_broken_pipe_and_other_failures_are_errors() {
        let dir = std::env::temp_dir();
        let err =
            run_in(&dir, Command::new("sh").args(["-c", "kill -PIPE $$"])).expect_err("killed");
        assert!(causeway_core::cli_main::is_broken_pipe(&err), "{err:#}");
        let err = run_in(&dir, Command::new("sh").args(["-c", "exit 3"])).expect_err("failed");
        assert!(!causeway_core::cli_main::is_broken_pipe(&err), "{err:#}");
        assert!(err.to_string().contains("failed"), "{err:#}");
    }
}
