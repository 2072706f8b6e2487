//! The root gate. Tests that need root (namespaces, BPF, raw sockets) call
//! [`require_root!`] first. Not root: under CI (`CI` set to `true`/`1`, as
//! CI services and `.ci/run` do) the test fails; otherwise it prints
//! `SKIP: <test> needs root` to stderr and returns early, so that a
//! developer without privileges sees what did not run.

use std::io::Write;

/// Whether the effective user is root.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Whether this runs under CI (`CI=true` or `CI=1`).
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// True when `test` may run. Not root: panics under CI, otherwise prints a
/// `SKIP` line and returns false.
pub fn root_or_skip(test: &str) -> bool {
    gate(test, is_root(), under_ci())
}

fn gate(test: &str, root: bool, ci: bool) -> bool {
    if root {
        return true;
    }
    assert!(
        !ci,
        "{test} needs root (network namespaces, BPF); CI must run the suite as root, a skip would pass silently"
    );
    // Straight to the stderr handle, not `eprintln!`: libtest captures the
    // macros' output of passing tests, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIP: {test} needs root (network namespaces, BPF)"
    );
    false
}

/// The name of the running test, as libtest names its thread (falls back
/// to `fallback` when the harness runs tests on the main thread).
pub fn current_test(fallback: &str) -> String {
    match std::thread::current().name() {
        Some(n) if n != "main" => n.to_string(),
        _ => fallback.to_string(),
    }
}

/// Returns from the calling test unless it may run as root (see
/// [`root_or_skip`]): `require_root!();` or `require_root!("what")`.
#[macro_export]
macro_rules! require_root {
    () => {
        if !$crate::root::root_or_skip(&$crate::root::current_test(module_path!())) {
            return;
        }
    };
    ($test:expr) => {
        if !$crate::root::root_or_skip($test) {
            return;
        }
    };
}

#[cfg(test)]
mod tests {
    use super::gate;

    #[test]
    fn root_always_runs() {
        assert!(gate("t", true, false));
        assert!(gate("t", true, true));
    }

    #[test]
    fn without_root_a_developer_run_skips() {
        assert!(!gate("t", false, false));
    }

    #[test]
    #[should_panic(expected = "CI must run the suite as root")]
    fn without_root_a_ci_run_fails() {
        gate("t", false, true);
    }
}
