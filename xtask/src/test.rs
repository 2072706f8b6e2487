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
    /// Skip the VM stage (the tests inside qemu guests on 6.1, 6.12 and
    /// 7.x): for quick local runs only; CI never passes it.
    #[arg(long)]
    pub no_vm: bool,
    /// Run only the `causeway` Python package's stage (venv, wheel, pytest).
    #[arg(long)]
    pub python_only: bool,
}

/// The packages of the per-crate stage. Cargo unifies features over the
/// packages of one invocation, so the VM stage builds its test binaries
/// with the same sets (`vm::suites`) and reuses these builds.
/// The collective library's RDMA transport is built in (feature `rdma`): its
/// Soft-RoCE tests run in the VM stage.
pub const CRATES_PACKAGES: &[&str] = &[
    "--workspace",
    "--exclude",
    "causeway-tests",
    "--features",
    crate::cmd::COLLECTIVE_RDMA,
];
/// The packages of the namespace stage (see [`CRATES_PACKAGES`]).
pub const NETNS_PACKAGES: &[&str] = &["--package", "causeway-tests"];

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
    // On a terminal each runs under a spinner (elapsed, lines, the last one).
    let crates = crate::progress::run_child(
        cmd::cargo()
            .args(["test", "--no-fail-fast"])
            .args(CRATES_PACKAGES),
        "test: crates",
    );
    // Namespace and testbed tests (one binary, `tests/tests/integration`)
    // measure rates and delays: one at a time, so that they do not steal
    // each other's two cores.
    let netns = crate::progress::run_child(
        cmd::cargo()
            .args(["test", "--no-fail-fast"])
            .args(NETNS_PACKAGES)
            .args(["--", "--test-threads=1"]),
        "test: namespaces",
    );
    // The VM stage: the same binaries inside Debian's 6.1, 6.12 and 7.x
    // kernels (qemu), where netem exists (`cargo xtask vm-test`).
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let vm = if args.no_vm {
        eprintln!("NOTE: --no-vm: the VM stage (kernels 6.1, 6.12, 7.x) is skipped");
        Ok(())
    } else if !cmd::is_root() && !ci {
        eprintln!("SKIP: the VM stage needs root (with CI=true it fails instead)");
        Ok(())
    } else {
        crate::vm::run(&crate::vm::VmTestArgs::stage())
    };
    // The `causeway` Python package: venv (torch, maturin, pytest), wheel, pytest.
    let python = crate::python::test();
    let failed: Vec<String> = [crates, netns, python, vm]
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
        "--features",
        crate::cmd::COLLECTIVE_RDMA,
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
