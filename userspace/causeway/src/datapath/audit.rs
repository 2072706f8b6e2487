//! The policy audit log, `<state root>/audit.log`: one JSON line per policy
//! change (apply, attach with a policy, detach), written under the state lock, so
//! lines never interleave. A line says who (uid, effective uid, pid), when
//! (Unix time, ns), what (command, scope, interfaces, the file as given and
//! the SHA-256 of the policy text applied) and the outcome. The file is
//! opened (created 0640) before anything changes: a change that could not
//! be recorded is not made.

use std::{
    fs::File,
    io::Write,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::DatapathError;

/// One line of the audit log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub time_unix_ns: u64,
    pub uid: u32,
    pub euid: u32,
    pub pid: u32,
    /// `apply`, `attach` or `detach` (no policy: empty source, digest of "").
    pub command: String,
    pub scope: String,
    pub ifaces: Vec<String>,
    /// The policy file as given on the command line.
    pub source: String,
    /// SHA-256 of the policy text, lowercase hex.
    pub sha256: String,
    /// `applied` or `failed: <reason>`.
    pub outcome: String,
}

/// SHA-256 of `text`, lowercase hex.
pub fn digest(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The audit log, opened for appending.
pub struct AuditLog {
    path: PathBuf,
    file: File,
}

impl AuditLog {
    /// Opens (creating, mode 0640) the log at `path`.
    pub fn open(path: &Path) -> Result<AuditLog, DatapathError> {
        let io = |what| {
            move |source| DatapathError::Io {
                what,
                path: path.to_path_buf(),
                source,
            }
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io("create the directory of"))?;
        }
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(path)
            .map_err(io("open the audit log"))?;
        Ok(AuditLog {
            path: path.to_path_buf(),
            file,
        })
    }

    /// A record of this process changing `ifaces` with `text` from `source`.
    pub fn record(
        command: &str,
        scope: String,
        ifaces: &[String],
        source: &str,
        text: &str,
        outcome: String,
    ) -> AuditRecord {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        AuditRecord {
            time_unix_ns: now,
            uid: nix::unistd::getuid().as_raw(),
            euid: nix::unistd::geteuid().as_raw(),
            pid: std::process::id(),
            command: command.to_string(),
            scope,
            ifaces: ifaces.to_vec(),
            source: source.to_string(),
            sha256: digest(text),
            outcome,
        }
    }

    /// Appends one line (one `write` of the whole line).
    pub fn append(&mut self, r: &AuditRecord) -> Result<(), DatapathError> {
        let mut line = serde_json::to_string(r).map_err(|e| DatapathError::Io {
            what: "encode a record for",
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.sync_data())
            .map_err(|source| DatapathError::Io {
                what: "append to the audit log",
                path: self.path.clone(),
                source,
            })
    }
}

/// Every record of the log at `path` (lines that do not parse are skipped).
pub fn read(path: &Path) -> std::io::Result<Vec<AuditRecord>> {
    Ok(std::fs::read_to_string(path)?
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_append_as_json_lines_with_the_digest() {
        assert_eq!(
            digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let dir = std::env::temp_dir().join(format!("cw-audit-{}", std::process::id()));
        let path = dir.join("audit.log");
        let mut log = AuditLog::open(&path).expect("open");
        let ifaces = vec!["veth0".to_string()];
        let r = AuditLog::record(
            "apply",
            "host".into(),
            &ifaces,
            "p.toml",
            "abc",
            "applied".into(),
        );
        log.append(&r).expect("append");
        let mut again = AuditLog::open(&path).expect("reopen");
        again.append(&r).expect("append");
        let got = read(&path).expect("read");
        assert_eq!(got, vec![r.clone(), r]);
        assert_eq!(got[0].pid, std::process::id());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode & 0o007, 0, "others may read the audit log: {mode:o}");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
