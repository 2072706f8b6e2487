//! What a probe session publishes: per peer and source estimates, the
//! exchange and authentication counters, and what it ignored.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{auth::AuthCounters, estimator::Estimate, exchange::ExchangeCounters, source::Source};

/// Datagrams the session ignored, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IgnoredCounters {
    pub malformed: u64,
    pub unknown_peer: u64,
    pub rejected_samples: u64,
    /// From a peer with a key: probes without a tag.
    #[serde(default)]
    pub unauthenticated: u64,
    /// From a peer with a key: probes whose tag is wrong.
    #[serde(default)]
    pub forged: u64,
    /// From a peer with a key: probes already seen or older than the window.
    #[serde(default)]
    pub replayed: u64,
}

/// One source's current estimate of a peer.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceEstimate {
    pub source: Source,
    pub offset_ns: f64,
    pub drift_ppm: f64,
    pub error_bound_ns: f64,
    /// How fast the bound grows away from `at_local_ns`, ppm.
    #[serde(default)]
    pub drift_bound_ppm: f64,
    pub min_rtt_ns: u64,
    pub samples_used: usize,
    pub samples_accepted: u64,
    pub at_local_ns: u64,
    /// The regression fit's offset (diagnostics).
    #[serde(default)]
    pub fit_offset_ns: f64,
}

impl SourceEstimate {
    pub(super) fn new(source: Source, e: &Estimate, accepted: u64) -> Self {
        SourceEstimate {
            source,
            offset_ns: e.offset_ns,
            drift_ppm: e.drift_ppm,
            error_bound_ns: e.error_bound_ns,
            drift_bound_ppm: e.drift_bound_ppm,
            min_rtt_ns: e.min_delay_ns,
            samples_used: e.samples_used,
            samples_accepted: accepted,
            at_local_ns: e.at_local_ns,
            fit_offset_ns: e.fit_offset_ns,
        }
    }
}

/// What is known about one peer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerStatus {
    pub name: String,
    pub addr: SocketAddr,
    /// The estimate to use: the best source that has one.
    pub selected: Option<SourceEstimate>,
    /// Every source's estimate, best source first.
    pub sources: Vec<SourceEstimate>,
    pub exchanges: ExchangeCounters,
    /// Probes to and from this peer are tagged and checked.
    #[serde(default)]
    pub authenticated: bool,
    /// This peer's probes refused by authentication.
    #[serde(default)]
    pub auth: AuthCounters,
}

/// The session's published state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionStatus {
    pub host_id: u32,
    pub software_stamps: bool,
    pub zero_checksum: bool,
    pub peers: Vec<PeerStatus>,
    pub ignored: IgnoredCounters,
    pub requests_answered: u64,
    /// Socket errors (counted, logged, survived).
    #[serde(default)]
    pub io_errors: u64,
}
