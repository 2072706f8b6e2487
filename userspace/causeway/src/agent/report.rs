//! What the agent reports on its control socket and publishes in the
//! pinned peer map.

use serde::{Deserialize, Serialize};

use crate::clock::{session::SourceEstimate, SessionStatus};
use crate::datapath::TcAttached;
use bpf_maps::clock::PeerClock;

/// One owned interface.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IfaceReport {
    pub name: String,
    pub ifindex: u32,
    pub xdp_link_id: u32,
    /// The XDP attachment was already there and was kept.
    pub xdp_adopted: bool,
    pub tc_link_id: u32,
    pub tc_adopted: bool,
    /// Kernel stamps written (rx at XDP, tx at TC) and probes skipped.
    pub stamps_rx: u64,
    pub stamps_tx: u64,
    pub stamps_skipped: u64,
}

impl IfaceReport {
    pub fn new(
        name: &str,
        ifindex: u32,
        xdp_link_id: u32,
        xdp_adopted: bool,
        tc: TcAttached,
    ) -> Self {
        IfaceReport {
            name: name.to_string(),
            ifindex,
            xdp_link_id,
            xdp_adopted,
            tc_link_id: tc.link_id,
            tc_adopted: tc.adopted,
            ..IfaceReport::default()
        }
    }
}

/// The agent's whole state, as `causeway clock status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentReport {
    pub host_id: u32,
    pub scope: String,
    /// Kernel stamping configured on the interfaces.
    pub kernel_stamps: bool,
    pub interfaces: Vec<IfaceReport>,
    pub session: SessionStatus,
    /// Estimates published to the pinned peer map so far.
    pub published: u64,
    /// This host's address on each WAN path (`[library] wan_paths`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wan_paths: Vec<std::net::IpAddr>,
}

/// The map value for an estimate; `generation` counts updates.
pub fn peer_clock(e: &SourceEstimate, generation: u64) -> PeerClock {
    PeerClock {
        ref_ns: e.at_local_ns,
        offset_ns: e.offset_ns.round() as i64,
        drift_ppb: (e.drift_ppm * 1000.0).round() as i64,
        error_bound_ns: e.error_bound_ns.ceil().max(0.0) as u64,
        min_rtt_ns: e.min_rtt_ns,
        generation,
        source: e.source.wire(),
        samples: e.samples_used.min(u32::MAX as usize) as u32,
        // +1 ppb: `drift_ppb` is rounded to whole ppb.
        drift_bound_ppb: (e.drift_bound_ppm * 1000.0).ceil().max(0.0) as u64 + 1,
    }
}
