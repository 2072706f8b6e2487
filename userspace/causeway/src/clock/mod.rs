//! Cross-domain clock synchronisation: the pure estimator, probe wire
//! format and simulator come from `causeway_core::clock` (re-exported
//! here); this module adds timestamp sources (kernel eBPF stamps,
//! SO_TIMESTAMPING, userspace), the sockets and the probe session that ties
//! them together.

pub use causeway_core::clock::*;

pub mod maps;
pub mod session;
#[allow(unsafe_code)] // setsockopt/recvmsg for kernel timestamps
pub mod socket;
pub mod source;
pub mod status;

#[cfg(test)]
mod session_tests;

pub use session::{
    PeerSpec, PeerStatus, Session, SessionConfig, SessionError, SessionStatus, SourceEstimate,
};
pub use source::{Source, SyncClock};
