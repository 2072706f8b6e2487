//! Why an execution stopped: every check on incoming chunks has its variant.

use std::time::Duration;

use crate::error::{CollectiveError, Rank};
use crate::wire::Call;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The chunk belongs to a different call (or to none).
    #[error("operation {op} differs between ranks: rank {peer} called {}, rank {me} {mine}", theirs.map_or("nothing".to_string(), |c| c.to_string()))]
    CallMismatch {
        op: u64,
        me: Rank,
        mine: Call,
        peer: Rank,
        theirs: Option<Call>,
    },
    /// The plan has no such lane or step.
    #[error("frame for op {op} lane {lane} step {step} does not exist (running op {op})")]
    UnknownChunk {
        peer: Rank,
        op: u64,
        lane: usize,
        step: usize,
    },
    /// Every byte of that step has already arrived.
    #[error("lane {lane} step {step} is already complete")]
    StepComplete {
        peer: Rank,
        lane: usize,
        step: usize,
    },
    /// The step receives nothing from this peer.
    #[error("lane {lane} step {step} expects nothing from this peer")]
    NotExpected {
        peer: Rank,
        lane: usize,
        step: usize,
    },
    /// The chunk does not fit the receive, or is not whole elements.
    #[error("chunk at +{offset} ({len} bytes) outside the expected {expected} bytes")]
    OutOfRange {
        peer: Rank,
        lane: usize,
        step: usize,
        offset: u64,
        len: usize,
        expected: usize,
    },
    /// Bytes of this chunk have arrived before.
    #[error("lane {lane} step {step}: chunk at +{offset} ({len} bytes) arrived twice")]
    Duplicate {
        peer: Rank,
        lane: usize,
        step: usize,
        offset: u64,
        len: usize,
    },
    /// The peer closed in order while it still owed data.
    #[error("left the communicator")]
    PeerLeft { peer: Rank },
    /// Nothing arrived for the idle timeout.
    #[error("no progress from peer rank(s) {peers:?} within {after:?}")]
    Timeout { peers: Vec<Rank>, after: Duration },
}

impl ExecError {
    /// The rank that sent the offending chunk, or left (not for timeouts).
    pub fn peer(&self) -> Option<Rank> {
        match self {
            ExecError::UnknownChunk { peer, .. }
            | ExecError::CallMismatch { peer, .. }
            | ExecError::StepComplete { peer, .. }
            | ExecError::NotExpected { peer, .. }
            | ExecError::OutOfRange { peer, .. }
            | ExecError::Duplicate { peer, .. }
            | ExecError::PeerLeft { peer } => Some(*peer),
            ExecError::Timeout { .. } => None,
        }
    }
}

impl From<ExecError> for CollectiveError {
    fn from(e: ExecError) -> Self {
        match e {
            ExecError::PeerLeft { peer } => CollectiveError::PeerFailed {
                peer,
                detail: e.to_string(),
            },
            ExecError::Timeout { peers, after } => CollectiveError::PeerTimeout { peers, after },
            ExecError::CallMismatch {
                op,
                me,
                mine,
                peer,
                theirs: Some(theirs),
            } => CollectiveError::CallMismatch {
                op,
                me,
                mine,
                peer,
                theirs,
                reported_by: None,
            },
            ExecError::CallMismatch { peer, .. } => CollectiveError::Mismatch {
                peer,
                detail: "a data frame without an operation signature".into(),
            },
            ExecError::UnknownChunk { peer, .. }
            | ExecError::StepComplete { peer, .. }
            | ExecError::NotExpected { peer, .. }
            | ExecError::OutOfRange { peer, .. }
            | ExecError::Duplicate { peer, .. } => CollectiveError::Mismatch {
                peer,
                detail: e.to_string(),
            },
        }
    }
}
