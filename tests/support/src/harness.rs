//! Test names as libtest prints and filters them.

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
