//! Several WAN paths to one remote domain (issue 14): which address reaches a
//! peer over which path, the dispatcher that spreads a peer's bulk chunks over
//! the paths by weight ([`sched`]), and the receiver's duplicate filter.
//!
//! ```text
//! CAUSEWAY_WAN_PATHS=10.0.1.10,10.0.2.10   this rank's address on path 0, 1, …
//!      │ (store: paths/<session>/<rank>)
//!      ▼
//! mesh: streams_wan bulk connections per path, dialled to the peer's path-p
//!       address (the listener takes every local address)
//!      ▼
//! links: PeerLink::send_data ──► sched::Stripe ──► connection of path p
//!        (pending queue; each path gets chunks while its bytes in flight stay
//!         under its share of the in-flight budget: weights from
//!         causeway_core::paths::Weights, fed by TCP_INFO per path)
//! ```
//! An operation's last frames (those of its last two windows of lanes) are cut
//! into one piece per path, sized so that the pieces land together
//! ([`tail`]): whole frames split a few ways cannot end the paths at once.
//!
//! A path that stops acknowledging (estimator: Down) loses its share at once;
//! the chunks it was given and not yet acknowledged are queued again for the
//! other paths. The receiver drops a chunk it already has ([`Dedup`]), so a
//! chunk that arrives twice (resent, and later delivered by the path that
//! came back) is applied once.
//!
//! Without `CAUSEWAY_WAN_PATHS` (or when either end of a pair lists fewer than
//! two paths) nothing here runs: today's single path, unchanged.

pub(crate) mod sched;
mod sock;
mod tail;

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::error::ConfigError;
use crate::error::{CollectiveError, Rank, Result};
use crate::store::StoreClient;
use crate::wire::{FrameHeader, FrameKind};

/// Parses `CAUSEWAY_WAN_PATHS`: this rank's own address on each WAN path, in
/// path order, comma-separated (empty: one path, the listener's address).
pub fn parse_paths(v: &str) -> std::result::Result<Vec<IpAddr>, ConfigError> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(Vec::new());
    }
    let ips = v
        .split(',')
        .map(|s| {
            s.trim()
                .parse::<IpAddr>()
                .map_err(|e| ConfigError::InvalidVar {
                    name: "CAUSEWAY_WAN_PATHS".into(),
                    value: v.into(),
                    reason: format!("{s:?}: {e}"),
                })
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if ips.len() > MAX_PATHS {
        return Err(ConfigError::InvalidVar {
            name: "CAUSEWAY_WAN_PATHS".into(),
            value: v.into(),
            reason: "at most 8 paths".into(),
        });
    }
    Ok(ips)
}

/// The address the listener binds: every local one when peers may dial this
/// rank's address on several paths, else `ip`.
pub(crate) fn listen_ip(ip: IpAddr, paths: &[IpAddr]) -> IpAddr {
    match (paths.len() > 1, ip) {
        (false, _) => ip,
        (true, IpAddr::V4(_)) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        (true, IpAddr::V6(_)) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}

fn key(session: u64, rank: Rank) -> String {
    format!("paths/{session:016x}/{rank}")
}

/// The path addresses of every rank `wanted` (others: empty). Each rank
/// publishes its own and reads its peers', so both ends of a pair agree on how
/// many paths they share: the fewer of the two lists (one = no striping).
/// Every rank calls this when `CAUSEWAY_WAN_PATHS` is set on any (ranks
/// agree on that at rendezvous).
pub(crate) fn exchange(
    store: &mut StoreClient,
    session: u64,
    me: Rank,
    world: usize,
    mine: &[IpAddr],
    wanted: impl Fn(Rank) -> bool,
    timeout: Duration,
) -> Result<Vec<Vec<IpAddr>>> {
    let enc: Vec<String> = mine.iter().map(ToString::to_string).collect();
    store.set(&key(session, me), enc.join(",").as_bytes())?;
    (0..world)
        .map(|q| {
            if q == me {
                return Ok(mine.to_vec());
            }
            if !wanted(q) {
                return Ok(Vec::new());
            }
            let v = store.get(&key(session, q), timeout)?;
            parse_paths(&String::from_utf8_lossy(&v)).map_err(|e| {
                CollectiveError::Rendezvous(format!("rank {q} published bad WAN paths: {e}"))
            })
        })
        .collect()
}

/// Paths `me` and `q` share (0 or 1: no striping).
pub(crate) fn shared_paths(table: &[Vec<IpAddr>], me: Rank, q: Rank) -> usize {
    match (table.get(me), table.get(q)) {
        (Some(a), Some(b)) => a.len().min(b.len()),
        _ => 0,
    }
}

/// Process-wide counters of every striped peer (tests, benchmarks).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    /// Data bytes (frame headers included) handed to each path, by index.
    pub bytes_per_path: Vec<u64>,
    /// Each path's weight at the latest update of any striped peer (as long
    /// as `bytes_per_path`).
    pub weights: Vec<f64>,
    /// Frames (and their bytes) sent again because their path went down.
    pub resent_frames: u64,
    pub resent_bytes: u64,
    /// Times a path was declared down / back up.
    pub path_down: u64,
    pub path_up: u64,
    /// Frames of operations' ends cut into pieces across the paths ([`tail`]).
    pub split_frames: u64,
}

pub(crate) struct Totals {
    pub bytes: [AtomicU64; MAX_PATHS],
    /// `f64::to_bits` of the latest weights.
    pub weights: [AtomicU64; MAX_PATHS],
    pub resent_frames: AtomicU64,
    pub resent_bytes: AtomicU64,
    pub path_down: AtomicU64,
    pub path_up: AtomicU64,
    pub split_frames: AtomicU64,
}

pub(crate) const MAX_PATHS: usize = 8;

pub(crate) static TOTALS: Totals = Totals {
    bytes: [const { AtomicU64::new(0) }; MAX_PATHS],
    weights: [const { AtomicU64::new(0) }; MAX_PATHS],
    resent_frames: AtomicU64::new(0),
    resent_bytes: AtomicU64::new(0),
    path_down: AtomicU64::new(0),
    path_up: AtomicU64::new(0),
    split_frames: AtomicU64::new(0),
};

/// What every striped peer of this process did so far.
pub fn counters() -> Counters {
    let t = &TOTALS;
    let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut bytes: Vec<u64> = t.bytes.iter().map(r).collect();
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    let weights = t.weights[..bytes.len()]
        .iter()
        .map(|w| f64::from_bits(r(w)))
        .collect();
    Counters {
        bytes_per_path: bytes,
        weights,
        resent_frames: r(&t.resent_frames),
        resent_bytes: r(&t.resent_bytes),
        path_down: r(&t.path_down),
        path_up: r(&t.path_up),
        split_frames: r(&t.split_frames),
    }
}

/// Data frames already received from one striped peer, by (op, lane, step,
/// offset); ops far behind the newest are forgotten.
#[derive(Default)]
pub(crate) struct Dedup {
    seen: Mutex<BTreeMap<u64, HashSet<ChunkId>>>,
}

/// A data frame within its op: (lane, step, offset).
type ChunkId = (u32, u32, u64);

/// Ops older than the newest by more than this are forgotten.
const KEEP_OPS: u64 = 256;

impl Dedup {
    /// True if this data frame arrived before (drop it); records it otherwise.
    pub fn duplicate(&self, h: &FrameHeader) -> bool {
        if h.kind != FrameKind::Data {
            return false;
        }
        let Ok(mut seen) = self.seen.lock() else {
            return false;
        };
        let newest = seen.keys().next_back().copied().unwrap_or(0).max(h.op);
        if h.op + KEEP_OPS < newest {
            // Long forgotten: an op that old is finished everywhere.
            return true;
        }
        let fresh = seen
            .entry(h.op)
            .or_default()
            .insert((h.lane, h.step, h.offset));
        while seen.keys().next().is_some_and(|&op| op + KEEP_OPS < newest) {
            seen.pop_first();
        }
        !fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_path_lists() {
        assert!(parse_paths("").unwrap().is_empty());
        let p = parse_paths("10.0.1.10, 10.0.2.10").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].to_string(), "10.0.2.10");
        assert!(parse_paths("10.0.1.10,nope").is_err());
        assert!(parse_paths(&["1.1.1.1"; 9].join(",")).is_err());
    }

    #[test]
    fn pairs_share_the_shorter_list() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let t = vec![vec![ip, ip], vec![ip, ip, ip], vec![]];
        assert_eq!(shared_paths(&t, 0, 1), 2);
        assert_eq!(shared_paths(&t, 1, 2), 0);
        assert_eq!(shared_paths(&t, 0, 9), 0);
    }

    #[test]
    fn a_chunk_is_applied_once() {
        let d = Dedup::default();
        let mut h = FrameHeader::control(FrameKind::Data, 10);
        h.op = 5;
        h.offset = 4096;
        assert!(!d.duplicate(&h));
        assert!(d.duplicate(&h));
        h.offset = 8192;
        assert!(!d.duplicate(&h));
        // Control frames are never filtered.
        let hb = FrameHeader::control(FrameKind::Heartbeat, 0);
        assert!(!d.duplicate(&hb) && !d.duplicate(&hb));
        // Far newer ops push the old ones out; a straggler of those is dropped.
        h.op = 5 + KEEP_OPS + 1;
        assert!(!d.duplicate(&h));
        h.op = 5;
        h.offset = 1;
        assert!(d.duplicate(&h));
    }
}
