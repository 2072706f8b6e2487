//! Runs `tc` to install, change and remove the HTB hierarchy that
//! `causeway_core::shaper::htb` plans (re-exported here).
//!
//! Driven through iproute2's `tc` (with `-n NETNS` when the interface lives
//! in a named namespace) rather than a netlink crate: `netlink-packet-route`
//! has no HTB option types (`tc_htb_opt`, rate tables, 64-bit rates), so
//! using it would mean hand-encoding them; `tc` is the reference encoder and
//! its JSON qdisc listing lets us check ownership before any change.
//!
//! A hierarchy is installed with one `tc -batch FILE`, the batch written to
//! a file in a private directory (mode 0700, removed afterwards), not fed
//! through a pipe to `tc`'s stdin: nothing here writes to a pipe whose
//! reader may go away, so the CLI can keep SIGPIPE's default action (and
//! exit quietly when its own stdout closes) without a dying `tc` ending it
//! in the middle of a transaction.

use std::{
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
};

pub use causeway_core::shaper::htb::*;

/// Why the hierarchy could not be planned, installed, changed or removed.
#[derive(Debug, thiserror::Error)]
pub enum HtbError {
    #[error(transparent)]
    Plan(#[from] HtbPlanError),
    #[error("class {class} has no leaf in the installed hierarchy")]
    UnknownLeaf { class: u8 },
    #[error("{iface} already has a root qdisc {kind} {handle} that Causeway did not install; remove it first")]
    ForeignQdisc {
        iface: String,
        kind: String,
        handle: String,
    },
    #[error("could not run `tc {args}`: {source}")]
    Spawn {
        args: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`tc {args}` failed: {stderr}")]
    Tc { args: String, stderr: String },
    #[error("{iface}: this kernel has no fq qdisc (CONFIG_NET_SCH_FQ), which pacing = \"edt\" needs; use pacing = \"police\" here")]
    FqUnavailable { iface: String },
    #[error("could not read the output of `tc {args}`: {reason}")]
    Output { args: String, reason: String },
    #[error("could not write the tc batch file {path}: {source}")]
    BatchFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A `tc` batch in a file of its own private directory (0700, under the
/// system temp directory); the directory and the file are removed on drop.
struct BatchFile {
    dir: PathBuf,
    file: PathBuf,
}

impl BatchFile {
    fn write(text: &str) -> Result<Self, HtbError> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "causeway-tc-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| HtbError::BatchFile { path, source }
        };
        // `create` fails on an existing path: the directory is ours alone.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(err(&dir))?;
        let batch = Self {
            file: dir.join("batch"),
            dir,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&batch.file)
            .map_err(err(&batch.file))?;
        use std::io::Write as _;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_data())
            .map_err(err(&batch.file))?;
        Ok(batch)
    }
}

impl Drop for BatchFile {
    fn drop(&mut self) {
        // Best effort: a leftover lies in a private temp directory.
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Runs `tc` for one interface, optionally inside a named namespace.
#[derive(Clone, Debug)]
pub struct Htb {
    iface: String,
    netns: Option<String>,
}

impl Htb {
    pub fn new(iface: &str, netns: Option<&str>) -> Self {
        Self {
            iface: iface.to_string(),
            netns: netns.map(str::to_string),
        }
    }

    fn tc(&self, args: &[&str]) -> Result<String, HtbError> {
        let mut full: Vec<&str> = Vec::new();
        if let Some(ns) = &self.netns {
            full.extend(["-n", ns]);
        }
        full.extend_from_slice(args);
        let shown = full.join(" ");
        let out = Command::new("tc")
            .args(&full)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| HtbError::Spawn {
                args: shown.clone(),
                source,
            })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(HtbError::Tc {
                args: shown,
                stderr,
            });
        }
        String::from_utf8(out.stdout).map_err(|e| HtbError::Output {
            args: shown,
            reason: e.to_string(),
        })
    }

    /// Runs one `tc -batch FILE` over `batch`.
    fn tc_batch(&self, batch: &str) -> Result<(), HtbError> {
        let file = BatchFile::write(batch)?;
        let path = file.file.to_string_lossy().into_owned();
        self.tc(&["-batch", &path]).map(|_| ())
    }

    /// Who owns the interface's root qdisc now.
    pub fn owner(&self) -> Result<RootOwner, HtbError> {
        let json = self.tc(&["-j", "qdisc", "show", "dev", &self.iface])?;
        root_owner(&json).map_err(|reason| HtbError::Output {
            args: "-j qdisc show".into(),
            reason,
        })
    }

    /// Installs `plan`, replacing a previous Causeway hierarchy; refuses a
    /// foreign root qdisc. On failure nothing of the new hierarchy remains.
    pub fn install(&self, plan: &HtbPlan) -> Result<(), HtbError> {
        self.install_batch(plan, plan.batch(&self.iface))
    }

    /// Fault injection: installs `plan` with a last `tc` batch line that
    /// the kernel refuses (a second root qdisc), so that the real `tc`
    /// fails after building the hierarchy.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn install_failing(&self, plan: &HtbPlan) -> Result<(), HtbError> {
        let mut batch = plan.batch(&self.iface);
        batch += &format!(
            "qdisc add dev {} root handle {HTB_MAJOR:x}: htb\n",
            self.iface
        );
        self.install_batch(plan, batch)
    }

    fn install_batch(&self, plan: &HtbPlan, batch: String) -> Result<(), HtbError> {
        plan.validate()?;
        match self.owner()? {
            RootOwner::Foreign { kind, handle } => {
                return Err(HtbError::ForeignQdisc {
                    iface: self.iface.clone(),
                    kind,
                    handle,
                })
            }
            RootOwner::Causeway => self.remove().map(|_| ())?,
            RootOwner::Default => {}
        }
        if let Err(e) = self.tc_batch(&batch) {
            let _ = self.remove();
            return Err(match e {
                HtbError::Tc { stderr, .. }
                    if plan.root == RootQdisc::Fq && stderr.contains("qdisc kind is unknown") =>
                {
                    HtbError::FqUnavailable {
                        iface: self.iface.clone(),
                    }
                }
                e => e,
            });
        }
        Ok(())
    }

    /// Changes one leaf in place (queued frames stay queued).
    pub fn change_leaf(&self, leaf: &HtbLeaf) -> Result<(), HtbError> {
        if self.owner()? != RootOwner::Causeway {
            return Err(HtbError::UnknownLeaf { class: leaf.class });
        }
        let args = leaf_args(leaf);
        let mut full = vec!["class", "change", "dev", &self.iface];
        full.extend(args.iter().map(String::as_str));
        self.tc(&full).map(|_| ())
    }

    /// Deletes the root qdisc if it is Causeway's (HTB or fq); returns
    /// whether it was.
    pub fn remove(&self) -> Result<bool, HtbError> {
        if self.owner()? != RootOwner::Causeway {
            return Ok(false);
        }
        let handle = format!("{HTB_MAJOR:x}:");
        self.tc(&[
            "qdisc",
            "del",
            "dev",
            &self.iface,
            "root",
            "handle",
            &handle,
        ])?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::BatchFile;

    #[test]
    fn batch_file_is_private_and_removed_after_use() {
        let text = "qdisc add dev x root handle 1: htb\n";
        let (dir, file) = {
            let batch = BatchFile::write(text).expect("write the batch");
            let mode = |p: &std::path::Path| {
                std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777
            };
            assert_eq!(mode(&batch.dir), 0o700);
            assert_eq!(mode(&batch.file), 0o600);
            assert_eq!(std::fs::read_to_string(&batch.file).expect("read"), text);
            let other = BatchFile::write("").expect("a second batch");
            assert_ne!(other.dir, batch.dir, "each batch has its own directory");
            (batch.dir.clone(), batch.file.clone())
        };
        assert!(
            !file.exists() && !dir.exists(),
            "{} left behind",
            dir.display()
        );
    }
}
