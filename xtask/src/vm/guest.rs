//! What runs inside each guest: the host-built test binaries (the same
//! binaries and the same embedded eBPF object as on the host), each with its
//! libtest filters, one suite after another, written as a shell script that
//! the guest's `/init` runs inside the host root (chroot, read-only 9p).
//!
//! Every suite prints `CW-VM-SUITE <name> <status>` when it ends, which the
//! host reads back from the console to name the suites that failed.

use std::{fmt::Write as _, path::PathBuf};

/// The guest script's first line: the kernel booted and the script runs.
pub const STARTED_MARKER: &str = "guest: kernel";

/// One test binary and the tests of it to run in the guest.
#[derive(Clone, Debug)]
pub struct Suite {
    pub name: String,
    pub binary: PathBuf,
    /// The package directory (cargo runs integration tests there).
    pub cwd: PathBuf,
    /// libtest filters (a test runs if its name contains any of them).
    pub filters: Vec<String>,
    /// `--exact` matching of the filters.
    pub exact: bool,
    pub threads: u32,
    /// Extra environment (`KEY=value`).
    pub env: Vec<(String, String)>,
}

pub const SUITE_MARKER: &str = "CW-VM-SUITE ";

/// The guest script for `suites`; `kernel` is the line's name (exported as
/// `CAUSEWAY_VM_KERNEL` for tests that record per-kernel facts), `writable`
/// the directories that get a tmpfs (e.g. cargo's target tmp dir), `ci`
/// whether CI=true is passed in (root-only tests then fail instead of
/// skipping).
pub fn script(
    kernel: &str,
    suites: &[Suite],
    writable: &[PathBuf],
    out_dir: &str,
    ci: bool,
) -> String {
    let mut s = preamble(kernel, writable, out_dir, ci);
    s.push_str("status=0\n");
    for suite in suites {
        let _ = writeln!(s, "echo '=== suite {}'", suite.name);
        let _ = write!(s, "(cd '{}' &&", suite.cwd.display());
        for (k, v) in &suite.env {
            let _ = write!(s, " {k}='{v}'");
        }
        let _ = write!(
            s,
            " '{}' --color never --test-threads={}",
            suite.binary.display(),
            suite.threads
        );
        if suite.exact {
            // Exact names chosen on the host, ignored ones included (tests
            // that need what only the VM stage provides are #[ignore]d).
            s.push_str(" --exact --include-ignored");
        }
        for f in &suite.filters {
            let _ = write!(s, " '{f}'");
        }
        s.push_str(")\n");
        let _ = writeln!(
            s,
            "rc=$?; echo \"{SUITE_MARKER}{} $rc\"; [ $rc -eq 0 ] || status=1",
            suite.name
        );
    }
    s.push_str("exit $status\n");
    s
}

/// The first lines of every guest script (tests and benches): the
/// environment, tmpfs over `writable`, loopback up, and [`STARTED_MARKER`].
pub fn preamble(kernel: &str, writable: &[PathBuf], out_dir: &str, ci: bool) -> String {
    let mut s = String::from("#!/bin/sh\n# Written by `cargo xtask`; runs inside the guest.\n");
    s.push_str("export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n");
    s.push_str("export HOME=/tmp RUST_BACKTRACE=1 NO_COLOR=1\n");
    let _ = writeln!(
        s,
        "export CAUSEWAY_VM_KERNEL='{kernel}' CAUSEWAY_VM_OUT='{out_dir}'"
    );
    if ci {
        s.push_str("export CI=true\n");
    }
    for dir in writable {
        let _ = writeln!(s, "mount -t tmpfs vmtmp '{}' 2>/dev/null", dir.display());
    }
    s.push_str("ip link set lo up\n");
    s.push_str(&format!(
        "echo \"{STARTED_MARKER} $(uname -r), $(nproc) cpus\"\n"
    ));
    s
}

/// The suites whose `CW-VM-SUITE` line has a non-zero status, and those
/// that never reported (the guest died in them).
pub fn failed_suites(console: &str, suites: &[Suite]) -> Vec<String> {
    suites
        .iter()
        .filter_map(|suite| {
            let status = console.lines().rev().find_map(|l| {
                let rest = l.trim().strip_prefix(SUITE_MARKER)?;
                let (name, code) = rest.rsplit_once(' ')?;
                (name == suite.name).then(|| code.trim().to_string())
            });
            match status.as_deref() {
                Some("0") => None,
                Some(code) => Some(format!("{} (exit {code})", suite.name)),
                None => Some(format!("{} (did not finish)", suite.name)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite(name: &str) -> Suite {
        Suite {
            name: name.into(),
            binary: "/w/target/debug/deps/integration-1".into(),
            cwd: "/w/tests".into(),
            filters: vec!["cli::".into()],
            exact: false,
            threads: 1,
            env: vec![("A".into(), "b".into())],
        }
    }

    #[test]
    fn the_script_runs_each_suite_in_its_package_dir_and_reports_its_status() {
        let s = script(
            "6.1",
            &[suite("netns")],
            &["/w/target/tmp".into()],
            "/w/target/vm/run",
            true,
        );
        assert!(s.contains("export CI=true"));
        assert!(s.contains("mount -t tmpfs vmtmp '/w/target/tmp'"));
        assert!(s.contains("(cd '/w/tests' && A='b' '/w/target/debug/deps/integration-1' --color never --test-threads=1 'cli::')"));
        assert!(s.contains("echo \"CW-VM-SUITE netns $rc\""));
        assert!(s.ends_with("exit $status\n"));
    }

    #[test]
    fn failed_and_unfinished_suites_are_named() {
        let suites = [suite("a"), suite("b"), suite("c")];
        let console = "CW-VM-SUITE a 0\r\nCW-VM-SUITE b 101\n";
        assert_eq!(
            failed_suites(console, &suites),
            ["b (exit 101)", "c (did not finish)"]
        );
    }
}
