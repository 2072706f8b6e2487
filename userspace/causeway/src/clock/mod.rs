//! Cross-domain clock synchronisation: a pure offset/drift estimator, the
//! UDP probe wire format, timestamp sources (kernel eBPF stamps,
//! SO_TIMESTAMPING, userspace) and the probe session that ties them together.

pub mod estimator;
pub mod exchange;
pub mod maps;
pub mod probe;
mod regression;
pub mod session;
pub mod sim;
pub mod socket;
pub mod source;
mod split_min;

#[cfg(test)]
mod estimator_tests;
#[cfg(test)]
mod exchange_tests;
#[cfg(test)]
mod session_tests;

pub use estimator::{ConfigError, Estimate, Estimator, EstimatorConfig, Sample, SampleError};
pub use regression::Model;
pub use session::{
    PeerSpec, PeerStatus, Session, SessionConfig, SessionError, SessionStatus, SourceEstimate,
};
pub use source::{Source, SyncClock};
