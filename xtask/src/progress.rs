//! Progress bars of the long commands (setup, benches, vm-test, demo):
//! drawn only when both stdout and stderr are terminals, so CI logs and
//! redirected output get the plain lines instead.

use std::{
    io::{BufRead, BufReader, IsTerminal, Read},
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cmd;

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

/// Names the step now running: the bar's message, or a line on stderr when
/// the bar is hidden (so logs keep the plain progress lines).
pub fn now(bar: &ProgressBar, what: String) {
    if bar.is_hidden() {
        eprintln!("{}: {what}", bar.prefix());
    } else {
        bar.set_message(what);
    }
}

/// Runs a long child (a `cargo bench` of the tests crate, say) under a
/// spinner named `prefix` that shows the elapsed time, how many lines the
/// child has printed and its last one; every line is printed above the
/// spinner as it comes. When not [`interactive`], the child simply inherits
/// our output ([`cmd::run`]).
pub fn run_child(cmd: &mut Command, prefix: &str) -> Result<()> {
    if !interactive() {
        return cmd::run(cmd);
    }
    cmd.current_dir(cmd::root());
    let what = cmd::describe(cmd);
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {prefix} {elapsed_precise} {pos} lines {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_prefix(prefix.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar.println(format!("+ {what}"));
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{what}`"))?;
    let (tx, rx) = mpsc::channel::<String>();
    let pipes: Vec<Box<dyn Read + Send>> = vec![
        Box::new(child.stdout.take().context("child stdout")?),
        Box::new(child.stderr.take().context("child stderr")?),
    ];
    let readers: Vec<_> = pipes
        .into_iter()
        .map(|pipe| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    drop(tx);
    for line in rx {
        bar.println(&line);
        bar.inc(1);
        bar.set_message(line);
    }
    for r in readers {
        let _ = r.join();
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for `{what}`"))?;
    bar.finish_and_clear();
    if !status.success() {
        bail!("`{what}` failed: {status}");
    }
    Ok(())
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

    #[test]
    fn a_child_run_under_a_spinner_reports_its_failure() {
        assert!(run_child(Command::new("true").arg("ok"), "test").is_ok());
        let err = run_child(&mut Command::new("false"), "test").unwrap_err();
        assert!(format!("{err:#}").contains("false"), "{err:#}");
    }
}
