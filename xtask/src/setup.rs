//! Prerequisites: checks each one, installs what is missing (as root), and
//! names exactly what is missing and how to get it when it cannot.
//!
//! Versions follow docs/TOOLCHAIN.md: the machine's nightly + rust-src for
//! the eBPF crate, bpf-linker 0.13 built against Debian's LLVM 22.

use std::process::Command;

use anyhow::{bail, Result};
use indicatif::ProgressBar;

use crate::deny_service_starts::{DenyServiceStarts, POLICY_RC_D};
use crate::{cmd, progress};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Check,
    Install,
}

/// Debian packages the build, the tests and the demo need, with the command
/// each one provides (or `None` for libraries, checked with dpkg).
const APT_PACKAGES: &[(&str, Option<&str>)] = &[
    ("llvm-22-dev", None),
    ("libpolly-22-dev", None),
    ("bpftool", Some("bpftool")),
    ("iproute2", Some("ip")),
    ("iperf3", Some("iperf3")),
    // The policer matrix test turns offloads on and off.
    ("ethtool", Some("ethtool")),
    ("util-linux", Some("chrt")),
    // The clock bench's outside reference (run as `chronyd -x` in namespaces).
    ("chrony", Some("chronyd")),
    // The VM stage (`cargo xtask vm-test`): qemu boots Debian kernels with an
    // initramfs of busybox + kmod; cpio packs it, dpkg-deb unpacks kernels.
    ("qemu-system-x86", Some("qemu-system-x86_64")),
    ("busybox-static", None),
    ("kmod", Some("modprobe")),
    ("cpio", Some("cpio")),
    ("zstd", Some("zstd")),
    ("xz-utils", Some("xz")),
    // vm::netem measures the netem WAN's RTT with ping.
    ("iputils-ping", Some("ping")),
    // The observability tests: a real Prometheus server scrapes the agent
    // and a rank; `causeway top` runs in tmux (send-keys, capture-pane).
    ("prometheus", Some("prometheus")),
    ("tmux", Some("tmux")),
    // The RDMA transport (feature `rdma`): the `ibverbs` crate builds its
    // rdma-core bindings with cmake and bindgen (libclang 14, see
    // LIBCLANG_PATH in docs/TOOLCHAIN.md); the rxe provider and the
    // `rdma` tool (iproute2) serve the Soft-RoCE tests in the VMs; perftest's
    // `ib_write_bw` is the bench's reference.
    ("libibverbs-dev", None),
    ("ibverbs-providers", None),
    ("ibverbs-utils", Some("ibv_devices")),
    ("perftest", Some("ib_write_bw")),
    ("cmake", Some("cmake")),
    ("pkg-config", Some("pkg-config")),
    ("libclang-14-dev", None),
    // `cargo xtask bench multipath` compares with Linux MPTCP (two subflows).
    ("mptcpize", Some("mptcpize")),
];

const BPF_LINKER_VERSION: &str = "0.13";

pub fn run(mode: Mode) -> Result<()> {
    let mut missing = Vec::new();
    if !cmd::is_root() {
        eprintln!("setup: not running as root: kernel and namespace tests will be skipped, and nothing can be installed");
    }
    // An install prints its own output: the bar steps aside for it.
    let bar = progress::steps(3, "setup");
    bar.set_message("Debian packages");
    apt(mode, &mut missing, &bar)?;
    bar.inc(1);
    bar.set_message("nightly + rust-src");
    nightly(mode, &mut missing, &bar)?;
    bar.inc(1);
    bar.set_message("bpf-linker");
    bpf_linker(mode, &mut missing, &bar)?;
    bar.finish_and_clear();
    if !missing.is_empty() {
        bail!("missing prerequisites:\n  - {}", missing.join("\n  - "));
    }
    eprintln!("setup: all prerequisites present");
    Ok(())
}

fn apt_installed(package: &str) -> bool {
    cmd::output(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))
        .is_some_and(|s| s.contains("install ok installed"))
}

fn apt(mode: Mode, missing: &mut Vec<String>, bar: &ProgressBar) -> Result<()> {
    let absent: Vec<&str> = APT_PACKAGES
        .iter()
        .filter(|(pkg, bin)| {
            !apt_installed(pkg)
                && !bin.is_some_and(|b| {
                    cmd::succeeds(Command::new("sh").args(["-c", &format!("command -v {b}")]))
                })
        })
        .map(|(pkg, _)| *pkg)
        .collect();
    if absent.is_empty() {
        return Ok(());
    }
    if mode == Mode::Check || !cmd::is_root() {
        missing.push(format!(
            "Debian packages {} (as root: apt-get update && apt-get install -y {})",
            absent.join(" "),
            absent.join(" ")
        ));
        return Ok(());
    }
    progress::say(
        bar,
        &format!("setup: installing Debian packages: {}", absent.join(" ")),
    );
    bar.suspend(|| cmd::run(Command::new("apt-get").args(["update", "-qq"])))?;
    let deny = DenyServiceStarts::engage(std::path::Path::new(POLICY_RC_D))?;
    let installed = bar.suspend(|| {
        cmd::run(
            Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends"])
                .args(&absent)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    });
    drop(deny);
    if absent.contains(&"chrony") {
        stop_clock_adjusting_chronyd();
    }
    installed
}

/// chrony was not installed before this setup, so any chronyd without `-x`
/// now running was started by the install (an existing policy that allowed
/// it): stop it before it touches the host clock.
fn stop_clock_adjusting_chronyd() {
    let Some(list) = cmd::output(Command::new("pgrep").args(["-a", "chronyd"])) else {
        return;
    };
    for line in list.lines() {
        let mut words = line.split_whitespace();
        let (Some(pid), false) = (words.next(), line.split_whitespace().any(|w| w == "-x")) else {
            continue;
        };
        eprintln!(
            "setup: stopping chronyd {pid} started by its package (it would adjust the host clock)"
        );
        let _ = cmd::run(Command::new("kill").arg(pid));
    }
}

fn nightly(mode: Mode, missing: &mut Vec<String>, bar: &ProgressBar) -> Result<()> {
    let toolchains =
        cmd::output(Command::new("rustup").args(["toolchain", "list"])).unwrap_or_default();
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        missing.push(
            "the nightly Rust toolchain (the eBPF crate needs -Z build-std): this machine image ships one; \
             elsewhere run `rustup toolchain install nightly --component rust-src`"
                .into(),
        );
        return Ok(());
    }
    let components = cmd::output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        "nightly",
    ]))
    .unwrap_or_default();
    if components.lines().any(|l| l.starts_with("rust-src")) {
        return Ok(());
    }
    if mode == Mode::Check {
        missing.push(
            "rust-src for nightly (rustup component add rust-src --toolchain nightly)".into(),
        );
        return Ok(());
    }
    progress::say(bar, "setup: adding rust-src to the nightly toolchain");
    bar.suspend(|| {
        cmd::run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))
    })
}

fn bpf_linker(mode: Mode, missing: &mut Vec<String>, bar: &ProgressBar) -> Result<()> {
    let version = cmd::output(Command::new("bpf-linker").arg("--version")).unwrap_or_default();
    if version.contains(BPF_LINKER_VERSION) {
        return Ok(());
    }
    let install = "LLVM_PREFIX=/usr/lib/llvm-22 cargo install bpf-linker --version ^0.13 --no-default-features --features llvm-22";
    if mode == Mode::Check || !apt_installed("llvm-22-dev") {
        missing.push(format!("bpf-linker {BPF_LINKER_VERSION} built against LLVM 22 (needs llvm-22-dev; then: {install})"));
        return Ok(());
    }
    progress::say(
        bar,
        "setup: building bpf-linker against LLVM 22 (about 4 minutes, once)",
    );
    bar.suspend(|| {
        cmd::run(
            cmd::cargo()
                .args([
                    "install",
                    "bpf-linker",
                    "--version",
                    "^0.13",
                    "--no-default-features",
                    "--features",
                    "llvm-22",
                ])
                .env("LLVM_PREFIX", "/usr/lib/llvm-22"),
        )
    })
}
