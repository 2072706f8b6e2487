//! The whole test suite, as `.ci/run` and the README run it.

use std::process::Command;

use anyhow::Result;
use clap::Args;

use crate::{cmd, setup};

#[derive(Args)]
pub struct TestArgs {
    /// Skip the fmt --check and clippy -D warnings that run first.
    #[arg(long)]
    pub no_lint: bool,
    /// Run only the `causeway` Python package's stage (venv, wheel, pytest).
    #[arg(long)]
    pub python_only: bool,
}

pub fn run(args: &TestArgs) -> Result<()> {
    if args.python_only {
        return crate::python::test();
    }
    setup::run(setup::Mode::Install)?;
    if !cmd::is_root() {
        eprintln!("NOTE: not root: eBPF, namespace and testbed tests will print SKIP and not run (with CI=true they fail instead)");
    }
    if !args.no_lint {
        lint()?;
    }
    // --no-fail-fast: one failing test binary must not hide the others.
    // Unit tests and the per-crate tests (BPF_PROG_TEST_RUN, differential,
    // collectives on loopback) run with cargo's default parallelism.
    let crates = cmd::run(cmd::cargo().args([
        "test",
        "--no-fail-fast",
        "--workspace",
        "--exclude",
        "causeway-tests",
    ]));
    // Namespace and testbed tests (one binary, `tests/tests/integration`)
    // measure rates and delays: one at a time, so that they do not steal
    // each other's two cores.
    let netns = cmd::run(cmd::cargo().args([
        "test",
        "--no-fail-fast",
        "--package",
        "causeway-tests",
        "--",
        "--test-threads=1",
    ]));
    // The `causeway` Python package: venv (torch, maturin, pytest), wheel, pytest.
    let python = crate::python::test();
    let failed: Vec<String> = [crates, netns, python]
        .into_iter()
        .filter_map(|r| r.err().map(|e| format!("{e:#}")))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{}", failed.join("\n"))
    }
}

pub fn lint() -> Result<()> {
    cmd::run(cmd::cargo().args(["fmt", "--all", "--", "--check"]))?;
    cmd::run(cmd::cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    // The eBPF crate is not a workspace member: its own toolchain and target
    // come from ebpf/rust-toolchain.toml and ebpf/.cargo/config.toml.
    cmd::run_in(
        &cmd::root().join("ebpf"),
        Command::new("rustup").args([
            "run",
            "nightly",
            "cargo",
            "clippy",
            "--release",
            "--",
            "-D",
            "warnings",
        ]),
    )
}
