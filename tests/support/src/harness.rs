//! Test names as libtest prints and filters them; benchmark knobs.

/// `CAUSEWAY_BENCH_REPEAT` (BPF_PROG_TEST_RUN repeat count of the
/// benchmarks) or `default` when unset or not a number.
pub fn bench_repeat(default: u32) -> u32 {
    std::env::var("CAUSEWAY_BENCH_REPEAT")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default)
}

/// The harness name of test `name` in the module whose `module_path!()` is
/// `module` (libtest leaves out the crate): for re-running one test of the
/// current binary with `--exact`.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, rest)) => format!("{rest}::{name}"),
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::test_name;

    #[test]
    fn the_crate_is_left_out() {
        assert_eq!(test_name("netns", "child"), "child");
        assert_eq!(
            test_name("netns::netsim::panic", "child"),
            "netsim::panic::child"
        );
    }
}
