//! Booting one guest under qemu: KVM where it works, TCG otherwise; no
//! network device (all traffic stays inside the guest's namespaces); the
//! host root shared read-only over 9p plus one writable share for the
//! run's output; the serial console in a log file, echoed live and read
//! for the exit status; a guest still running after the timeout is killed.

use std::{
    fs,
    io::{Read, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

/// The last console line of a guest that finished: `CW-VM-EXIT <status>`.
pub const EXIT_MARKER: &str = "CW-VM-EXIT ";

pub struct Boot<'a> {
    pub vmlinuz: &'a Path,
    pub initramfs: &'a Path,
    /// The guest script (a host path, seen at the same path in the guest).
    pub script: &'a Path,
    /// Writable in the guest, at the same path.
    pub out_dir: &'a Path,
    pub console_log: PathBuf,
    pub memory_mib: u32,
    pub cpus: u32,
    pub timeout: Duration,
    /// Longest silence on the console before the guest is taken as hung.
    pub stall: Duration,
    /// Where the console is echoed as it arrives.
    pub echo: Echo,
}

/// Where a guest's console goes besides its log file.
pub enum Echo {
    Off,
    Stderr,
    /// Complete lines printed above a progress bar (the partial last line
    /// waits in the cell for its end).
    AboveBar(indicatif::ProgressBar, std::cell::RefCell<String>),
}

impl Echo {
    fn write(&self, text: &str) {
        match self {
            Echo::Off => {}
            Echo::Stderr => {
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(text.as_bytes());
            }
            Echo::AboveBar(bar, pending) => {
                let mut p = pending.borrow_mut();
                p.push_str(text);
                if let Some(end) = p.rfind('\n') {
                    bar.println(&p[..end]);
                    p.drain(..=end);
                }
            }
        }
    }
}

/// How a guest ended.
#[derive(Debug)]
pub struct Outcome {
    /// The guest script's exit status.
    pub status: i32,
    pub accel: &'static str,
    pub wall: Duration,
}

/// Whether KVM can be used: /dev/kvm opens read-write and is not only
/// PVM's. A host whose KVM is `kvm_pvm` alone (pagetable-based
/// virtualization, no VMX/SVM: this machine) runs only PVM-aware guest
/// kernels, which Debian's are not; qemu then aborts on the first MSR.
fn kvm_usable() -> bool {
    let module = |m: &str| Path::new("/sys/module").join(m).exists();
    if module("kvm_pvm") && !module("kvm_intel") && !module("kvm_amd") {
        eprintln!("vm: /dev/kvm is kvm_pvm only (no VMX/SVM), which Debian kernels cannot use as guests: TCG");
        return false;
    }
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

/// Boots under KVM when /dev/kvm opens, falling back to TCG if KVM fails
/// before the guest printed anything (a nested host may open /dev/kvm and
/// still refuse the CPU, as this one does); TCG otherwise.
pub fn run(boot: &Boot<'_>) -> Result<Outcome> {
    if kvm_usable() {
        match run_with(boot, "kvm") {
            Err(e) if fs::metadata(&boot.console_log).is_ok_and(|m| m.len() == 0) => {
                eprintln!("vm: KVM did not boot the guest, using TCG ({e:#})");
            }
            other => return other,
        }
    }
    run_with(boot, "tcg")
}

fn run_with(boot: &Boot<'_>, accel: &'static str) -> Result<Outcome> {
    let console = fs::File::create(&boot.console_log)
        .with_context(|| format!("creating {}", boot.console_log.display()))?;
    drop(console);
    let cmdline = format!(
        "console=ttyS0 quiet loglevel=4 panic=-1 rdinit=/init cw_script={} cw_out={} cw_root={}",
        boot.script.display(),
        boot.out_dir.display(),
        crate::cmd::root().display()
    );
    let mut c = Command::new("qemu-system-x86_64");
    c.args([
        "-nodefaults",
        "-no-reboot",
        "-display",
        "none",
        "-nic",
        "none",
    ])
    // With kvm first, qemu falls back to TCG if KVM cannot start.
    .args(["-accel", accel, "-accel", "tcg", "-cpu", "max"])
    .args([
        "-m",
        &boot.memory_mib.to_string(),
        "-smp",
        &boot.cpus.to_string(),
    ])
    .arg("-kernel")
    .arg(boot.vmlinuz)
    .arg("-initrd")
    .arg(boot.initramfs)
    .args(["-append", &cmdline])
    .args([
        "-virtfs",
        "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
    ])
    .arg("-virtfs")
    .arg(format!(
        "local,path={},mount_tag=vmout,security_model=none",
        boot.out_dir.display()
    ))
    .arg("-chardev")
    .arg(format!("file,id=con,path={}", boot.console_log.display()))
    .args(["-serial", "chardev:con"])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = c.spawn().context(
        "starting qemu-system-x86_64 (apt package qemu-system-x86; run `cargo xtask setup`)",
    )?;
    let mut seen = 0u64;
    let mut tail = String::new();
    let mut exit = None;
    let mut last_output = Instant::now();
    let status = loop {
        let before = seen;
        echo_new(&boot.console_log, &mut seen, &mut tail, &boot.echo)?;
        if seen > before {
            last_output = Instant::now();
        }
        if exit.is_none() {
            exit = exit_status(&tail);
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        let why = if started.elapsed() > boot.timeout {
            Some(format!("did not finish within {:?}", boot.timeout))
        } else if last_output.elapsed() > boot.stall {
            Some(format!(
                "printed nothing for {:?} (hung?) after {:.0?}",
                boot.stall,
                started.elapsed()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            let _ = child.kill();
            let _ = child.wait();
            echo_new(&boot.console_log, &mut seen, &mut tail, &Echo::Off)?;
            // The last lines first: a log excerpt is often cut at its end.
            bail!(
                "the guest {why} and was killed; the last test lines: {}; its console log ({}) ends with:\n{}",
                last_test_lines(&tail, 4),
                boot.console_log.display(),
                last_lines(&tail, 60)
            );
        }
        thread::sleep(Duration::from_millis(200));
    };
    echo_new(&boot.console_log, &mut seen, &mut tail, &boot.echo)?;
    let exit = exit.or_else(|| exit_status(&tail));
    let mut qemu_err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut qemu_err);
    }
    let Some(code) = exit else {
        bail!(
            "qemu ended ({status}) without the guest reporting an exit status; qemu said: {}\nconsole log ({}) ends with:\n{}",
            qemu_err.trim(),
            boot.console_log.display(),
            last_lines(&tail, 60)
        );
    };
    Ok(Outcome {
        status: code,
        accel,
        wall: started.elapsed(),
    })
}

/// Reads what the console log gained since `seen`, echoes it, and keeps
/// the last part in `tail`.
fn echo_new(log: &Path, seen: &mut u64, tail: &mut String, echo: &Echo) -> Result<()> {
    let mut f = fs::File::open(log).with_context(|| format!("reading {}", log.display()))?;
    f.seek(SeekFrom::Start(*seen))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    if buf.is_empty() {
        return Ok(());
    }
    *seen += buf.len() as u64;
    let text = String::from_utf8_lossy(&buf);
    echo.write(&text.replace('\r', ""));
    tail.push_str(&text.replace('\r', ""));
    const KEEP: usize = 64 * 1024;
    if tail.len() > KEEP {
        let cut = tail.len() - KEEP;
        let cut = (cut..tail.len())
            .find(|&i| tail.is_char_boundary(i))
            .unwrap_or(0);
        tail.drain(..cut);
    }
    Ok(())
}

/// The status in the last `CW-VM-EXIT <n>` line, if any.
pub fn exit_status(console: &str) -> Option<i32> {
    console
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix(EXIT_MARKER.trim_end()))
        .and_then(|rest| rest.trim().parse().ok())
}

/// The last `n` lines of test output (`test ...`, suite markers), on one line.
fn last_test_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("test ") || l.starts_with("=== suite"))
        .collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_status_is_the_last_marker_on_the_console() {
        assert_eq!(exit_status("boot\nCW-VM-EXIT 0\n"), Some(0));
        assert_eq!(exit_status("CW-VM-EXIT 1\r\nreboot: Power down\n"), Some(1));
        assert_eq!(exit_status("echo CW-VM-EXIT\n"), None);
        assert_eq!(exit_status("kernel panic\n"), None);
    }
}
