//! Network-namespace handling: entering a named namespace (`--netns NAME`)
//! and naming the namespace a command works in, for the pin layout.
//!
//! Only the network namespace is entered (`setns(CLONE_NEWNET)` on
//! `/run/netns/NAME`, the file `ip netns add` creates). `ip netns exec` would
//! also enter a new mount namespace with a fresh `/sys`, where the bpffs
//! holding Causeway's pins is not mounted.

use std::{fs::File, os::unix::fs::MetadataExt as _, path::Path};

use nix::sched::{setns, CloneFlags};

use super::DatapathError;

/// Where `ip netns add` puts its namespace files.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// The network namespace a command works in; names its pin directory.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NetnsScope {
    /// The initial network namespace (the one of pid 1).
    Root,
    /// A namespace entered with `--netns NAME`.
    Named(String),
    /// Any other namespace the process runs in, by inode number.
    Inode(u64),
}

impl NetnsScope {
    /// The scope of this process: `Named` when `--netns` was given, else
    /// `Root`, or `Inode` when this is not pid 1's namespace (known only
    /// when pid 1's namespace can be read; otherwise it is taken as `Root`).
    pub fn current(named: Option<&str>) -> Result<Self, DatapathError> {
        if let Some(name) = named {
            return Ok(Self::Named(name.to_string()));
        }
        let own_path = "/proc/thread-self/ns/net";
        let own = std::fs::metadata(own_path)
            .map_err(|source| DatapathError::io("read the network namespace of", own_path, source))?
            .ino();
        Ok(match std::fs::metadata("/proc/1/ns/net") {
            Ok(root) if root.ino() != own => Self::Inode(own),
            _ => Self::Root,
        })
    }

    /// The directory name of this scope under the pin root.
    pub fn dir_name(&self) -> String {
        match self {
            Self::Root => "root".to_string(),
            Self::Named(name) => format!("netns-{name}"),
            Self::Inode(ino) => format!("netns-ino-{ino}"),
        }
    }

    /// Inverse of [`Self::dir_name`]; `None` for foreign directory names.
    pub fn from_dir_name(dir: &str) -> Option<Self> {
        if dir == "root" {
            return Some(Self::Root);
        }
        let rest = dir.strip_prefix("netns-")?;
        if let Some(ino) = rest.strip_prefix("ino-") {
            if let Ok(ino) = ino.parse() {
                return Some(Self::Inode(ino));
            }
        }
        valid_netns_name(rest).then(|| Self::Named(rest.to_string()))
    }

    /// The `--netns` argument that reaches this scope, if there is one.
    pub fn netns_name(&self) -> Option<&str> {
        match self {
            Self::Named(name) => Some(name),
            _ => None,
        }
    }
}

impl std::fmt::Display for NetnsScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Root => f.write_str("root namespace"),
            Self::Named(name) => write!(f, "netns {name}"),
            Self::Inode(ino) => write!(f, "netns inode {ino}"),
        }
    }
}

/// Whether `name` can be a namespace name: a single path component.
pub fn valid_netns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && !name.contains(['/', '\0'])
}

/// Moves the calling thread into network namespace `name`
/// (`/run/netns/NAME`). Call it before any other thread starts.
pub fn enter(name: &str) -> Result<(), DatapathError> {
    if !valid_netns_name(name) {
        return Err(DatapathError::BadNetnsName {
            name: name.to_string(),
        });
    }
    let path = Path::new(NETNS_RUN_DIR).join(name);
    let file = File::open(&path).map_err(|source| DatapathError::Netns {
        name: name.to_string(),
        reason: format!(
            "cannot open {}: {source} (create it with `ip netns add {name}`)",
            path.display()
        ),
    })?;
    setns(file, CloneFlags::CLONE_NEWNET).map_err(|errno| DatapathError::Netns {
        name: name.to_string(),
        reason: format!("setns failed: {errno} (entering a namespace needs CAP_SYS_ADMIN)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_dir_names_round_trip() {
        for scope in [
            NetnsScope::Root,
            NetnsScope::Named("cw-a.1".into()),
            NetnsScope::Inode(4026531840),
        ] {
            assert_eq!(NetnsScope::from_dir_name(&scope.dir_name()), Some(scope));
        }
        assert_eq!(NetnsScope::from_dir_name("lost+found"), None);
        assert_eq!(NetnsScope::from_dir_name("netns-"), None);
    }

    #[test]
    fn netns_names() {
        assert!(valid_netns_name("cwA123"));
        assert!(!valid_netns_name(""));
        assert!(!valid_netns_name(".."));
        assert!(!valid_netns_name("a/b"));
        assert!(matches!(
            enter("a/b"),
            Err(DatapathError::BadNetnsName { .. })
        ));
        assert!(matches!(
            enter("causeway-no-such-netns"),
            Err(DatapathError::Netns { .. })
        ));
    }

    #[test]
    fn current_scope_without_a_name_is_root_or_an_inode() {
        let scope = NetnsScope::current(None).unwrap();
        assert!(matches!(scope, NetnsScope::Root | NetnsScope::Inode(_)));
        assert_eq!(
            NetnsScope::current(Some("x")).unwrap(),
            NetnsScope::Named("x".into())
        );
    }
}
