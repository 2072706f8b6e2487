//! The data path on one host: loading the embedded eBPF object, attaching
//! the XDP classifier to interfaces, pinning programs, links and maps on a
//! bpffs so that later commands (or a restarted agent) find and update them,
//! and detaching without leaving anything behind.
//!
//! See [`layout`] for where things live. Every command that changes an
//! attachment holds [`state::StateLock`].

pub mod attach;
pub mod bpffs;
pub mod layout;
pub mod link;
pub mod netns;
pub mod rules;
pub mod state;
pub mod status;

use std::path::{Path, PathBuf};

pub use attach::{attach, detach, AttachMode, Attached, Detached, PinState};
pub use layout::{IfacePaths, Layout};
pub use netns::NetnsScope;
pub use status::{status, InterfaceStatus};

/// Why a data-path operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DatapathError {
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("'{name}' is not a valid network namespace name")]
    BadNetnsName { name: String },
    #[error("cannot enter network namespace '{name}': {reason}")]
    Netns { name: String, reason: String },
    #[error(
        "'{name}' is not a valid interface name (1 to 15 characters, no '/', ':' or whitespace)"
    )]
    BadIfaceName { name: String },
    #[error("interface '{name}' does not exist in the {scope}")]
    UnknownInterface { name: String, scope: String },
    #[error("no bpffs at {path}: {reason}")]
    Bpffs { path: PathBuf, reason: String },
    #[error("{iface} is not attached in the {scope} (nothing pinned at {dir})")]
    NotAttached {
        iface: String,
        scope: String,
        dir: PathBuf,
    },
    #[error("{iface} is already attached in mode {attached}; detach it before attaching in mode {requested}")]
    ModeMismatch {
        iface: String,
        attached: AttachMode,
        requested: AttachMode,
    },
    #[error("loading the eBPF object failed: {0}")]
    Load(#[source] Box<aya::EbpfError>),
    #[error("the eBPF object has no program '{0}'")]
    MissingProgram(&'static str),
    #[error("{what}: {source}")]
    Program {
        what: String,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    #[error("pinning {path} failed: {source}")]
    Pin {
        path: PathBuf,
        #[source]
        source: Box<aya::pin::PinError>,
    },
    #[error("{what}: {source}")]
    Link {
        what: String,
        #[source]
        source: Box<aya::programs::links::LinkError>,
    },
    #[error("{what}: {source}")]
    Map {
        what: String,
        #[source]
        source: Box<aya::maps::MapError>,
    },
    #[error("cannot find the fdinfo of link {link_id}: {reason}")]
    LinkFdinfo { link_id: u32, reason: String },
    #[error("the kernel attached XDP through netlink, not a bpf_link, so it cannot stay attached after this process exits (needs Linux 5.9 or later)")]
    NoLinkSupport,
    #[error("classifier maps in {dir}: {source}")]
    Classifier {
        dir: PathBuf,
        #[source]
        source: Box<crate::classifier::ClassifierMapsError>,
    },
    #[error("state file {path} is unreadable: {source}")]
    State {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl DatapathError {
    pub(crate) fn io(what: &'static str, path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Self::Io {
            what,
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    pub(crate) fn program(what: impl Into<String>, source: aya::programs::ProgramError) -> Self {
        Self::Program {
            what: what.into(),
            source: Box::new(source),
        }
    }
}
