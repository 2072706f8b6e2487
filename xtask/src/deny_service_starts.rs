//! Debian starts a package's service when it is installed. None of ours may
//! run — above all a chronyd without `-x`, which would adjust the host clock
//! (we run with CAP_SYS_TIME) — so `setup` installs packages under a
//! `policy-rc.d` that denies every start (as Docker images do). A policy
//! already in place is moved aside and put back afterwards, whatever it
//! allowed.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};

/// Where Debian's `invoke-rc.d` asks whether a service may start.
pub const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";

/// Denies every service start while it lives.
pub struct DenyServiceStarts {
    path: PathBuf,
    saved: Option<PathBuf>,
}

impl DenyServiceStarts {
    /// Writes a denying `policy-rc.d` at `path`, moving an existing one
    /// aside (refused if an earlier, interrupted run left one aside: that
    /// file is the system's and must not be overwritten).
    pub fn engage(path: &Path) -> Result<Self> {
        let saved = if path.symlink_metadata().is_ok() {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let aside = path.with_file_name(format!("{name}.causeway-saved"));
            if aside.symlink_metadata().is_ok() {
                bail!(
                    "{} exists: an earlier setup was interrupted; move it back to {} by hand",
                    aside.display(),
                    path.display()
                );
            }
            fs::rename(path, &aside).with_context(|| format!("moving {} aside", path.display()))?;
            Some(aside)
        } else {
            None
        };
        let guard = DenyServiceStarts {
            path: path.to_path_buf(),
            saved,
        };
        fs::write(
            path,
            "#!/bin/sh\n# causeway setup: no service starts while installing\nexit 101\n",
        )
        .with_context(|| format!("writing {}", path.display()))?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {} executable", path.display()))?;
        Ok(guard)
    }
}

impl Drop for DenyServiceStarts {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        if let Some(aside) = &self.saved {
            if let Err(e) = fs::rename(aside, &self.path) {
                eprintln!(
                    "setup: cannot restore {} from {}: {e}",
                    self.path.display(),
                    aside.display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

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
            let err = second.expect_err("a second engage is refused");
            assert!(err.to_string().contains("interrupted"), "{err}");
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
