//! The data path on one host, as a service ([`Datapath`]): loading the
//! embedded eBPF object, attaching the XDP classifier and the TC egress
//! program ([`load`], one sequence for both), pinning programs, links and
//! maps on a bpffs so that later commands (or a restarted agent) find and
//! update them, applying a policy as one transaction with undo ([`apply`]),
//! and detaching without leaving anything behind.
//!
//! See [`layout`] for where things live. Every change goes through
//! [`Locked`], which holds [`state::StateLock`].

pub mod apply;
pub mod attach;
pub mod audit;
pub mod bpffs;
pub mod fault;
pub mod layout;
pub mod link;
pub mod load;
pub mod netns;
pub mod recorded;
pub mod rules;
pub mod service;
pub mod state;
pub mod status;
pub mod tc;
mod undo;

use std::path::{Path, PathBuf};

pub use apply::{Applied, ApplyError, PolicyInput, ShapingApplied, StepError};
pub use attach::{attach, detach, AttachMode, Attached, Detached, PinState};
pub use fault::{ApplyStep, FaultPlan};
pub use layout::{IfacePaths, Layout};
pub use load::{LoadCause, LoadError, LoadStep};
pub use netns::NetnsScope;
pub use recorded::RecordedPolicy;
pub use service::{AttachedWithPolicy, Datapath, DetachedAll, Locked};
pub use status::{status, InterfaceStatus};
pub use tc::{TcAttached, TcMode};

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
    #[error(transparent)]
    Load(Box<load::LoadError>),
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
    #[error("classifier maps in {dir}: {source}")]
    Classifier {
        dir: PathBuf,
        #[source]
        source: Box<crate::classifier::ClassifierMapsError>,
    },
    #[error("the recorded policy {path} no longer parses: {source}")]
    RecordedPolicy {
        path: PathBuf,
        #[source]
        source: Box<crate::policy::PolicyError>,
    },
    #[error("the HTB qdisc of {iface}: {source}")]
    Htb {
        iface: String,
        #[source]
        source: Box<crate::shaper::htb::HtbError>,
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
}
