//! Typed errors of the collective library.

use std::sync::Arc;
use std::time::Duration;

use crate::wire::{Call, FrameError};

/// A rank index inside one communicator.
pub type Rank = usize;

/// Problems with the rendezvous configuration (environment, builder, topology file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("environment variable {0} is not set (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")]
    MissingVar(&'static str),
    #[error("{name}={value:?} is invalid: {reason}")]
    InvalidVar {
        name: String,
        value: String,
        reason: String,
    },
    #[error("rank {rank} is out of range for world size {world}")]
    RankOutOfRange { rank: usize, world: usize },
    #[error("world size must be at least 1")]
    EmptyWorld,
    #[error("topology file {path}: {reason}")]
    Topology { path: String, reason: String },
    #[error("{0}")]
    Invalid(String),
}

/// Errors of the bootstrap key-value store.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("store at {addr}: {context}: {source}")]
    Io {
        addr: String,
        context: &'static str,
        source: Arc<std::io::Error>,
    },
    #[error("store: key {key:?} did not appear within {after:?}")]
    Timeout { key: String, after: Duration },
    #[error("store protocol violation: {0}")]
    Protocol(String),
    #[error("store: value of key {key:?} is not a number")]
    NotANumber { key: String },
    #[error("store: {0}")]
    Tls(Box<TlsError>),
    /// A limit of the store refused this request (the connection goes on).
    #[error("store: request on key {key:?} {reason}")]
    Refused { key: String, reason: String },
}

/// Mutual TLS between ranks and with the bootstrap store: every variant that
/// is about a connection names its peer (`rank 2 at 10.0.0.2:4000`, `store
/// client 10.0.0.9:51000`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum TlsError {
    /// A certificate, key or CA file that cannot be used.
    #[error("TLS file {path}: {reason}")]
    File { path: String, reason: String },
    /// A domain or host label that cannot be part of a certificate name.
    #[error("TLS identity: {0}")]
    Label(String),
    /// The handshake failed: the peer's certificate was refused (another
    /// CA, expired, not for this name) or the peer refused ours.
    #[error("TLS handshake with {peer}: {source}")]
    Handshake { peer: String, source: rustls::Error },
    /// The peer's certificate is valid but names another domain or host than
    /// the rendezvous gives that rank.
    #[error("TLS peer {peer}: its certificate does not name {expected}")]
    WrongIdentity { peer: String, expected: String },
    /// A connection that must be TLS arrived in plaintext (or the reverse).
    #[error("TLS peer {peer}: {detail}")]
    Refused { peer: String, detail: String },
    /// A record failed to decrypt or authenticate (tampered ciphertext) or
    /// broke the protocol: the connection is closed.
    #[error("TLS record from {peer}: {source}")]
    Record { peer: String, source: rustls::Error },
    /// kTLS (the kernel's record layer) was required and cannot take this
    /// connection, or it received a record it cannot process.
    #[error("kTLS with {peer}: {detail}")]
    Ktls { peer: String, detail: String },
}

/// Everything a collective operation or the communicator set-up can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CollectiveError {
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("rank {rank} was claimed by more than one process")]
    DuplicateRank { rank: Rank },
    #[error("inconsistent world: rank {rank} reports {what} = {got}, rank 0 reports {expected}")]
    Inconsistent {
        rank: Rank,
        what: &'static str,
        expected: String,
        got: String,
    },
    #[error("rendezvous: {0}")]
    Rendezvous(String),
    #[error("rendezvous: rank(s) {missing:?} did not {stage} within {after:?}")]
    RendezvousTimeout {
        missing: Vec<Rank>,
        stage: &'static str,
        after: Duration,
    },
    /// Some ranks named their domain and some did not: the job would split.
    #[error("ranks {unset:?} set no CAUSEWAY_DOMAIN or CAUSEWAY_TOPOLOGY while ranks {set:?} did")]
    DomainUnset { unset: Vec<Rank>, set: Vec<Rank> },
    /// Ranks disagree on the domain of `rank`: each claim is a domain and who
    /// made it (its own `CAUSEWAY_DOMAIN`, or the topology file some ranks read).
    #[error("ranks disagree on the domain of rank {rank}: {}", claims.iter().map(|(d, by)| format!("{d} by {by}")).collect::<Vec<_>>().join(", "))]
    DomainConflict {
        rank: Rank,
        claims: Vec<(String, String)>,
    },
    /// Ranks set an option that changes the wire differently: each value with the ranks that set it.
    #[error("ranks disagree on {key}: {}", values.iter().map(|(v, r)| format!("{v} on ranks {r:?}")).collect::<Vec<_>>().join(", "))]
    ConfigMismatch {
        key: String,
        values: Vec<(String, Vec<Rank>)>,
    },
    /// Connection set-up failed: `reporter` could not set up its connections
    /// with `peers` (empty: `reporter` itself failed or left during set-up).
    #[error("connection setup failed {}: {cause}", if peers.is_empty() { format!("at rank {reporter}") } else { format!("between rank {reporter} and rank(s) {peers:?}") })]
    SetupFailed {
        reporter: Rank,
        peers: Vec<Rank>,
        cause: String,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: Arc<std::io::Error>,
    },
    #[error("peer rank {peer} failed: {detail}")]
    PeerFailed { peer: Rank, detail: String },
    #[error("no progress from peer rank(s) {peers:?} within {after:?}")]
    PeerTimeout { peers: Vec<Rank>, after: Duration },
    /// Rank `peer` stopped responding, as rank `observer` saw it waiting on it
    /// directly (`how`): this rank, or the one named in `reported_by`.
    #[error("peer rank {peer} stopped responding: {}", match reported_by {
        None => how.to_string(),
        Some(by) if by == observer => format!("reported by rank {by} ({how})"),
        Some(by) => format!("reported by rank {observer} via rank {by} ({how})"),
    })]
    Unresponsive {
        peer: Rank,
        how: crate::blame::How,
        observer: Rank,
        reported_by: Option<Rank>,
    },
    #[error("frame from peer rank {peer}: {source}")]
    Frame { peer: Rank, source: FrameError },
    /// A payload from `peer` that does not decode with this call's codec.
    #[error("payload from peer rank {peer}: {source}")]
    Codec {
        peer: Rank,
        source: crate::codec::CodecError,
    },
    #[error("peer rank {peer} sent data that does not match this operation: {detail}")]
    Mismatch { peer: Rank, detail: String },
    /// Ranks made different calls as operation `op`: rank `me` (this one, or,
    /// when `reported_by` is set, one that made this rank's call) called
    /// `mine`, rank `peer` (blamed) `theirs`.
    /// Nothing of the operation is returned.
    #[error("operation {op} differs between ranks: rank {peer} called {theirs}, rank {me} {mine}{}",
        reported_by.map_or(String::new(), |r| format!(" (reported by rank {r})")))]
    CallMismatch {
        op: u64,
        me: Rank,
        mine: Call,
        peer: Rank,
        theirs: Call,
        reported_by: Option<Rank>,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("communicator is closed")]
    Closed,
    /// The communicator of `epoch` was shrunk or grown; use the one that returned.
    #[error("communicator of epoch {epoch} is retired (shrunk or grown): use its successor")]
    Retired { epoch: u64 },
    /// A shrink or grow towards `epoch` failed.
    #[error("membership change to epoch {epoch}: {detail}")]
    Membership { epoch: u64, detail: String },
    /// The survivors of a failure formed epoch `epoch` without this rank.
    #[error("rank {rank} was left out of epoch {epoch} (members: old ranks {members:?})")]
    Excluded {
        rank: Rank,
        epoch: u64,
        members: Vec<Rank>,
    },
    #[error("shared memory: {0}")]
    Shm(String),
    /// The RDMA transport could not be set up towards `peer` (with
    /// `CAUSEWAY_TRANSPORT=rdma`; `auto` falls back to TCP instead).
    #[error("rank {rank}: RDMA to rank {peer}: {source}")]
    Rdma {
        rank: Rank,
        peer: Rank,
        source: crate::transport::rdma::RdmaError,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
}

impl CollectiveError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        CollectiveError::Io {
            context: context.into(),
            source: Arc::new(source),
        }
    }

    /// The rank this error blames, if any (a dead, silent or misbehaving peer).
    pub fn peer(&self) -> Option<Rank> {
        match self {
            CollectiveError::PeerFailed { peer, .. }
            | CollectiveError::Frame { peer, .. }
            | CollectiveError::Codec { peer, .. }
            | CollectiveError::Mismatch { peer, .. }
            | CollectiveError::CallMismatch { peer, .. }
            | CollectiveError::Unresponsive { peer, .. } => Some(*peer),
            CollectiveError::PeerTimeout { peers, .. } => peers.first().copied(),
            CollectiveError::SetupFailed {
                reporter, peers, ..
            } => Some(peers.first().copied().unwrap_or(*reporter)),
            _ => None,
        }
    }

    /// A short, stable name of the variant (the `kind` label of
    /// `causeway_op_errors_total`).
    pub fn kind(&self) -> &'static str {
        use CollectiveError as E;
        match self {
            E::Config(_) => "config",
            E::Store(_) => "store",
            E::DuplicateRank { .. } => "duplicate_rank",
            E::Inconsistent { .. } => "inconsistent",
            E::Rendezvous(_) => "rendezvous",
            E::RendezvousTimeout { .. } => "rendezvous_timeout",
            E::DomainUnset { .. } => "domain_unset",
            E::DomainConflict { .. } => "domain_conflict",
            E::ConfigMismatch { .. } => "config_mismatch",
            E::SetupFailed { .. } => "setup_failed",
            E::Io { .. } => "io",
            E::PeerFailed { .. } => "peer_failed",
            E::PeerTimeout { .. } => "peer_timeout",
            E::Unresponsive { .. } => "unresponsive",
            E::Frame { .. } => "frame",
            E::Codec { .. } => "codec",
            E::Mismatch { .. } => "mismatch",
            E::CallMismatch { .. } => "call_mismatch",
            E::InvalidArgument(_) => "invalid_argument",
            E::Closed => "closed",
            E::Retired { .. } => "retired",
            E::Membership { .. } => "membership",
            E::Excluded { .. } => "excluded",
            E::Shm(_) => "shm",
            E::Rdma { .. } => "rdma",
            E::Tls(_) => "tls",
        }
    }
}

pub type Result<T, E = CollectiveError> = std::result::Result<T, E>;
