//! Finding chrony's programs, and any chronyd that could adjust the host
//! clock. `cargo xtask setup` installs chrony (with every service start
//! denied, so no chronyd ever runs on the host); nothing here installs.

use std::{fs, path::PathBuf};

use super::ChronyError;

/// The chrony binaries.
#[derive(Debug, Clone)]
pub struct Programs {
    pub chronyd: PathBuf,
    pub chronyc: PathBuf,
}

fn find_program(name: &'static str) -> Result<PathBuf, ChronyError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(ChronyError::Missing(name))
}

/// chronyd and chronyc, or which one is missing.
pub fn installed() -> Result<Programs, ChronyError> {
    Ok(Programs {
        chronyd: find_program("chronyd")?,
        chronyc: find_program("chronyc")?,
    })
}

/// Running chronyd processes started without `-x` (pid, command line).
pub fn clock_adjusting_chronyds() -> Vec<(i32, String)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let dir = entry.path();
        let is_chronyd = fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim() == "chronyd");
        // A zombie or exiting process has an empty command line.
        let Ok(raw) = fs::read(dir.join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if is_chronyd && !args.is_empty() && !never_adjusts_clock(&args) {
            found.push((pid, args.join(" ")));
        }
    }
    found
}

/// Whether a chronyd command line carries `-x` (alone or in a cluster of
/// chronyd's argument-less flags such as `-dx`).
pub fn never_adjusts_clock(args: &[String]) -> bool {
    args.iter().skip(1).any(|a| {
        a == "-x"
            || (a.len() > 2
                && a.starts_with('-')
                && !a.starts_with("--")
                && a.contains('x')
                && a[1..].chars().all(|c| "46dmnqQrRsx".contains(c)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn only_x_keeps_the_clock_free() {
        assert!(never_adjusts_clock(&args("chronyd -x -d -f /tmp/c.conf")));
        assert!(never_adjusts_clock(&args("/usr/sbin/chronyd -dx")));
        assert!(!never_adjusts_clock(&args("/usr/sbin/chronyd -F 1")));
        assert!(!never_adjusts_clock(&args("chronyd -f /tmp/x.conf")));
        assert!(!never_adjusts_clock(&args("chronyd -u x")));
        assert!(!never_adjusts_clock(&args("chronyd --x")));
        // The program name itself is not an option.
        assert!(!never_adjusts_clock(&args("-x")));
    }
}
