//! `cargo xtask vm-test`: the project's own test binaries, built once on the
//! host, run inside qemu guests booting Debian's 6.1, 6.12 and 7.x kernels.
//!
//! ```text
//! build test binaries (host) → per kernel: resolve + cache the kernel (kernel.rs)
//!   → initramfs with its modules (initramfs.rs) → guest script (guest.rs)
//!   → boot under qemu with a timeout (qemu.rs) → exit status + failed suites
//! ```
//! Everything it makes lives under `target/vm/`: `apt/` (private apt
//! state), `kernels/<version>/` (unpacked packages, initramfs), `run/<line>/`
//! (the guest script, its console log, files the guest writes).

mod guest;
mod initramfs;
mod kernel;
mod qemu;
mod suites;

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use clap::Args;

pub use kernel::KernelLine;

use crate::{cmd, progress};

#[derive(Args, Clone)]
pub struct VmTestArgs {
    /// Which kernel line to boot (`all`: 6.1, 6.12 and 7.x one after another).
    #[arg(long, default_value = "all")]
    pub kernel: KernelChoice,
    /// Run only the selected tests whose name contains PATTERN.
    #[arg(long)]
    pub filter: Option<String>,
    /// Keep `target/vm/run/<kernel>/` (script, console log, guest output)
    /// after a passing run too (a failing run always keeps it).
    #[arg(long)]
    pub keep: bool,
    /// Seconds a guest may run before it is killed and reported.
    #[arg(long, default_value_t = 1800)]
    pub timeout: u64,
    /// Seconds a guest may go without printing before it is taken as hung,
    /// killed and reported (a slow guest keeps printing test results).
    #[arg(long, default_value_t = 600)]
    pub stall: u64,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 2048)]
    pub memory: u32,
}

impl VmTestArgs {
    /// The VM stage of `cargo xtask test`: every kernel, the default selection.
    pub fn stage() -> Self {
        Self {
            kernel: KernelChoice::All,
            filter: None,
            keep: false,
            timeout: 1800,
            stall: 600,
            memory: 2048,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KernelChoice {
    #[value(name = "6.1")]
    V6_1,
    #[value(name = "6.12")]
    V6_12,
    #[value(name = "7.x")]
    V7,
    All,
}

impl KernelChoice {
    fn lines(self) -> Vec<KernelLine> {
        match self {
            Self::V6_1 => vec![KernelLine::V6_1],
            Self::V6_12 => vec![KernelLine::V6_12],
            Self::V7 => vec![KernelLine::V7],
            Self::All => KernelLine::ALL.to_vec(),
        }
    }
}

/// The result of one kernel.
struct KernelResult {
    line: KernelLine,
    version: String,
    outcome: Result<(qemu::Outcome, Vec<String>)>,
}

pub fn run(args: &VmTestArgs) -> Result<()> {
    if !cmd::is_root() {
        bail!("vm-test needs root (qemu shares the host root filesystem over 9p, the guest runs root-only tests)");
    }
    let started = Instant::now();
    let vm_dir = target_dir().join("vm");
    let suites = suites::build_and_select(args.filter.as_deref())?;
    if suites.is_empty() {
        bail!(
            "no test matches --filter {:?}",
            args.filter.as_deref().unwrap_or("")
        );
    }
    let mut results = Vec::new();
    let lines = args.kernel.lines();
    // Per kernel: fetch, initramfs, boot + tests (the console above the bar).
    let bar = progress::steps(3 * lines.len() as u64, "vm-test");
    for line in lines {
        progress::say(&bar, &format!("vm: === kernel {} ===", line.name()));
        let on_line = suites::for_kernel(&suites, line);
        if on_line.is_empty() {
            progress::say(
                &bar,
                &format!(
                    "vm: no selected test runs on {} (see suites::ONE_KERNEL)",
                    line.name()
                ),
            );
            bar.inc(3);
            continue;
        }
        bar.set_message(format!("kernel {}: fetching", line.name()));
        let fetched = bar.suspend(|| kernel::fetch(&vm_dir, line));
        bar.inc(1);
        let result = match fetched {
            Ok(k) => {
                let outcome = boot_and_test(&vm_dir, &k, &on_line, args, &bar);
                KernelResult {
                    line,
                    version: k.version,
                    outcome,
                }
            }
            Err(e) => KernelResult {
                line,
                version: "(not fetched)".into(),
                outcome: Err(e),
            },
        };
        results.push(result);
    }
    bar.finish_and_clear();
    eprintln!("vm: summary (wall {:.0?}):", started.elapsed());
    let mut failures = Vec::new();
    for r in &results {
        match &r.outcome {
            Ok((o, failed)) if o.status == 0 && failed.is_empty() => eprintln!(
                "vm:   {:<5} {:<22} ok     {:>6.0?} ({})",
                r.line.name(),
                r.version,
                o.wall,
                o.accel
            ),
            Ok((o, failed)) => {
                eprintln!(
                    "vm:   {:<5} {:<22} FAILED {:>6.0?} ({}): {}",
                    r.line.name(),
                    r.version,
                    o.wall,
                    o.accel,
                    failed.join(", ")
                );
                failures.push(format!(
                    "kernel {} ({}): failed suites: {}",
                    r.line.name(),
                    r.version,
                    failed.join(", ")
                ));
            }
            Err(e) => {
                eprintln!("vm:   {:<5} {:<22} ERROR  {e:#}", r.line.name(), r.version);
                failures.push(format!("kernel {}: {e:#}", r.line.name()));
            }
        }
    }
    if !failures.is_empty() {
        bail!("the VM stage failed:\n  - {}", failures.join("\n  - "));
    }
    Ok(())
}

/// Boots one guest of `line` running the script `body` (after the common
/// [`guest::preamble`]) for a benchmark: `body` gets the guest's writable
/// output directory, which is returned with the outcome (a non-zero exit is
/// an error). Everything lives under `target/vm/run/<tag>-<line>/`.
pub fn run_script(
    line: KernelLine,
    tag: &str,
    timeout: Duration,
    body: impl FnOnce(&Path) -> String,
) -> Result<(qemu::Outcome, PathBuf)> {
    if !cmd::is_root() {
        bail!("booting a guest needs root (qemu shares the host root filesystem over 9p)");
    }
    let vm_dir = target_dir().join("vm");
    let bar = progress::steps(2, tag);
    bar.set_message(format!("kernel {}: fetching", line.name()));
    let k = bar.suspend(|| kernel::fetch(&vm_dir, line))?;
    let initrd = bar
        .suspend(|| initramfs::build(&k))
        .with_context(|| format!("building the initramfs of {}", k.version))?;
    bar.inc(1);
    bar.set_message(format!("kernel {}: running {tag}", line.name()));
    let run_dir = vm_dir.join("run").join(format!("{tag}-{}", line.name()));
    let limits = Limits {
        memory_mib: 2048,
        timeout,
        stall: Duration::from_secs(600),
    };
    let (outcome, out_dir) = boot_in(&run_dir, &k, &initrd, limits, &bar, |out| {
        let mut script = guest::preamble(line.name(), &[], &out.display().to_string(), false);
        script.push_str(&body(out));
        script
    })?;
    bar.finish_and_clear();
    eprintln!(
        "vm: {tag} on {} ({}) finished in {:.0?} under {}, exit {} (kept {})",
        line.name(),
        k.version,
        outcome.wall,
        outcome.accel,
        outcome.status,
        run_dir.display()
    );
    if outcome.status != 0 {
        bail!(
            "{tag}: the guest script exited {} (console: {})",
            outcome.status,
            run_dir.join("console.log").display()
        );
    }
    Ok((outcome, out_dir))
}

fn boot_and_test(
    vm_dir: &Path,
    k: &kernel::Kernel,
    suites: &[guest::Suite],
    args: &VmTestArgs,
    bar: &indicatif::ProgressBar,
) -> Result<(qemu::Outcome, Vec<String>)> {
    bar.set_message(format!("kernel {}: initramfs", k.line.name()));
    let initrd = bar
        .suspend(|| initramfs::build(k))
        .with_context(|| format!("building the initramfs of {}", k.version));
    bar.inc(1);
    let initrd = initrd?;
    bar.set_message(format!("kernel {}: booting and testing", k.line.name()));
    let run_dir = vm_dir.join("run").join(k.line.name());
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let writable = [target_dir().join("tmp")];
    let limits = Limits {
        memory_mib: args.memory,
        timeout: Duration::from_secs(args.timeout),
        stall: Duration::from_secs(args.stall),
    };
    let (outcome, out_dir) = boot_in(&run_dir, k, &initrd, limits, bar, |out| {
        guest::script(
            k.line.name(),
            suites,
            &writable,
            &out.display().to_string(),
            ci,
        )
    })?;
    // Facts the tests recorded for docs/KERNELS.md, kept beside the kernels.
    if let Ok(facts) = std::fs::read_to_string(out_dir.join("facts.txt")) {
        progress::say(bar, facts.trim_end());
        let kept = vm_dir.join(format!("facts-{}.txt", k.line.name()));
        let _ = std::fs::write(kept, facts);
    }
    let console = std::fs::read_to_string(run_dir.join("console.log")).unwrap_or_default();
    let failed = guest::failed_suites(&console, suites);
    progress::say(
        bar,
        &format!(
            "vm: kernel {} ({}) finished in {:.0?} under {}, exit {}",
            k.line.name(),
            k.version,
            outcome.wall,
            outcome.accel,
            outcome.status
        ),
    );
    if outcome.status == 0 && failed.is_empty() && !args.keep {
        let _ = std::fs::remove_dir_all(&run_dir);
    } else {
        progress::say(bar, &format!("vm: kept {}", run_dir.display()));
    }
    Ok((outcome, failed))
}

/// A guest's memory and time limits.
struct Limits {
    memory_mib: u32,
    timeout: Duration,
    /// Longest silence on the console before the guest is taken as hung.
    stall: Duration,
}

/// Makes `run_dir` afresh (its `out/` writable in the guest), writes the
/// guest script `script(out)` as `guest.sh` and boots `k` with it, the
/// console going to `run_dir/console.log`; returns the outcome and `out/`.
fn boot_in(
    run_dir: &Path,
    k: &kernel::Kernel,
    initrd: &Path,
    limits: Limits,
    bar: &indicatif::ProgressBar,
    script: impl FnOnce(&Path) -> String,
) -> Result<(qemu::Outcome, PathBuf)> {
    let _ = std::fs::remove_dir_all(run_dir);
    let out_dir = run_dir.join("out");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let script_path = run_dir.join("guest.sh");
    std::fs::write(&script_path, script(&out_dir))
        .with_context(|| format!("writing {}", script_path.display()))?;
    let boot = qemu::Boot {
        vmlinuz: &k.vmlinuz,
        initramfs: initrd,
        script: &script_path,
        out_dir: &out_dir,
        console_log: run_dir.join("console.log"),
        memory_mib: limits.memory_mib,
        cpus: 2,
        timeout: limits.timeout,
        stall: limits.stall,
        echo: if bar.is_hidden() {
            qemu::Echo::Stderr
        } else {
            qemu::Echo::AboveBar(bar.clone(), Default::default())
        },
    };
    Ok((boot_retrying(&boot, k.line, bar)?, out_dir))
}

/// Boots `boot`, booting again when the guest kernel itself crashed or hung
/// (not a test's fault).
fn boot_retrying(
    boot: &qemu::Boot<'_>,
    line: KernelLine,
    bar: &indicatif::ProgressBar,
) -> Result<qemu::Outcome> {
    // Multi-threaded TCG occasionally breaks the guest kernel itself (seen:
    // an int3 Oops in 7.3's sched_clock_tick while it patches static keys,
    // and a panic in 6.12's timer softirq during ACPI probing, both in the
    // first two seconds of boot). That is the emulator's fault, not a
    // test's: boot again, loudly. A crash before the guest script started
    // costs seconds, so it gets two more boots; a later crash or a stall one.
    let mut reboots = 0;
    loop {
        match qemu::run(boot) {
            Err(e) if guest_crashed(&format!("{e:#}")) => {
                let started = std::fs::read_to_string(&boot.console_log)
                    .is_ok_and(|c| c.contains(guest::STARTED_MARKER));
                let allowed = if started { 1 } else { 2 };
                if reboots >= allowed {
                    return Err(e.context(format!("after {reboots} more boots")));
                }
                reboots += 1;
                progress::say(bar, &format!(
                    "vm: kernel {}: the guest crashed or hung ({}), not a test: booting it again. Attempt {reboots}: {e:#}",
                    line.name(),
                    if started { "while testing" } else { "during boot" }
                ));
            }
            other => {
                bar.inc(1);
                return other;
            }
        }
    }
}

/// Whether a failed boot is the guest kernel's own crash or a hang (no
/// output for the stall limit), as opposed to a test that failed or ran long.
fn guest_crashed(error: &str) -> bool {
    ["Kernel panic", "Oops:", "printed nothing for"]
        .iter()
        .any(|m| error.contains(m))
}

pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cmd::root().join("target"))
}

#[cfg(test)]
mod tests {
    use super::guest_crashed;

    #[test]
    fn only_kernel_crashes_and_hangs_are_booted_again() {
        assert!(guest_crashed(
            "qemu ended ... [ 3.69] Kernel panic - not syncing"
        ));
        assert!(guest_crashed(
            "the guest printed nothing for 600s (hung?) after 700s"
        ));
        assert!(guest_crashed("[ 3.65] Oops: int3: 0000 [#1] SMP NOPTI"));
        assert!(!guest_crashed(
            "the guest did not finish within 1800s and was killed"
        ));
        assert!(!guest_crashed("suite netns failed"));
    }
}
