//! One reading of everything the agent can show: per-class ingress counters
//! and the live shaping of each interface (from the pinned maps and the
//! applied-policy records), the clock estimate per peer (from the
//! session), and the WAN paths of path steering (its maps and controller). Plain data, so the Prometheus encoding ([`super::metrics`]) and
//! `causeway top` are pure functions of it.

use serde::{Deserialize, Serialize};

use crate::{
    datapath::{Layout, NetnsScope, RecordedPolicy},
    paths::{monitor::PathHealth, PathMaps, PathRow},
    shaper::{live, maps::ShaperMaps},
    stats::{self, InterfaceStats},
};

use super::report::AgentReport;
use crate::{clock::auth::AuthCounters, shaper::config::OverAction};

/// Everything at one instant.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub interfaces: Vec<IfaceObservation>,
    pub peers: Vec<PeerObservation>,
    /// Interfaces with WAN path steering (`causeway paths`).
    #[serde(default)]
    pub steering: Vec<SteeringObservation>,
}

/// One interface's path steering: per path its state and what it carried,
/// and the controller's estimates when one runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SteeringObservation {
    pub iface: String,
    pub paths: Vec<PathRow>,
    pub unsteered_bytes: u64,
    pub monitor: Option<Vec<PathHealth>>,
}

/// One interface: its ingress classes, and its egress shaping when the
/// applied policy has some.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IfaceObservation {
    pub stats: InterfaceStats,
    pub shaping: Vec<ShapedClass>,
}

/// One shaped class: configuration (with live `set-rate` changes) and the
/// egress counters since attach.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShapedClass {
    pub class: String,
    pub rate_bits: u64,
    pub ceil_bits: u64,
    /// `drop`, `ecn` or `demote`.
    pub over_limit: String,
    pub sent_packets: u64,
    pub sent_bytes: u64,
    /// Frames found over the limit, and what became of them.
    pub shaped: u64,
    pub dropped: u64,
    pub marked: u64,
    pub demoted: u64,
}

/// One clock peer's selected estimate (`None` fields: no estimate yet).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerObservation {
    pub name: String,
    pub addr: String,
    /// `kernel`, `so_timestamping` or `userspace`.
    pub source: Option<String>,
    pub offset_ns: Option<f64>,
    pub error_bound_ns: Option<f64>,
    pub drift_ppm: Option<f64>,
    pub samples: u64,
    /// Probes from this peer refused by authentication (all zero when the
    /// peer has no key).
    #[serde(default)]
    pub probes_refused: AuthCounters,
}

/// Reads the counters and shaping of `ifaces` in `scope` and takes the clock
/// peers from `report`. An interface whose maps cannot be read is left out
/// (logged): one detached interface must not blank the others.
pub fn observe(
    layout: &Layout,
    scope: &NetnsScope,
    ifaces: &[String],
    report: Option<&AgentReport>,
) -> Observation {
    let mut out = Observation::default();
    for iface in ifaces {
        match stats::interface_stats(layout, scope, iface) {
            Ok(stats) => out.interfaces.push(IfaceObservation {
                stats,
                shaping: shaping(layout, scope, iface).unwrap_or_else(|e| {
                    tracing::debug!(iface = %iface, error = %e, "no shaping counters");
                    Vec::new()
                }),
            }),
            Err(e) => tracing::debug!(iface = %iface, error = %e, "no counters"),
        }
    }
    if let Some(report) = report {
        out.peers = peers(report);
    }
    out.steering = steering(layout, scope);
    out
}

/// Every interface of `scope` with path steering; one whose maps cannot be
/// read is left out (logged).
fn steering(layout: &Layout, scope: &NetnsScope) -> Vec<SteeringObservation> {
    let ifaces = layout.steer_attachments(Some(scope)).unwrap_or_default();
    let mut out = Vec::new();
    for (_, iface) in ifaces {
        let read = || -> Result<SteeringObservation, Box<dyn std::error::Error>> {
            let dirs = layout.steer(scope, &iface)?;
            let maps = PathMaps::open_pinned(&dirs.maps_dir)?;
            Ok(SteeringObservation {
                paths: maps.rows()?,
                unsteered_bytes: maps.unsteered()?.bytes,
                monitor: crate::paths::read_monitor(&dirs),
                iface: iface.clone(),
            })
        };
        match read() {
            Ok(o) => out.push(o),
            Err(e) => tracing::debug!(iface = %iface, error = %e, "no path steering counters"),
        }
    }
    out
}

fn shaping(
    layout: &Layout,
    scope: &NetnsScope,
    iface: &str,
) -> Result<Vec<ShapedClass>, Box<dyn std::error::Error>> {
    let paths = layout.iface(scope, iface)?;
    let Some(recorded) = RecordedPolicy::read(&paths)? else {
        return Ok(Vec::new());
    };
    let Some(policy) = recorded.policy.shaping.as_ref() else {
        return Ok(Vec::new());
    };
    let effective = live::effective(policy, &recorded.overrides);
    let counters = ShaperMaps::from_pins(&paths.maps_dir)?.counters()?;
    Ok(effective
        .classes
        .iter()
        .map(|c| {
            let n = counters
                .get(usize::from(c.class))
                .copied()
                .unwrap_or_default();
            ShapedClass {
                class: recorded.policy.classes.name_of(c.class),
                rate_bits: c.rate_bits,
                ceil_bits: c.ceil_bits,
                over_limit: match c.over {
                    OverAction::Drop => "drop",
                    OverAction::EcnMark => "ecn",
                    OverAction::Demote(_) => "demote",
                }
                .to_string(),
                sent_packets: n.sent_packets,
                sent_bytes: n.sent_bytes,
                shaped: n.shaped,
                dropped: n.dropped,
                marked: n.marked,
                demoted: n.demoted,
            }
        })
        .collect())
}

/// The selected estimate of every peer of the session.
pub fn peers(report: &AgentReport) -> Vec<PeerObservation> {
    report
        .session
        .peers
        .iter()
        .map(|p| PeerObservation {
            name: p.name.clone(),
            addr: p.addr.to_string(),
            source: p.selected.as_ref().map(|s| s.source.to_string()),
            offset_ns: p.selected.as_ref().map(|s| s.offset_ns),
            error_bound_ns: p.selected.as_ref().map(|s| s.error_bound_ns),
            drift_ppm: p.selected.as_ref().map(|s| s.drift_ppm),
            samples: p.selected.as_ref().map_or(0, |s| s.samples_used as u64),
            probes_refused: p.auth,
        })
        .collect()
}
