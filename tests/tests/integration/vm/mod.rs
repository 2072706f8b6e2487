//! Facts that differ between kernels, checked on whichever kernel runs the
//! test: on the host, and on Debian's 6.1, 6.12 and 7.x inside the VM stage
//! (`cargo xtask vm-test`), where each test also prints `CW-FACT` lines
//! that docs/KERNELS.md tabulates.

mod attach_modes;
mod clock_wan;
mod collective_wan;
mod edt;
mod netem;
mod verifier;

/// `uname -r` as (major, minor).
pub fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let mut parts = release.trim().split(['.', '-']);
    let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (next(), next())
}

/// Records one fact for the kernel table, `CW-FACT <kernel> <key> <value>`:
/// printed, and appended to `$CAUSEWAY_VM_OUT/facts.txt` in the VM stage
/// (which the host prints after the run: libtest hides a passing test's output).
pub fn fact(key: &str, value: impl std::fmt::Display) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let line = format!("CW-FACT {} {key} {value}", release.trim());
    println!("{line}");
    if let Some(dir) = std::env::var_os("CAUSEWAY_VM_OUT") {
        use std::io::Write as _;
        let path = std::path::Path::new(&dir).join("facts.txt");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("open facts.txt");
        writeln!(f, "{line}").expect("write facts.txt");
    }
}
