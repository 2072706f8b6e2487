//! Records kept beside the pins (attach mode, applied policy) and the lock
//! that serialises commands changing an attachment.

use std::{
    fs::{File, OpenOptions},
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use nix::fcntl::{Flock, FlockArg};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use super::{attach::AttachMode, DatapathError};

/// How an interface was attached (`attach.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachRecord {
    pub iface: String,
    pub ifindex: u32,
    pub mode: AttachMode,
    pub prog_id: u32,
    pub link_id: u32,
    pub attached_at_unix: u64,
    /// [`object_digest`] of the eBPF object the program was loaded from.
    #[serde(default)]
    pub object_digest: Option<String>,
}

/// FNV-1a (64 bit) of the embedded eBPF object, in hex: tells whether a
/// pinned program was loaded by this build of Causeway.
pub fn object_digest() -> String {
    let hash = crate::ebpf_object::EBPF_OBJECT
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("{hash:016x}")
}

/// The policy last applied to an interface (`policy.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRecord {
    /// The file it came from, as given on the command line.
    pub source: String,
    /// The policy text, verbatim; parsed again to name classes.
    pub text: String,
    /// The classifier generation `apply` returned.
    pub generation: u64,
    pub applied_at_unix: u64,
}

/// Seconds since the epoch.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Writes `value` as JSON to `path` atomically (temporary file + rename),
/// creating the directory.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), DatapathError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|source| DatapathError::io("create the state directory", dir, source))?;
    }
    let text = serde_json::to_string_pretty(value).map_err(|source| DatapathError::State {
        path: path.to_path_buf(),
        source,
    })?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text).map_err(|source| DatapathError::io("write", &tmp, source))?;
    std::fs::rename(&tmp, path).map_err(|source| DatapathError::io("rename into", path, source))
}

/// Reads a JSON record; `None` when the file does not exist.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, DatapathError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(DatapathError::io("read", path, source)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|source| DatapathError::State {
            path: path.to_path_buf(),
            source,
        })
}

/// A record file as it was before a change (`None`: there was none), to
/// put back byte for byte when the change is undone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSnapshot {
    pub path: PathBuf,
    pub bytes: Option<Vec<u8>>,
}

impl RecordSnapshot {
    pub fn capture(path: &Path) -> Result<Self, DatapathError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(DatapathError::io("read", path, source)),
        };
        Ok(Self {
            path: path.to_path_buf(),
            bytes,
        })
    }

    /// Writes the old bytes back (temporary file + rename), or removes the
    /// file if there was none.
    pub fn restore(&self) -> Result<(), DatapathError> {
        match &self.bytes {
            Some(bytes) => {
                let tmp = self.path.with_extension("json.tmp");
                std::fs::write(&tmp, bytes)
                    .map_err(|source| DatapathError::io("write", &tmp, source))?;
                std::fs::rename(&tmp, &self.path)
                    .map_err(|source| DatapathError::io("rename into", &self.path, source))
            }
            None => remove_if_present(&self.path),
        }
    }
}

/// Removes a record; a missing one is fine.
pub fn remove_if_present(path: &Path) -> Result<(), DatapathError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(DatapathError::io("remove", path, e))
        }
        _ => Ok(()),
    }
}

/// An exclusive lock on the state root, held until dropped.
pub struct StateLock {
    _lock: Flock<File>,
}

impl StateLock {
    /// Blocks until no other Causeway command is changing attachments.
    pub fn acquire(lock_file: &Path) -> Result<Self, DatapathError> {
        if let Some(dir) = lock_file.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|source| DatapathError::io("create the state directory", dir, source))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_file)
            .map_err(|source| DatapathError::io("open the lock file", lock_file, source))?;
        let lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| {
            DatapathError::io("lock", lock_file, std::io::Error::from(errno))
        })?;
        Ok(Self { _lock: lock })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_digest_is_stable_hex() {
        let d = object_digest();
        assert_eq!(d.len(), 16);
        assert_eq!(d, object_digest());
        assert!(d.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn record_snapshots_restore_bytes_and_absence() {
        let dir = std::env::temp_dir().join(format!("causeway-snap-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (kept, absent) = (dir.join("policy.json"), dir.join("shaping-overrides.json"));
        std::fs::write(&kept, b"{\"a\": 1}\n").unwrap();
        let snaps = [&kept, &absent].map(|p| RecordSnapshot::capture(p).unwrap());
        std::fs::write(&kept, b"changed").unwrap();
        std::fs::write(&absent, b"new").unwrap();
        for s in &snaps {
            s.restore().unwrap();
        }
        assert_eq!(std::fs::read(&kept).unwrap(), b"{\"a\": 1}\n");
        assert!(!absent.exists());
        assert!(!dir.join("policy.json.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn records_round_trip_through_json_files() {
        let dir = std::env::temp_dir().join(format!("causeway-state-test-{}", std::process::id()));
        let path = dir.join("scope/eth0/policy.json");
        assert_eq!(read_json::<PolicyRecord>(&path).unwrap(), None);
        let record = PolicyRecord {
            source: "p.toml".into(),
            text: "[[class]]\nid = 1\nname = \"x\"\n".into(),
            generation: 7,
            applied_at_unix: now_unix(),
        };
        write_json(&path, &record).unwrap();
        assert_eq!(read_json::<PolicyRecord>(&path).unwrap(), Some(record));
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(
            read_json::<PolicyRecord>(&path),
            Err(DatapathError::State { .. })
        ));
        let _lock = StateLock::acquire(&dir.join("lock")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
