//! Progress bars of the long commands (setup, benches, vm-test, demo):
//! drawn only when both stdout and stderr are terminals, so CI logs and
//! redirected output get the plain lines instead.

use std::{io::IsTerminal, time::Duration};

use indicatif::{ProgressBar, ProgressStyle};

/// Whether bars are drawn at all.
pub fn interactive() -> bool {
    std::io::stdout().is_terminal() && std::io::stderr().is_terminal()
}

/// A bar of `len` steps named `prefix`, ticking while a step runs; hidden
/// when not [`interactive`].
pub fn steps(len: u64, prefix: &str) -> ProgressBar {
    let bar = if interactive() {
        ProgressBar::new(len)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {prefix} [{bar:24}] {pos}/{len} {elapsed_precise} {wide_msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_prefix(prefix.to_string());
    if !bar.is_hidden() {
        bar.enable_steady_tick(Duration::from_millis(200));
    }
    bar
}

/// Prints `line` above the bar, or to stderr when the bar is hidden.
pub fn say(bar: &ProgressBar, line: &str) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_is_hidden_exactly_when_not_interactive_and_still_counts() {
        let bar = steps(3, "test");
        assert_eq!(bar.is_hidden(), !interactive());
        bar.inc(2);
        assert_eq!(bar.position(), 2);
        say(&bar, "printed to stderr, not lost");
    }
}
