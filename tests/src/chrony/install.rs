//! Getting chrony onto the machine without it ever running on the host:
//! the Debian package starts its service on install, and a chronyd without
//! `-x` would adjust the host clock (we run with CAP_SYS_TIME).

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use nix::{
    fcntl::{Flock, FlockArg},
    sys::signal,
    unistd::Pid,
};

use super::ChronyError;

/// Where Debian's `invoke-rc.d` asks whether a service may start.
const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";

/// The chrony binaries.
#[derive(Debug, Clone)]
pub struct Programs {
    pub chronyd: PathBuf,
    pub chronyc: PathBuf,
}

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn programs() -> Option<Programs> {
    Some(Programs {
        chronyd: find_program("chronyd")?,
        chronyc: find_program("chronyc")?,
    })
}

/// Finds chronyd and chronyc; when missing, installs the Debian package
/// with every service start denied, then stops any chronyd that could
/// adjust the host clock.
pub fn ensure_installed() -> Result<Programs, ChronyError> {
    if let Some(p) = programs() {
        return Ok(p);
    }
    if !nix::unistd::geteuid().is_root() {
        return Err(ChronyError::NotRoot);
    }
    // One installer at a time (threads and processes: flock excludes every
    // other open of the file): a second one would move the first one's
    // policy-rc.d aside as if it were the system's.
    let lock_path = std::env::temp_dir().join("causeway-chrony-install.lock");
    let what = format!("lock {}", lock_path.display());
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| ChronyError::io(what.clone(), e))?;
    let _one_installer = Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, errno)| ChronyError::io(what, errno.into()))?;
    if let Some(p) = programs() {
        return Ok(p);
    }
    eprintln!("chrony: installing the Debian package (service starts denied)");
    let installed = {
        let _deny = DenyServiceStarts::engage(Path::new(POLICY_RC_D))?;
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "chrony"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| ChronyError::io("run apt-get", e))?
    };
    stop_clock_adjusting_chronyds()?;
    if !installed.status.success() {
        return Err(ChronyError::Install {
            status: installed.status,
            stderr: String::from_utf8_lossy(&installed.stderr)
                .trim()
                .to_string(),
        });
    }
    programs().ok_or(ChronyError::Missing("chronyd or chronyc"))
}

/// Stops (SIGTERM) every chronyd that may adjust the host clock and waits
/// up to 5 s for them to go.
fn stop_clock_adjusting_chronyds() -> Result<(), ChronyError> {
    let found = clock_adjusting_chronyds();
    for (pid, cmdline) in &found {
        eprintln!("chrony: stopping a chronyd that may adjust the host clock: {pid} {cmdline}");
        let _ = signal::kill(Pid::from_raw(*pid), signal::Signal::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = clock_adjusting_chronyds();
        match left.first() {
            None => return Ok(()),
            Some(&(pid, _)) if Instant::now() >= deadline => {
                return Err(ChronyError::HostChronyd { pid })
            }
            Some(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
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

/// A `policy-rc.d` that denies every service start (exit 101) while it
/// lives; a file already there is moved aside and put back on drop.
pub struct DenyServiceStarts {
    path: PathBuf,
    saved: Option<PathBuf>,
}

impl DenyServiceStarts {
    pub fn engage(path: &Path) -> Result<Self, ChronyError> {
        let saved = if path.symlink_metadata().is_ok() {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let aside = path.with_file_name(format!("{name}.causeway-saved"));
            if aside.symlink_metadata().is_ok() {
                return Err(ChronyError::PolicyAside(aside));
            }
            fs::rename(path, &aside)
                .map_err(|e| ChronyError::io(format!("move {} aside", path.display()), e))?;
            Some(aside)
        } else {
            None
        };
        let guard = DenyServiceStarts {
            path: path.to_path_buf(),
            saved,
        };
        let what = |e| ChronyError::io(format!("write {}", path.display()), e);
        fs::write(
            path,
            "#!/bin/sh\n# causeway-tests: no service starts now\nexit 101\n",
        )
        .map_err(what)?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).map_err(what)?;
        Ok(guard)
    }
}

impl Drop for DenyServiceStarts {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        if let Some(aside) = &self.saved {
            if let Err(e) = fs::rename(aside, &self.path) {
                eprintln!(
                    "chrony: cannot restore {} from {}: {e}",
                    self.path.display(),
                    aside.display()
                );
            }
        }
    }
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

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cw-policy-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn denies_starts_and_removes_its_file() {
        let dir = scratch("new");
        let path = dir.join("policy-rc.d");
        {
            let _g = DenyServiceStarts::engage(&path).expect("engage");
            let out = Command::new(&path).status().expect("run policy-rc.d");
            assert_eq!(out.code(), Some(101));
        }
        assert!(!path.exists());
        fs::remove_dir_all(dir).expect("clean up");
    }

    #[test]
    fn puts_an_existing_policy_back() {
        let dir = scratch("old");
        let path = dir.join("policy-rc.d");
        fs::write(&path, "#!/bin/sh\nexit 0\n").expect("write");
        {
            let _g = DenyServiceStarts::engage(&path).expect("engage");
            assert!(fs::read_to_string(&path)
                .expect("read")
                .contains("exit 101"));
        }
        assert_eq!(
            fs::read_to_string(&path).expect("read"),
            "#!/bin/sh\nexit 0\n"
        );
        assert_eq!(fs::read_dir(&dir).expect("list").count(), 1);
        fs::remove_dir_all(dir).expect("clean up");
    }

    #[test]
    fn never_saves_over_a_saved_policy() {
        let dir = scratch("twice");
        let path = dir.join("policy-rc.d");
        fs::write(&path, "#!/bin/sh\nexit 0\n").expect("write");
        {
            let _first = DenyServiceStarts::engage(&path).expect("engage");
            let second = DenyServiceStarts::engage(&path).map(|_| ());
            assert!(
                matches!(second, Err(ChronyError::PolicyAside(_))),
                "{second:?}"
            );
            assert!(fs::read_to_string(&path)
                .expect("read")
                .contains("exit 101"));
        }
        assert_eq!(
            fs::read_to_string(&path).expect("read"),
            "#!/bin/sh\nexit 0\n"
        );
        fs::remove_dir_all(dir).expect("clean up");
    }
}
