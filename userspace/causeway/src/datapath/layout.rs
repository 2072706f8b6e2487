//! Where an attachment lives on disk.
//!
//! Pins (bpffs, which holds only BPF objects and directories):
//! ```text
//! <pin root>/<scope>/<ifname>/maps/<MAP_NAME>      every map of the object
//! <pin root>/<scope>/<ifname>/prog/causeway_xdp    the loaded program
//! <pin root>/<scope>/<ifname>/link/causeway_xdp    the XDP bpf_link
//! ```
//! Records (a tmpfs, gone at reboot like the pins):
//! ```text
//! <state root>/<scope>/<ifname>/attach.json        mode, ids, time
//! <state root>/<scope>/<ifname>/policy.json        the applied policy text
//! <state root>/<scope>/<ifname>/shaping-overrides.json  `set-rate` changes
//! <state root>/lock                                serialises changes
//! ```
//! The path-steering program (`causeway paths attach`) has the same tree
//! under `<pin root>/steer/` and `<state root>/steer/` ([`Layout::steer`]).
//! `<scope>` is `root`, `netns-<NAME>` or `netns-ino-<inode>`
//! ([`NetnsScope::dir_name`]), so equal interface names in two namespaces
//! do not clash.

use std::path::{Path, PathBuf};

use super::{netns::NetnsScope, DatapathError};
use bpf_maps::programs::XDP_CLASSIFIER;

/// Default pin root.
pub use bpf_maps::DEFAULT_PIN_ROOT;
/// The directory (under each root) of the path-steering attachments.
const STEER_DIR: &str = "steer";

/// Default state root.
pub const DEFAULT_STATE_ROOT: &str = "/run/causeway";

/// The two roots everything lives under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub pin_root: PathBuf,
    pub state_root: PathBuf,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            pin_root: DEFAULT_PIN_ROOT.into(),
            state_root: DEFAULT_STATE_ROOT.into(),
        }
    }
}

/// The paths of one interface's attachment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfacePaths {
    pub scope_dir: PathBuf,
    pub pin_dir: PathBuf,
    pub maps_dir: PathBuf,
    pub prog_dir: PathBuf,
    pub link_dir: PathBuf,
    pub state_scope_dir: PathBuf,
    pub state_dir: PathBuf,
}

impl IfacePaths {
    pub fn xdp_prog(&self) -> PathBuf {
        self.prog_dir.join(XDP_CLASSIFIER)
    }

    pub fn xdp_link(&self) -> PathBuf {
        self.link_dir.join(XDP_CLASSIFIER)
    }

    pub fn attach_record(&self) -> PathBuf {
        self.state_dir.join("attach.json")
    }

    pub fn policy_record(&self) -> PathBuf {
        self.state_dir.join("policy.json")
    }

    /// Rate changes made with `policy set-rate` since the policy was applied.
    pub fn shaping_overrides_record(&self) -> PathBuf {
        self.state_dir.join("shaping-overrides.json")
    }
}

impl Layout {
    /// Paths for `iface` in `scope`; refuses names that are not a single
    /// interface name.
    pub fn iface(&self, scope: &NetnsScope, iface: &str) -> Result<IfacePaths, DatapathError> {
        if !valid_iface_name(iface) {
            return Err(DatapathError::BadIfaceName {
                name: iface.to_string(),
            });
        }
        let scope_dir = self.pin_root.join(scope.dir_name());
        let pin_dir = scope_dir.join(iface);
        let state_scope_dir = self.state_root.join(scope.dir_name());
        Ok(IfacePaths {
            maps_dir: pin_dir.join(bpf_maps::MAPS_DIR),
            prog_dir: pin_dir.join("prog"),
            link_dir: pin_dir.join("link"),
            state_dir: state_scope_dir.join(iface),
            scope_dir,
            pin_dir,
            state_scope_dir,
        })
    }

    /// Paths of the path-steering program on `iface` (`causeway paths
    /// attach`): a tree of its own, `<pin root>/steer/<scope>/<iface>/` and
    /// `<state root>/steer/<scope>/<iface>/`, so that an interface can carry
    /// it beside (or without) the classifier. `steer` is no scope name, so
    /// [`Layout::attachments`] does not list it.
    pub fn steer(&self, scope: &NetnsScope, iface: &str) -> Result<IfacePaths, DatapathError> {
        Layout {
            pin_root: self.pin_root.join(STEER_DIR),
            state_root: self.state_root.join(STEER_DIR),
        }
        .iface(scope, iface)
    }

    /// Every (scope, interface) with path steering attached; only `scope`
    /// when given.
    pub fn steer_attachments(
        &self,
        scope: Option<&NetnsScope>,
    ) -> Result<Vec<(NetnsScope, String)>, DatapathError> {
        Layout {
            pin_root: self.pin_root.join(STEER_DIR),
            state_root: self.state_root.join(STEER_DIR),
        }
        .attachments(scope)
    }

    /// The lock file serialising changes.
    pub fn lock_file(&self) -> PathBuf {
        self.state_root.join("lock")
    }

    /// The policy audit log (`datapath::audit`).
    pub fn audit_log(&self) -> PathBuf {
        self.state_root.join("audit.log")
    }

    /// Every (scope, interface) with a pin directory, sorted; only `scope`
    /// when given.
    pub fn attachments(
        &self,
        scope: Option<&NetnsScope>,
    ) -> Result<Vec<(NetnsScope, String)>, DatapathError> {
        let mut found = Vec::new();
        for scope_name in dir_names(&self.pin_root)? {
            let Some(found_scope) = NetnsScope::from_dir_name(&scope_name) else {
                continue;
            };
            if scope.is_some_and(|s| *s != found_scope) {
                continue;
            }
            for iface in dir_names(&self.pin_root.join(&scope_name))? {
                if valid_iface_name(&iface) {
                    found.push((found_scope.clone(), iface));
                }
            }
        }
        found.sort();
        Ok(found)
    }
}

/// Names of the subdirectories of `dir` (none when `dir` is missing).
fn dir_names(dir: &Path) -> Result<Vec<String>, DatapathError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(DatapathError::io("list", dir, source)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| DatapathError::io("list", dir, source))?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
    }
    Ok(names)
}

/// Linux interface names: 1..=15 bytes, no '/', no whitespace, not `.`/`..`.
pub fn valid_iface_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name != "."
        && name != ".."
        && !name.contains(|c: char| c == '/' || c == ':' || c.is_whitespace() || c == '\0')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_include_the_namespace() {
        let layout = Layout::default();
        let a = layout
            .iface(&NetnsScope::Named("A".into()), "veth0")
            .unwrap();
        let b = layout
            .iface(&NetnsScope::Named("B".into()), "veth0")
            .unwrap();
        assert_ne!(a.pin_dir, b.pin_dir);
        assert_eq!(
            a.xdp_link(),
            Path::new("/sys/fs/bpf/causeway/netns-A/veth0/link/causeway_xdp")
        );
        assert_eq!(
            a.policy_record(),
            Path::new("/run/causeway/netns-A/veth0/policy.json")
        );
        assert!(matches!(
            layout.iface(&NetnsScope::Root, "../x"),
            Err(DatapathError::BadIfaceName { .. })
        ));
    }

    #[test]
    fn interface_names() {
        assert!(valid_iface_name("eth0"));
        assert!(valid_iface_name("cw-veth-123456"));
        assert!(!valid_iface_name(""));
        assert!(!valid_iface_name("a-name-that-is-too-long"));
        assert!(!valid_iface_name("a b"));
        assert!(!valid_iface_name(".."));
    }

    #[test]
    fn attachments_under_a_missing_root_are_none() {
        let layout = Layout {
            pin_root: "/nonexistent/causeway-pins".into(),
            state_root: "/nonexistent/causeway-state".into(),
        };
        assert!(layout.attachments(None).unwrap().is_empty());
    }
}
