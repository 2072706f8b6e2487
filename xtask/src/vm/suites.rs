//! Which tests run in each guest, and building their binaries once on the
//! host (`cargo test --no-run`, paths read from cargo's JSON messages).
//!
//! The selection keeps each kernel's run to minutes under TCG: the
//! BPF_PROG_TEST_RUN suites, load + attach/detach (XDP generic and native,
//! TC as TCX or clsact), the netns CLI tests, HTB shaping, EDT pacing under
//! fq (against HTB, on one kernel), the agent's clock sync, netem as the WAN,
//! and the verifier's rejection of a broken program.
//! Left out (they run on the host): the agent's clock test (its 20 µs
//! bound on a direct veth assumes native timing; under TCG its status
//! polls time out), and as too slow under TCG: the random
//! differential classifier test, the fault-injection sweep of policy
//! apply, and the host's collective/clock testbeds on the userspace
//! emulator (4 ranks at 200 Mbit/s). In their place `vm::collective_wan`
//! runs one allreduce over netem and over the emulator on a profile TCG can
//! drive, with the worker built here (`CAUSEWAY_COLLECTIVE_WORKER`). The tests are
//! listed on the host (`--list`) and passed to the guest by exact name, so
//! the guest runs what the host chose and `--filter` narrows it further.
//! The collective library's `ktls::` tests run here only (the host kernel
//! has no `tls` module), and its `rdma::` tests (Soft-RoCE: the host kernel
//! has no `rdma_rxe`).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

use super::{guest::Suite, KernelLine};
use crate::cmd;

/// One selection: a package's integration binary and name prefixes of the
/// tests to run from it.
struct Selection {
    name: &'static str,
    package: &'static str,
    dir: &'static str,
    prefixes: &'static [&'static str],
    threads: u32,
}

const SELECTIONS: &[Selection] = &[
    Selection {
        name: "bpf-test-run",
        package: "causeway",
        dir: "userspace/causeway",
        prefixes: &[
            "program_table::",
            "tc_testrun::",
            "clock_stamp_testrun::",
            "gcra_testrun::",
            "edt_testrun::",
            "steer_testrun::crafted_frames_are_steered_by_flow_and_path_state",
            "xdp_testrun::crafted_frames_are_classified_and_counted",
            "xdp_testrun::object_declares_every_shared_map",
            "admission_testrun::",
            "policy_apply_undo::a_failed_attach_with_a_policy_leaves_nothing",
        ],
        threads: 2,
    },
    Selection {
        name: "netns",
        package: "causeway-tests",
        dir: "tests",
        prefixes: &[
            "vm::",
            "cli::attach_lifecycle::reattach_is_idempotent_and_detach_leaves_nothing",
            "cli::attach_lifecycle::a_paced_policy_gets_fq_or_a_clean_refusal",
            "cli::classify_traffic::",
            "shaper::htb::",
        ],
        threads: 1,
    },
    // kTLS: the host kernel has no `tls` module, Debian's kernels do.
    Selection {
        name: "ktls",
        package: "causeway-collective",
        dir: "userspace/collective",
        prefixes: &["ktls::"],
        threads: 1,
    },
    // The RDMA transport on Soft-RoCE (rdma_rxe), which the host kernel lacks.
    Selection {
        name: "rdma",
        package: "causeway-collective",
        dir: "userspace/collective",
        prefixes: &["rdma::"],
        threads: 1,
    },
];

/// Tests that run in one guest only: each takes minutes under TCG and
/// checks the WAN emulation (netem against the userspace emulator, clock
/// sync over netem) or the library's kTLS (a debug-built 4-rank world: 82 s
/// under TCG on an idle host, ~9 min at load 8), which the kernel line does
/// not change the way it changes the verifier, attach modes and test runs
/// (those run everywhere).
const ONE_KERNEL: &[(&str, KernelLine)] = &[
    (
        "vm::collective_wan::allreduce_over_netem_and_the_emulator_side_by_side",
        KernelLine::V6_1,
    ),
    (
        "vm::clock_wan::clock_sync_over_netem_quiet_and_jittery",
        KernelLine::V6_12,
    ),
    // EDT under fq, 8–10 cells of iperf3 against HTB: 139 s under TCG.
    (
        "vm::edt::edt_pacing_keeps_tcp_at_its_rate_and_no_worse_than_htb",
        KernelLine::V6_12,
    ),
    (
        "ktls::an_allreduce_over_ktls_gives_the_plaintext_bits_and_the_kernel_does_the_records",
        KernelLine::V6_12,
    ),
    (
        "ktls::a_tampered_record_on_a_ktls_link_is_a_record_error_naming_the_peer",
        KernelLine::V6_12,
    ),
    // The RDMA transport's long checks (every op × size up to 64 MiB;
    // 1,000 allreduces; a 4-rank mixed RDMA/TCP world) on one kernel each; the killed peer and the
    // zero-copy stream, which exercise rxe itself, on every kernel.
    (
        "rdma::every_op_and_size_is_correct_over_rdma",
        KernelLine::V7,
    ),
    (
        "rdma::registrations_and_queue_pairs_do_not_grow_over_1000_allreduces",
        KernelLine::V6_1,
    ),
    // 4 ranks: RDMA inside both domains, TCP across (two rxe pairs).
    (
        "rdma::a_mixed_world_uses_rdma_inside_domains_and_tcp_across",
        KernelLine::V6_12,
    ),
];

/// `suites` as they run on `line`: without the tests that [`ONE_KERNEL`]
/// gives to another kernel, and without suites left empty by that.
pub fn for_kernel(suites: &[Suite], line: KernelLine) -> Vec<Suite> {
    suites
        .iter()
        .map(|s| Suite {
            filters: s
                .filters
                .iter()
                .filter(|t| {
                    ONE_KERNEL
                        .iter()
                        .all(|(name, only)| name != t || *only == line)
                })
                .cloned()
                .collect(),
            ..s.clone()
        })
        .filter(|s| !s.filters.is_empty())
        .collect()
}

/// Builds the test binaries and returns the suites to run, narrowed by
/// `filter`.
pub fn build_and_select(filter: Option<&str>) -> Result<Vec<Suite>> {
    let binaries = build()?;
    let reject = build_verifier_reject()?;
    let worker = build_collective_worker()?;
    let env = vec![
        // The tests find the CLI here instead of running cargo (the guest has none).
        (
            "CAUSEWAY_BIN".to_string(),
            cmd::bin_path("causeway", false).display().to_string(),
        ),
        (
            "CAUSEWAY_VERIFIER_REJECT_OBJ".to_string(),
            reject.display().to_string(),
        ),
        // The collective tests' rank binary (their own fallback runs cargo).
        (
            "CAUSEWAY_COLLECTIVE_WORKER".to_string(),
            worker.display().to_string(),
        ),
    ];
    // `vm::edt`'s benchmark mode (runs per cell), when asked for on the host.
    let mut env = env;
    if let Ok(runs) = std::env::var("CAUSEWAY_EDT_BENCH") {
        env.push(("CAUSEWAY_EDT_BENCH".to_string(), runs));
    }
    let mut suites = Vec::new();
    let mut listed = Vec::new();
    for sel in SELECTIONS {
        let binary = binaries
            .iter()
            .find(|(pkg, _)| pkg == sel.package)
            .map(|(_, path)| path.clone())
            .with_context(|| {
                format!("cargo built no integration test binary for {}", sel.package)
            })?;
        let dir = cmd::root().join(sel.dir);
        let selected: Vec<String> = list(&binary, &dir)?
            .into_iter()
            .filter(|t| sel.prefixes.iter().any(|p| t.starts_with(p)))
            .collect();
        listed.extend(selected.iter().cloned());
        let names: Vec<String> = selected
            .into_iter()
            .filter(|t| filter.is_none_or(|f| t.contains(f)))
            .collect();
        if names.is_empty() {
            continue;
        }
        eprintln!("vm: suite {}: {} tests", sel.name, names.len());
        suites.push(Suite {
            name: sel.name.to_string(),
            binary,
            cwd: dir,
            filters: names,
            exact: true,
            threads: sel.threads,
            env: env.clone(),
        });
    }
    if let Some(name) = unlisted_one_kernel_test(&listed) {
        bail!("suites::ONE_KERNEL names {name}, which no selection lists (renamed or moved?)");
    }
    Ok(suites)
}

/// The first [`ONE_KERNEL`] test that is not among `listed` (a renamed test
/// would otherwise run on every kernel).
fn unlisted_one_kernel_test(listed: &[String]) -> Option<&'static str> {
    ONE_KERNEL
        .iter()
        .map(|(name, _)| *name)
        .find(|name| !listed.iter().any(|t| t == name))
}

/// Builds the collective library's checked-allreduce rank binary and
/// returns its path. Release: under TCG the debug build is CPU-bound far
/// below the test's WAN rate (2 MiB took 11–17 s at 20 Mbit/s, bound 0.84 s).
fn build_collective_worker() -> Result<PathBuf> {
    const BIN: &str = "causeway-collective-worker";
    cmd::run(cmd::cargo().args([
        "build",
        "--release",
        "-p",
        "causeway-collective",
        "--features",
        cmd::COLLECTIVE_RDMA,
        "--bin",
        BIN,
    ]))?;
    Ok(cmd::bin_path(BIN, true))
}

/// Builds the eBPF crate with `verifier-reject-test` into its own target
/// directory (the default object, embedded in `causeway`, never has it);
/// returns the object's path.
fn build_verifier_reject() -> Result<PathBuf> {
    let target = super::target_dir().join("ebpf-verifier-reject");
    let mut c = Command::new("rustup");
    c.args([
        "run",
        "nightly",
        "cargo",
        "build",
        "--release",
        "--features",
        "verifier-reject-test",
    ])
    .arg("--target-dir")
    .arg(&target);
    // The same clean environment as userspace/causeway/build.rs gives it.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("CARGO_") && key != "CARGO_HOME"
            || key.starts_with("RUSTC")
            || key == "RUSTUP_TOOLCHAIN"
            || key == "RUSTFLAGS"
        {
            c.env_remove(&key);
        }
    }
    cmd::run_in(&cmd::root().join("ebpf"), &mut c)?;
    Ok(target.join("bpfel-unknown-none/release/causeway"))
}

/// `cargo test --no-run` for the packages' integration binaries; returns
/// (package name, executable).
/// With the package sets of the host's test stages, so that after
/// `cargo xtask test`'s host stages nothing is rebuilt (cargo unifies
/// features per invocation: another set recompiles the shared crates).
fn build() -> Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    for packages in [crate::test::CRATES_PACKAGES, crate::test::NETNS_PACKAGES] {
        let mut c = cmd::cargo();
        c.args([
            "test",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .args(packages)
        .args(["--test", "integration"]);
        eprintln!(
            "+ cargo test --no-run {} --test integration (the VM stage's test binaries)",
            packages.join(" ")
        );
        let out = c
            .current_dir(cmd::root())
            .stderr(Stdio::inherit())
            .output()
            .context("running cargo test --no-run")?;
        if !out.status.success() {
            bail!("building the test binaries failed: {}", out.status);
        }
        found.extend(executables(&String::from_utf8_lossy(&out.stdout)));
    }
    Ok(found)
}

/// The (package, executable) of every `compiler-artifact` message with one.
fn executables(json_lines: &str) -> Vec<(String, PathBuf)> {
    json_lines
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact")
        .filter_map(|v| {
            let exe = v["executable"].as_str()?;
            let name = v["target"]["name"].as_str()?;
            (name == "integration").then_some(())?;
            let pkg = package_name(v["package_id"].as_str()?)?;
            Some((pkg, PathBuf::from(exe)))
        })
        .collect()
}

/// The package name in a cargo package id (`path+file:///w/tests#causeway-tests@0.1.0`
/// or the older `causeway-tests 0.1.0 (path+file:///w/tests)`).
fn package_name(id: &str) -> Option<String> {
    if let Some((_, rest)) = id.rsplit_once('#') {
        let name = rest.split('@').next()?;
        // `#0.1.0` alone means the name is the last path segment.
        if name.starts_with(|c: char| c.is_ascii_digit()) {
            let path = id.rsplit_once('#')?.0;
            return path.rsplit('/').next().map(str::to_string);
        }
        return Some(name.to_string());
    }
    id.split_whitespace().next().map(str::to_string)
}

/// The test names in `binary` (`--list --format terse`).
fn list(binary: &Path, dir: &Path) -> Result<Vec<String>> {
    let out = Command::new(binary)
        .args(["--list", "--format", "terse"])
        .current_dir(dir)
        .output()
        .with_context(|| format!("listing the tests of {}", binary.display()))?;
    if !out.status.success() {
        bail!("{} --list failed: {}", binary.display(), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_kernel_tests_run_only_on_their_kernel() {
        let (clock, clock_line) = ONE_KERNEL[1];
        let suite = |filters: &[&str]| Suite {
            name: "netns".into(),
            binary: "/b".into(),
            cwd: "/".into(),
            filters: filters.iter().map(|f| f.to_string()).collect(),
            exact: true,
            threads: 1,
            env: Vec::new(),
        };
        let all = [suite(&["vm::netem::x", clock]), suite(&[clock])];
        for line in KernelLine::ALL {
            let got = for_kernel(&all, line);
            if line == clock_line {
                assert_eq!(got.len(), 2);
                assert_eq!(got[0].filters, ["vm::netem::x", clock]);
            } else {
                assert_eq!(got.len(), 1, "the clock-only suite is dropped on {line:?}");
                assert_eq!(got[0].filters, ["vm::netem::x"]);
            }
        }
    }

    #[test]
    fn a_one_kernel_test_that_no_selection_lists_is_named() {
        let mut listed: Vec<String> = ONE_KERNEL.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(unlisted_one_kernel_test(&listed), None);
        let gone = listed.remove(1);
        assert_eq!(unlisted_one_kernel_test(&listed), Some(gone.as_str()));
    }

    #[test]
    fn package_names_are_read_from_both_id_forms() {
        assert_eq!(
            package_name("path+file:///w/tests#causeway-tests@0.1.0").as_deref(),
            Some("causeway-tests")
        );
        assert_eq!(
            package_name("path+file:///w/userspace/causeway#0.1.0").as_deref(),
            Some("causeway")
        );
        assert_eq!(
            package_name("causeway 0.1.0 (path+file:///w)").as_deref(),
            Some("causeway")
        );
    }

    #[test]
    fn only_integration_executables_are_taken() {
        let lines = concat!(
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#causeway-tests@0.1.0","target":{"name":"integration"},"executable":"/w/target/debug/deps/integration-1"}"#,
            "\n",
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#causeway-tests@0.1.0","target":{"name":"causeway_tests"},"executable":"/w/target/debug/deps/causeway_tests-2"}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
        );
        assert_eq!(
            executables(lines),
            [(
                "causeway-tests".to_string(),
                PathBuf::from("/w/target/debug/deps/integration-1")
            )]
        );
    }
}
