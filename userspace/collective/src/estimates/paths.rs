//! One [`Sampler`] per WAN path (issue 14): a rank whose bulk connections
//! across domains are striped over several paths (`crate::stripe`) estimates,
//! paces and chooses the congestion control of each path's connections on
//! their own, exactly as a single path's: each path has its own bottleneck
//! queue, rate and loss. A cap from one estimate of both paths held the
//! faster path's connections to a share of the sum; without any, the
//! striped connections ran BBR unpaced (1.28–1.41× the two-path bound
//! where the single path, paced, took 1.08–1.10× its own).
//!
//! ```text
//! bulk WAN sockets, by path ──► Sampler path 0 ──► caps, clamps, cc of path 0's sockets
//!                          └──► Sampler path 1 ──► … of path 1's
//! WanRate / WanSending frames of the domain's ranks ──► RateInbox ──► the Sampler of
//!                                                       the frame's path (header `lane`)
//! ```
//!
//! What the start-up probe measured crossed every path at once: the probing
//! rank publishes what its connections of each path delivered meanwhile
//! (`crate::probe`), and every rank seeds each path with the probed rate
//! split in that proportion. Seeded with nothing, each path's pacing waited
//! for the domain's windows: unpaced BBR dropped 5–15 k frames per path at
//! each start on `dual`; held to a waiting seed, the first operations took
//! twice the bound. The in-flight governor's window clamps
//! ([`super::inflight`]) are left off striped connections: with them the
//! start-up dropped nothing, but the striped probe measured anything from 33
//! to 248 of 300 Mbit/s (docs/BENCHMARKS.md). A configured `wan_rate_bps`
//! (one path's rate) is not applied.

use std::net::TcpStream;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use super::{CcNames, Control, LinkEstimate, Sampler, Shared};
use crate::links::Out;
use crate::wire::WanRate;

/// The samplers of a rank's WAN paths.
pub(crate) struct WanPaths {
    /// Index = path; `None` where this rank has no bulk connection on it.
    samplers: Vec<Option<Sampler>>,
}

impl WanPaths {
    /// `None` when the rank has no bulk connection across domains.
    /// `sockets`: each with the path it uses (0 when not striped).
    pub fn start(
        rank: usize,
        sockets: Vec<(usize, TcpStream)>,
        inflight_gain: Option<f64>,
        congestion: Option<CcNames>,
    ) -> Option<WanPaths> {
        let paths = sockets.iter().map(|(p, _)| p + 1).max()?;
        let mut by_path: Vec<Vec<TcpStream>> = (0..paths).map(|_| Vec::new()).collect();
        for (p, s) in sockets {
            by_path[p].push(s);
        }
        // Striped paths go without the governor's window clamps (module docs).
        let gain = inflight_gain.filter(|_| paths == 1);
        let samplers = by_path
            .into_iter()
            .enumerate()
            .map(|(p, s)| Sampler::start(rank, p, s, gain, congestion.clone()))
            .collect();
        Some(WanPaths { samplers })
    }

    fn each(&self) -> impl Iterator<Item = &Sampler> {
        self.samplers.iter().flatten()
    }

    /// Striped over several paths.
    pub fn several(&self) -> bool {
        self.samplers.len() > 1
    }

    /// For the connections' readers: the windows of the domain's other ranks.
    pub fn inbox(&self) -> RateInbox {
        RateInbox(
            self.samplers
                .iter()
                .map(|s| s.as_ref().map(|s| s.shared.clone()))
                .collect(),
        )
    }

    /// See [`Sampler::set_domain`].
    pub fn set_domain(&self, me: usize, peers: Vec<Sender<Out>>) {
        for s in self.each() {
            s.set_domain(me, peers.clone());
        }
    }

    /// See [`Sampler::started`]; with several paths, the probe's `seed` is
    /// split among them by `split` (the probing rank's rate of each, the
    /// same on every rank; this rank's own when it has none), and a
    /// configured rate is not applied (module docs).
    pub fn started(
        &self,
        sharers: usize,
        seed: Option<f64>,
        pace: Option<(usize, Option<f64>)>,
        split: &[f64],
    ) {
        if !self.several() {
            for s in self.each() {
                s.started(sharers, seed, pace);
            }
            return;
        }
        let own = if split.len() == self.samplers.len() {
            split.to_vec()
        } else {
            self.goodputs()
        };
        for (p, (s, seed)) in self.samplers.iter().zip(split_seed(seed, &own)).enumerate() {
            tracing::debug!(
                path = p,
                seed_mbit_s = seed.map(|b| b * 8e-6),
                "WAN path's start"
            );
            if let Some(s) = s {
                s.started(sharers, seed, pace.map(|(flows, _)| (flows, None)));
            }
        }
    }

    /// See [`Sampler::seed_is_floor`].
    pub fn seed_is_floor(&self) {
        for s in self.each() {
            s.seed_is_floor();
        }
    }

    /// Each path's estimate now (index = path).
    pub fn estimates(&self) -> Vec<Option<LinkEstimate>> {
        self.samplers
            .iter()
            .map(|s| s.as_ref().and_then(Sampler::estimate))
            .collect()
    }

    /// Each path's payload rate now, bytes/s (index = path; 0 where not
    /// measured yet).
    pub fn goodputs(&self) -> Vec<f64> {
        self.estimates()
            .iter()
            .map(|e| e.map_or(0.0, |e| e.goodput_bps / 8.0))
            .collect()
    }

    /// The WAN as one link: the only path's estimate, or all paths' together
    /// ([`combined`]).
    pub fn estimate(&self) -> Option<LinkEstimate> {
        let all: Vec<LinkEstimate> = self.estimates().into_iter().flatten().collect();
        match all.as_slice() {
            [] => None,
            [one] if !self.several() => Some(*one),
            _ => combined(&all),
        }
    }
}

/// The probe's rate of all paths together (payload bytes/s), split among
/// them in proportion to `own` (this rank's rate of each before start-up);
/// `None` for a path this rank has not seen carry anything, and for all
/// without a probed rate.
pub fn split_seed(seed: Option<f64>, own: &[f64]) -> Vec<Option<f64>> {
    let total: f64 = own.iter().filter(|r| r.is_finite() && **r > 0.0).sum();
    own.iter()
        .map(|&r| {
            let b = seed.filter(|b| b.is_finite() && *b > 0.0)?;
            (r.is_finite() && r > 0.0 && total > 0.0).then(|| b * r / total)
        })
        .collect()
}

/// Several paths' estimates as one link: the rates add up (the stripe uses
/// them together), the RTTs are the quickest path's, the ages the oldest's,
/// the counts the sum; loss-based only when every path is; no one pacing
/// cap (each path has its own).
pub fn combined(paths: &[LinkEstimate]) -> Option<LinkEstimate> {
    if paths.is_empty() {
        return None;
    }
    let min_d = |f: fn(&LinkEstimate) -> Duration| paths.iter().map(f).min().unwrap_or_default();
    Some(LinkEstimate {
        rate_bps: paths.iter().map(|e| e.rate_bps).sum(),
        goodput_bps: paths.iter().map(|e| e.goodput_bps).sum(),
        rtt: min_d(|e| e.rtt),
        min_rtt: min_d(|e| e.min_rtt),
        samples: paths.iter().map(|e| e.samples).sum(),
        age: paths.iter().map(|e| e.age).max().unwrap_or_default(),
        retransmits: paths.iter().map(|e| e.retransmits).sum(),
        pacing_per_socket: None,
        loss_based: paths.iter().all(|e| e.loss_based),
        losses: paths.iter().map(|e| e.losses).sum(),
    })
}

/// Where a connection's reader hands the `WanRate` and `WanSending` frames of
/// a rank of the same domain: to the sampler of the path the frame names.
#[derive(Clone)]
pub(crate) struct RateInbox(Vec<Option<Arc<Shared>>>);

impl RateInbox {
    fn path(&self, path: u32) -> Option<&Arc<Shared>> {
        let p = self.0.get(path as usize)?.as_ref();
        if p.is_none() {
            // A rank of the domain with more paths than this one: its
            // windows of a path this rank does not use say nothing here.
            tracing::trace!(path, "domain window of a path this rank has no sampler for");
        }
        p
    }

    /// Runs `f` on the control of `path`'s sampler, if this rank has one.
    fn on_path(&self, path: u32, f: impl FnOnce(&mut Control)) {
        if let Some(s) = self.path(path) {
            f(&mut s.state.lock().unwrap_or_else(|p| p.into_inner()));
        }
    }

    pub fn deliver(&self, from: usize, path: u32, r: WanRate) {
        self.on_path(path, |c| c.peer_window(from, r));
    }

    pub fn sending(&self, from: usize, path: u32, sending: bool) {
        self.on_path(path, |c| c.peer_sending(from, sending));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(mbit: f64, rtt_ms: u64, loss_based: bool, losses: u64) -> LinkEstimate {
        LinkEstimate {
            rate_bps: mbit * 1.04e6,
            goodput_bps: mbit * 1e6,
            rtt: Duration::from_millis(rtt_ms + 2),
            min_rtt: Duration::from_millis(rtt_ms),
            samples: 10,
            age: Duration::from_millis(rtt_ms * 2),
            retransmits: losses * 2,
            pacing_per_socket: Some(1_000_000),
            loss_based,
            losses,
        }
    }

    #[test]
    fn two_paths_add_their_rates_and_keep_the_quicker_rtt() {
        let c = combined(&[est(200.0, 40, true, 0), est(100.0, 60, false, 3)]).unwrap();
        assert!((c.goodput_bps - 300e6).abs() < 1.0);
        assert!((c.rate_bps - 312e6).abs() < 1.0);
        assert_eq!(c.rtt, Duration::from_millis(42));
        assert_eq!(c.min_rtt, Duration::from_millis(40));
        assert_eq!(c.age, Duration::from_millis(120));
        assert_eq!((c.samples, c.retransmits, c.losses), (20, 6, 3));
        assert_eq!(c.pacing_per_socket, None, "each path has its own cap");
        assert!(!c.loss_based, "one path is still model-based");
        assert!(combined(&[]).is_none());
    }

    #[test]
    fn the_probed_rate_is_split_by_what_each_path_carried() {
        let s = split_seed(Some(300.0), &[100.0, 50.0]);
        assert_eq!(s, vec![Some(200.0), Some(100.0)]);
        assert_eq!(
            split_seed(Some(300.0), &[80.0, 0.0]),
            vec![Some(300.0), None]
        );
        assert_eq!(split_seed(None, &[80.0, 40.0]), vec![None, None]);
        assert_eq!(split_seed(Some(300.0), &[0.0, f64::NAN]), vec![None, None]);
    }

    #[test]
    fn a_frame_for_a_path_without_a_sampler_is_dropped() {
        let inbox = RateInbox(vec![None]);
        assert!(inbox.path(0).is_none());
        assert!(inbox.path(7).is_none());
        let w = WanRate {
            window: 1,
            bytes: 10,
            interval_us: 1,
            limited: false,
            queued: false,
            clear: false,
        };
        inbox.deliver(1, 3, w);
        inbox.sending(1, 0, true);
    }
}
