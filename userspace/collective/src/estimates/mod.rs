//! WAN link estimates from the kernel, and the pacing they drive (issue 13).
//!
//! ```text
//! TCP_INFO of this rank's     ┌───────────────┐ LinkEstimate  ┌───────┐ SO_MAX_PACING_RATE
//! bulk WAN connections  ────► │ LinkEstimator │ ────────────► │ Pacer │ ─────────────────►
//! (every 10 ms, sampler)      └───────────────┘               └───────┘ (every bulk socket)
//! ```
//!
//! - [`LinkEstimator`] (pure, time as input) sums the fresh `tcpi_delivery_rate`
//!   samples of a rank's bulk connections into one sample of the path's rate and
//!   feeds it to `causeway_core::paths::PathEstimator` (a windowed max filter),
//!   with `tcpi_rtt` as RTT samples; the minimum RTT is the kernel's
//!   `tcpi_min_rtt`. A sample counts only when it may raise the estimate if it
//!   was app-limited or held at the pacing cap: such a sample says "at least
//!   this", not "this".
//! - Every rank of a domain sends across the WAN at once (hierarchical
//!   allreduce). When the domain has other ranks, start-up over, the rate
//!   samples are the **domain's** ([`domain`]): each rank counts what its
//!   bulk connections had delivered (`tcpi_delivered` × MSS) in 200 ms
//!   wall-clock windows and sends every window to the domain's other ranks
//!   (a `WanRate` frame); the sum of a window is the path's rate however the
//!   ranks split it while the path was full (no rank idle or app-limited,
//!   every rank's RTT showing a queue), a lower bound otherwise. One rank's
//!   share scaled by its domain's ranks (what a rank alone in its process
//!   can see) swings by ±30 % from window to window, and the max filter kept
//!   the high swings: estimates 10–25 % above the link (docs/BENCHMARKS.md).
//!   A rank alone in its domain, and every rank during the start-up probe
//!   (one pair sends), still uses its own delivery-rate samples.
//! - [`Pacer`] (pure) turns the estimate into each bulk socket's cap: the
//!   domain's ranks that have WAN data to send ([`share::DomainShare`]: they
//!   say so to each other in `WanSending` frames) together aim at a level of
//!   the rate, each rank's share split among its connections with data
//!   waiting to be sent (one chunk
//!   travels on one connection, which may then use the rank's whole share;
//!   see [`sending`]). The level is [`trim::QueueTrim`]'s: 0.84–1.08 of the
//!   estimate, set from the queueing delay the connections' RTT shows, so
//!   that a short queue stands at the bottleneck (the path never idles, the
//!   queue never overflows). With a configured rate it is
//!   [`PACING_TARGET`]. A path that got faster is found with the trim at
//!   its ceiling: the caps then sit above the estimate, and what the path
//!   delivers under them raises it. A BBR-like gain cycle (one min-RTT at
//!   1.25, one at 0.75, six at 1) did that before the trim; with the trim
//!   it only cost (wan40, 64 MiB: 1.15–1.17× the bound with it,
//!   1.09–1.10× without): the ranks' cycles are not in step, so while one
//!   probed the other's queue reading pushed its level down.
//! - [`inflight::InflightGovernor`] (pure) clamps the bulk connections'
//!   receive windows so that together they keep at most a multiple of the
//!   path's measured BDP in flight, from the first byte on: the start-up
//!   probe runs before any pacing cap, and the congestion control's own
//!   start-up would overflow a one-BDP bottleneck queue. The clamps are
//!   released when start-up is over.
//! - [`cc_choice::CcChoice`] (pure) chooses the bulk connections' congestion
//!   control once they are paced: the configured BBR while the path loses
//!   packets, a loss-based one (Reno) while it does not, so that
//!   BBR's ProbeRTT does not stall a rank's connections every 10 s.
//! - [`Sampler`] is the thread that reads the sockets and applies the caps,
//!   the clamps and the congestion control switches: one per WAN path when
//!   the bulk connections are striped over several ([`paths`]), each with
//!   its own estimate, domain windows, trim and congestion control.

pub mod cc_choice;
pub mod domain;
pub mod inflight;
pub(crate) mod paths;
pub mod share;
pub mod trim;

use cc_choice::Cc;
use domain::Fill;
pub(crate) use paths::{RateInbox, WanPaths};

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use causeway_core::paths::{EstimatorConfig, PathEstimator};

use crate::links::Out;
use crate::pool::PooledBuf;
use crate::transport::tcp::{self, TcpInfo};
use crate::wire::{FrameHeader, FrameKind, WanRate, WanSending};

/// Bytes on the wire per segment beyond its payload: Ethernet (14), IPv4
/// (20), TCP (20) with timestamps (12). `rate_bps` adds them back to the
/// kernel's payload rates, so it compares with a link's configured rate.
pub const WIRE_OVERHEAD: u32 = 66;
/// What the paced flows of a domain aim at together, as a fraction of the
/// estimated rate.
pub const PACING_TARGET: f64 = 0.96;
/// A domain window with room on the path while the ranks were paced is
/// worth this much more than they sent ([`LinkEstimator::domain_sample`]);
/// each further window with room in a row doubles the step above 1, up to
/// [`ROOM_STEP_MAX`]: an estimate far below the path (a start-up probe
/// that measured a lossy path low) climbs within seconds, one near it by
/// little.
pub const ROOM_STEP: f64 = 1.05;
/// See [`ROOM_STEP`].
pub const ROOM_STEP_MAX: f64 = 1.25;
/// A window with room climbs above what it measured only when it carried
/// this much more than the estimate: then the caps (at the trim's ceiling,
/// 8 % above the estimate), not the path, held the ranks back. A window that
/// carried no more than the estimate had room because something else held
/// the ranks (loss recovery on a lossy path leaves no queue): climbing from
/// it put lossy120's estimate 14.5 % above the path, and the trim at its
/// floor still overfilled the queue (5,748 drops).
pub const ROOM_BEATS: f64 = 1.03;
/// Full domain windows within [`FULL_WINDOWS_SPAN`] needed to lower the
/// domain's estimate, to the largest window of the span: on lossy80 full
/// windows read 68–85 of 100 Mbit/s now and then, between windows of 90–99,
/// and three of them within 2 s once set the estimate 17 % low.
pub const FULLS_TO_FALL: usize = 3;
/// See [`FULLS_TO_FALL`].
pub const FULL_WINDOWS_SPAN: Duration = Duration::from_secs(2);
/// A sample at or above this fraction of the caps' sum is pacing-limited.
const AT_CAP: f64 = 0.9;
/// How often the sampler reads the sockets.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// What this rank knows of its WAN path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkEstimate {
    /// The path's rate, bit/s on the wire (payload rate plus [`WIRE_OVERHEAD`] per segment).
    pub rate_bps: f64,
    /// The path's rate for payload (TCP goodput), bit/s.
    pub goodput_bps: f64,
    /// Smoothed RTT of the bulk connections (`tcpi_rtt`).
    pub rtt: Duration,
    /// The kernel's minimum RTT over the bulk connections (`tcpi_min_rtt`).
    pub min_rtt: Duration,
    /// Samples that went into the rate.
    pub samples: u64,
    /// Age of the newest sample behind the rate.
    pub age: Duration,
    /// Segments retransmitted on the bulk connections so far.
    pub retransmits: u64,
    /// The cap each bulk connection is paced to now, bytes/s (`None`: not paced).
    pub pacing_per_socket: Option<u64>,
    /// The bulk connections run a loss-based congestion control now: the
    /// path has shown no real loss ([`cc_choice`]).
    pub loss_based: bool,
    /// Retransmissions the receiver did not report as duplicates: real
    /// losses ([`cc_choice`]; 0 where the kernel reports no D-SACKs).
    pub losses: u64,
}

impl std::fmt::Display for LinkEstimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} Mbit/s (goodput {:.1}), RTT {:.1} ms (min {:.1} ms), {} samples, {} retransmits",
            self.rate_bps / 1e6,
            self.goodput_bps / 1e6,
            self.rtt.as_secs_f64() * 1e3,
            self.min_rtt.as_secs_f64() * 1e3,
            self.samples,
            self.retransmits
        )?;
        write!(f, " ({} lost)", self.losses)?;
        if let Some(p) = self.pacing_per_socket {
            write!(f, ", paced at {:.1} Mbit/s per connection", p as f64 * 8e-6)?;
        }
        if self.loss_based {
            write!(f, ", loss-based congestion control")?;
        }
        Ok(())
    }
}

/// The estimator of one rank's WAN path from its bulk connections' `TCP_INFO`.
#[derive(Debug, Clone)]
pub struct LinkEstimator {
    path: PathEstimator,
    /// `tcpi_delivered` of each socket at the previous sample.
    delivered: Vec<Option<u32>>,
    sharers: f64,
    /// Sums of the sockets' pacing caps (payload bytes/s) and since when,
    /// oldest first: a delivery-rate sample reflects what was sent about
    /// one RTT earlier, so it is compared with the smallest cap in force
    /// within the last RTT (it was sent under one of them).
    caps: std::collections::VecDeque<(u64, f64)>,
    min_rtt_us: Option<u32>,
    mss: u32,
    samples: u64,
    retransmits: u64,
    /// The rate comes from the domain's summed windows ([`domain`]), not
    /// from this rank's delivery-rate samples.
    domain_mode: bool,
    /// In domain mode: the path's payload rate (bytes/s) and when it last
    /// changed.
    domain_bw: Option<(f64, u64)>,
    /// In domain mode: the windows of the last [`FULL_WINDOWS_SPAN`], when,
    /// their rate and whether they were full.
    recent: std::collections::VecDeque<(u64, f64, bool)>,
    /// In domain mode: windows with room in a row.
    rooms: u32,
    /// In domain mode: a window saw a queue now and then since the last
    /// full window ([`Fill::Partly`]).
    queue_seen: bool,
    /// In domain mode: the estimate has been set by full windows
    /// ([`FULLS_TO_FALL`] of them), not only by lower bounds and the seed.
    measured: bool,
}

impl LinkEstimator {
    pub fn new(sockets: usize) -> Self {
        LinkEstimator {
            path: PathEstimator::new(EstimatorConfig::default()),
            delivered: vec![None; sockets],
            sharers: 1.0,
            caps: Default::default(),
            min_rtt_us: None,
            mss: 1448,
            samples: 0,
            retransmits: 0,
            domain_mode: false,
            domain_bw: None,
            recent: Default::default(),
            rooms: 0,
            queue_seen: false,
            measured: false,
        }
    }

    /// One window of the whole domain's WAN payload rate (bytes/s) and what
    /// it says of the path (the only rate samples once [`Control::started`]
    /// found the domain has other ranks):
    /// - any window is a lower bound of the path: the estimate rises to it;
    ///   a window with room while the ranks were `paced` (their caps, from
    ///   this estimate, held them back: the window carried [`ROOM_BEATS`]
    ///   times the estimate or more) to [`ROOM_STEP`] times it (more
    ///   after several in a row), so the estimate climbs until a queue
    ///   shows; bounded by what was sent, it does not run away when the
    ///   ranks were held back by something else (losses, windows); the
    ///   run of windows with room is broken only by a window that saw a
    ///   standing queue ([`Fill::Full`]), not by one where a rank idled
    ///   ([`Fill::Idle`]: between the steps of a collective, or waiting for
    ///   a retransmission on a lossy path) nor by one that saw a queue only
    ///   now and then ([`Fill::Partly`]). Such a window holds the step at
    ///   its second size (×1.10) until a full window restarts the run: near
    ///   the path it is the trim's short queue, and a larger step
    ///   would overshoot; on busy hosts it is the smoothed RTT jumping by
    ///   milliseconds with no queue at the bottleneck, and when each one
    ///   restarted the run (×1.05, 0.8 % above what the caps sent) a
    ///   400 Mbit/s path's estimate stayed at 0.7–0.8 of it;
    /// - a full window is the path's rate, but one can read low (a loss
    ///   recovery under a still-high smoothed RTT, or busy hosts delaying
    ///   packets and ACKs, which inflates the RTT while the ranks
    ///   underfill): the estimate falls only when [`FULL_WINDOWS_SPAN`]
    ///   holds [`FULLS_TO_FALL`] or more full windows, and only to the
    ///   largest rate of any window in that span (what the path showed it
    ///   still carries). A path that got slower gets there within the span:
    ///   the ranks, paced for the old rate, keep a queue.
    pub fn domain_sample(&mut self, bytes_per_s: f64, fill: Fill, paced: bool, now_ns: u64) {
        if !bytes_per_s.is_finite() || bytes_per_s <= 0.0 {
            return;
        }
        self.samples += 1;
        let old = self.domain_bw.map_or(0.0, |(b, _)| b);
        let mut new = match fill {
            Fill::Room if paced && bytes_per_s >= old * ROOM_BEATS => {
                let run = self.rooms.min(if self.queue_seen { 1 } else { 8 });
                let step = 1.0 + (ROOM_STEP - 1.0) * f64::from(1u32 << run);
                self.rooms += 1;
                old.max(bytes_per_s * step.min(ROOM_STEP_MAX))
            }
            Fill::Room => {
                if paced {
                    self.rooms = 0;
                }
                old.max(bytes_per_s)
            }
            Fill::Idle => old.max(bytes_per_s),
            Fill::Partly => {
                self.queue_seen = true;
                old.max(bytes_per_s)
            }
            Fill::Full => {
                self.rooms = 0;
                self.queue_seen = false;
                old.max(bytes_per_s)
            }
        };
        let span = FULL_WINDOWS_SPAN.as_nanos() as u64;
        while self
            .recent
            .front()
            .is_some_and(|&(at, _, _)| now_ns.saturating_sub(at) > span)
        {
            self.recent.pop_front();
        }
        self.recent
            .push_back((now_ns, bytes_per_s, fill == Fill::Full));
        let fulls = self.recent.iter().filter(|&&(_, _, full)| full).count();
        if fill == Fill::Full && fulls >= FULLS_TO_FALL {
            new = new.min(self.largest_recent_window());
            self.measured = true;
        }
        if new != old {
            self.domain_bw = Some((new, now_ns));
        }
    }

    /// The bulk connections it reads.
    pub fn sockets(&self) -> usize {
        self.delivered.len()
    }

    /// How many ranks send over this path at once (this one included).
    pub fn set_sharers(&mut self, ranks: usize) {
        self.sharers = ranks.max(1) as f64;
    }

    /// The sum of this rank's pacing caps (payload bytes/s) from `now_ns` on.
    pub fn set_cap(&mut self, bytes_per_s: f64, now_ns: u64) {
        self.caps.push_back((now_ns, bytes_per_s));
    }

    /// The largest domain window (payload bytes/s) of the span `recent`
    /// keeps (the [`FULL_WINDOWS_SPAN`] before the newest window), full or
    /// not; 0 without one.
    fn largest_recent_window(&self) -> f64 {
        self.recent.iter().map(|&(_, r, _)| r).fold(0.0, f64::max)
    }

    /// The smallest cap in force within the last RTT (plus two sampling
    /// intervals) before `now_ns`: a sample that reaches it may have been
    /// held by any of them (compared with the largest, a sample sent under
    /// a cap that had just been raised read as not held, and a rank alone
    /// on a shared path claimed its cap times the sharers).
    fn recent_cap(&mut self, now_ns: u64) -> Option<f64> {
        let rtt = u64::from(self.min_rtt_us.unwrap_or(0)) * 1000;
        let since = now_ns.saturating_sub(rtt + 2 * SAMPLE_EVERY.as_nanos() as u64);
        // Drop caps replaced before `since`; the one in force then stays.
        while self.caps.len() > 1 && self.caps[1].0 <= since {
            self.caps.pop_front();
        }
        self.caps.iter().map(|&(_, c)| c).reduce(f64::min)
    }

    /// A rate known from elsewhere (the start-up probe every rank agreed on),
    /// payload bytes/s, as one full sample at `now`.
    pub fn seed(&mut self, bytes_per_s: f64, now_ns: u64) {
        if self.domain_mode {
            self.domain_bw = Some((bytes_per_s, now_ns));
        }
        self.path.delivery_sample(bytes_per_s, false, now_ns);
    }

    /// Whether full windows have set the domain's estimate (see
    /// [`Control::seed_is_floor`]).
    pub fn measured(&self) -> bool {
        self.measured
    }

    /// One reading of every socket at `now_ns` (`None`: unreadable).
    pub fn observe(&mut self, now_ns: u64, infos: &[Option<TcpInfo>]) {
        if self.delivered.len() != infos.len() {
            self.delivered = vec![None; infos.len()];
        }
        let (mut sum, mut fresh, mut app_limited) = (0.0, 0usize, false);
        let mut retrans = 0u64;
        for (last, info) in self.delivered.iter_mut().zip(infos) {
            let Some(i) = info else { continue };
            retrans += u64::from(i.total_retrans);
            if i.snd_mss > 0 {
                self.mss = i.snd_mss;
            }
            if i.min_rtt_us > 0 && i.min_rtt_us != u32::MAX {
                self.min_rtt_us = Some(
                    self.min_rtt_us
                        .map_or(i.min_rtt_us, |m| m.min(i.min_rtt_us)),
                );
            }
            let is_fresh = last.is_some_and(|d| d != i.delivered);
            *last = Some(i.delivered);
            if !is_fresh {
                continue;
            }
            fresh += 1;
            sum += i.delivery_rate as f64;
            app_limited |= i.app_limited;
            if i.rtt_us > 0 {
                self.path.rtt_observed(u64::from(i.rtt_us) * 1000, now_ns);
            }
        }
        self.retransmits = retrans;
        if fresh == 0 || self.domain_mode {
            return;
        }
        let at_cap = self.recent_cap(now_ns).is_some_and(|c| sum >= AT_CAP * c);
        self.samples += 1;
        if app_limited || at_cap {
            // "At least this much", and only for this rank: the other ranks
            // of the domain may have been idle meanwhile, so the sample is
            // not scaled by the sharers (it could only overestimate).
            self.path.delivery_sample(sum, true, now_ns);
        } else {
            self.path.delivery_sample(sum * self.sharers, false, now_ns);
        }
    }

    /// What is published ([`crate::Communicator::link_estimates`], the
    /// start-up probe's goodput): [`estimate`](Self::estimate), with the
    /// domain's rate no higher than the largest window measured in the
    /// [`FULL_WINDOWS_SPAN`] before the newest. The estimate itself climbs above what was
    /// measured while a paced path shows room ([`ROOM_STEP`]), to find more:
    /// that is the pacing target, not the path. Published as it was, a run
    /// that ended mid-climb on wan40 reported 1.05× and 1.10× the path.
    pub fn published(&mut self, now_ns: u64) -> Option<LinkEstimate> {
        let mut e = self.estimate(now_ns)?;
        let measured = self.largest_recent_window() * 8.0;
        if self.domain_mode && measured > 0.0 && measured < e.goodput_bps {
            e.rate_bps *= measured / e.goodput_bps;
            e.goodput_bps = measured;
        }
        Some(e)
    }

    /// The estimate at `now_ns`, `None` before the first rate sample: the
    /// pacing target (see [`published`](Self::published)).
    pub fn estimate(&mut self, now_ns: u64) -> Option<LinkEstimate> {
        let mut e = self.path.estimate(now_ns);
        if let (true, Some((bw, at))) = (self.domain_mode, self.domain_bw) {
            e.bw_bytes_per_s = bw;
            e.bw_age_ns = now_ns.saturating_sub(at);
        }
        if e.bw_bytes_per_s <= 0.0 {
            return None;
        }
        let goodput = e.bw_bytes_per_s * 8.0;
        let wire = goodput * f64::from(self.mss + WIRE_OVERHEAD) / f64::from(self.mss.max(1));
        Some(LinkEstimate {
            rate_bps: wire,
            goodput_bps: goodput,
            rtt: Duration::from_nanos(e.srtt_ns as u64),
            min_rtt: Duration::from_micros(self.min_rtt_us.map_or(0, u64::from)),
            samples: self.samples,
            age: Duration::from_nanos(e.bw_age_ns),
            retransmits: self.retransmits,
            pacing_per_socket: None,
            loss_based: false,
            losses: 0,
        })
    }
}

/// How many of a rank's connections its share of the path is split among:
/// those with data waiting to be sent, or, when none has, those with data
/// in flight. A connection that has sent all it has (the tail of a chunk,
/// waiting for ACKs, or the small transfers to a rank that is not this
/// one's counterpart) needs no share of the rate: counted, it would hold
/// the connections that do to a fraction of theirs.
fn sending(infos: &[Option<TcpInfo>]) -> usize {
    match infos
        .iter()
        .flatten()
        .filter(|i| i.busy && i.unsent)
        .count()
    {
        0 => infos.iter().flatten().filter(|i| i.busy).count(),
        n => n,
    }
}

/// Each bulk socket's pacing cap from the estimate.
/// A rank's share of the path is split among its sending connections only: a
/// transfer of one chunk travels on one connection, which then may use the
/// rank's whole share.
#[derive(Debug, Clone, PartialEq)]
pub struct Pacer {
    /// Ranks of the domain sending across the WAN at once.
    pub flows: usize,
}

impl Pacer {
    /// One socket's cap, bytes/s, for a path of `goodput_bytes_per_s` when
    /// `busy` of this rank's connections carry data, the domain aiming at
    /// `level` of the path ([`PACING_TARGET`], or the [`trim`]'s).
    pub fn per_socket(&self, goodput_bytes_per_s: f64, level: f64, busy: usize) -> u64 {
        let flows = (self.flows.max(1) * busy.max(1)) as f64;
        (goodput_bytes_per_s * level / flows) as u64
    }
}

/// The estimator and the pacer together: what the sampler thread runs on
/// each reading (pure; the tests drive it on virtual time).
#[derive(Debug, Clone)]
pub struct Control {
    pub est: LinkEstimator,
    /// Pacing, once started, and a configured rate (payload bytes/s) that
    /// replaces the estimate.
    pub pacer: Option<(Pacer, Option<f64>)>,
    /// The cap applied to every socket now, bytes/s.
    pub applied: Option<u64>,
    /// This rank's windows and its domain's sums, when the domain has other
    /// ranks ([`Control::set_domain`]); used once start-up is over.
    pub domain: Option<(domain::WindowMeter, domain::DomainSum)>,
    started: bool,
    /// No cap until full windows have measured the path
    /// ([`Control::seed_is_floor`]).
    hold: bool,
    /// The level paced at, from the queue ([`trim`]; not with a configured rate).
    pub trim: trim::QueueTrim,
    /// The congestion control chosen by the path's loss, when enabled
    /// ([`Control::choose_congestion`]).
    pub cc: Option<cc_choice::CcChoice>,
    /// The domain's ranks that send now, when the domain has others
    /// ([`share`]): the path is split among them, not among all.
    pub share: Option<share::DomainShare>,
}

impl Control {
    pub fn new(sockets: usize) -> Self {
        Control {
            est: LinkEstimator::new(sockets),
            pacer: None,
            applied: None,
            domain: None,
            started: false,
            hold: false,
            trim: trim::QueueTrim::default(),
            cc: None,
            share: None,
        }
    }

    /// Let the path's loss choose the connections' congestion control
    /// ([`cc_choice`]) once they are paced.
    pub fn choose_congestion(&mut self) {
        self.cc = Some(cc_choice::CcChoice::new(self.est.sockets()));
    }

    /// The connections to switch to another congestion control now
    /// ([`cc_choice::CcChoice::observe`]); judged only while paced.
    pub fn congestion(&mut self, now_ns: u64, infos: &[Option<TcpInfo>]) -> Vec<(usize, Cc)> {
        let paced = self.started && self.pacer.is_some() && !self.hold;
        match &mut self.cc {
            Some(c) => c.observe(now_ns, paced, infos),
            None => Vec::new(),
        }
    }

    /// Connection `sock` refused the loss-based congestion control.
    pub fn congestion_refused(&mut self, sock: usize) {
        if let Some(c) = &mut self.cc {
            c.refused(sock);
        }
    }

    /// This rank (`me`) shares its domain's WAN with other ranks, which send
    /// it their windows ([`Control::peer_window`]).
    pub fn set_domain(&mut self, me: usize) {
        self.domain = Some((domain::WindowMeter::default(), domain::DomainSum::new(me)));
        self.share = Some(share::DomainShare::new(1));
    }

    /// Rank `from` of the domain said whether it has WAN data to send.
    pub fn peer_sending(&mut self, from: usize, sending: bool) {
        if let Some(s) = &mut self.share {
            s.peer(from, sending);
        }
    }

    /// One reading for the domain's split of the path: whether this rank
    /// has WAN data to send, when that changed (to announce to the domain's
    /// other ranks). Only once paced.
    pub fn sending(&mut self, now_ns: u64, infos: &[Option<TcpInfo>]) -> Option<bool> {
        if !self.started || self.pacer.is_none() {
            return None;
        }
        let min_rtt = self.est.min_rtt_us.unwrap_or(0);
        self.share.as_mut()?.observe(now_ns, min_rtt, infos)
    }

    /// A window of another rank of the domain.
    pub fn peer_window(&mut self, from: usize, r: WanRate) {
        if let Some((_, sum)) = &mut self.domain {
            sum.add(from, r);
        }
    }

    /// One reading of the sockets at `now_ns`; returns the cap every socket
    /// must get now, when it changed.
    pub fn tick(&mut self, now_ns: u64, infos: &[Option<TcpInfo>]) -> Option<u64> {
        self.tick_at(now_ns, now_ns, infos).0
    }

    /// [`Control::tick`] with the wall clock (`wall_ns`) that aligns the
    /// domain's windows; also returns this rank's window that the reading
    /// closed, for the other ranks of the domain.
    pub fn tick_at(
        &mut self,
        now_ns: u64,
        wall_ns: u64,
        infos: &[Option<TcpInfo>],
    ) -> (Option<u64>, Option<WanRate>) {
        self.est.observe(now_ns, infos);
        let mut report = None;
        let paced = self.held_by_caps();
        if let (true, Some((meter, sum))) = (self.started, &mut self.domain) {
            report = meter.observe(now_ns, wall_ns, infos);
            if let Some(r) = report {
                sum.add_mine(r);
            }
            for (rate, fill) in sum.take_complete() {
                self.est.domain_sample(rate, fill, paced, now_ns);
            }
        }
        (self.cap(now_ns, infos), report)
    }

    /// Whether the caps, not the path, may be what held the ranks back, so
    /// that a window with room says the path carries more than was sent
    /// ([`LinkEstimator::domain_sample`]'s climb): paced, and either at a
    /// configured rate or with the [`trim`] at its ceiling. Below the
    /// ceiling the trim itself raises the caps until a queue shows; both
    /// climbing at once overshot the path (wan40: the estimate at 1.04× the
    /// path, the trim at its floor, a 14 ms queue standing).
    fn held_by_caps(&self) -> bool {
        match &self.pacer {
            Some((_, fixed)) => !self.hold && (fixed.is_some() || self.trim.at_ceiling()),
            None => false,
        }
    }

    fn cap(&mut self, now_ns: u64, infos: &[Option<TcpInfo>]) -> Option<u64> {
        let (pacer, fixed) = self.pacer.clone()?;
        if self.hold {
            if fixed.is_none() && !self.est.measured() {
                return None;
            }
            self.hold = false;
        }
        let last = self.est.estimate(now_ns);
        let goodput = fixed.or(last.map(|e| e.goodput_bps / 8.0))?;
        let level = match fixed {
            Some(_) => PACING_TARGET,
            None => self.trim.observe(infos, self.est.min_rtt_us.unwrap_or(0)),
        };
        let busy = sending(infos);
        let flows = self.share.as_ref().map_or(pacer.flows, |s| s.flows(now_ns));
        let cap = Pacer { flows }.per_socket(goodput, level, busy);
        if self.applied == Some(cap) {
            return None;
        }
        self.applied = Some(cap);
        self.est.set_cap(cap as f64 * busy.max(1) as f64, now_ns);
        Some(cap)
    }

    /// Start-up is over: see [`Sampler::started`].
    pub fn started(
        &mut self,
        now_ns: u64,
        sharers: usize,
        seed: Option<f64>,
        pace: Option<(usize, Option<f64>)>,
    ) {
        self.est.set_sharers(sharers);
        self.started = true;
        // From now on the domain's sums are the only rate samples.
        self.est.domain_mode = self.domain.is_some();
        if let Some(b) = seed.filter(|b| b.is_finite() && *b > 0.0) {
            self.est.seed(b, now_ns);
        }
        self.pacer = pace.map(|(flows, fixed)| (Pacer { flows }, fixed));
        if let (Some(s), Some((flows, _))) = (&mut self.share, pace) {
            s.set_ranks(flows);
        }
    }

    /// Whether start-up is over ([`Control::started`]).
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// The seed given to [`Control::started`] is only a lower bound: the
    /// start-up probe stopped while its rate still rose (a long path whose
    /// probe rounds ended in TCP's start-up). Caps from it would hold the
    /// ranks to that floor (a sixth of a 120 ms, 50 Mbit/s path: 64 MiB took
    /// 2 to 6 times the bound while the estimate climbed), so pacing waits
    /// until the domain's full windows have measured the path; until then
    /// the congestion control alone (BBR by default) paces. No effect with
    /// a configured rate, or where the domain has no other rank (no windows:
    /// the seed is never replaced, so the caps start from it as before).
    pub fn seed_is_floor(&mut self) {
        self.hold = self.domain.is_some();
    }

    /// The estimate at `now_ns`, with the cap applied now.
    pub fn estimate(&mut self, now_ns: u64) -> Option<LinkEstimate> {
        let applied = self.applied;
        let (loss_based, losses) = self.cc.as_ref().map_or((false, 0), |c| {
            (c.wanted() == cc_choice::Cc::LossBased, c.losses())
        });
        self.est.published(now_ns).map(|e| LinkEstimate {
            pacing_per_socket: applied,
            loss_based,
            losses,
            ..e
        })
    }
}

struct Shared {
    stop: AtomicBool,
    state: Mutex<Control>,
    /// The WAN path it samples (its frames to the domain name it in `lane`).
    path: u32,
    t0: Instant,
    /// A connection to each other rank of the domain, for this rank's windows.
    domain_peers: Mutex<Vec<Sender<Out>>>,
}

/// The thread that samples a rank's bulk WAN connections every
/// [`SAMPLE_EVERY`] and applies the pacing caps. Stops when dropped.
pub(crate) struct Sampler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// `None` when the rank has no WAN connection. `inflight_gain`: the
    /// [`inflight::InflightGovernor`]'s gain, `None` = no window clamps.
    /// `congestion`: the controls to choose between by the path's loss
    /// ([`cc_choice`]), `None` = keep the one the connections have.
    pub fn start(
        rank: usize,
        path: usize,
        sockets: Vec<TcpStream>,
        inflight_gain: Option<f64>,
        congestion: Option<CcNames>,
    ) -> Option<Sampler> {
        if sockets.is_empty() {
            return None;
        }
        let mut control = Control::new(sockets.len());
        if congestion.is_some() {
            control.choose_congestion();
        }
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            state: Mutex::new(control),
            path: path as u32,
            t0: Instant::now(),
            domain_peers: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("cw-wan-est-{rank}-{path}"))
            .spawn(move || run(&s, &sockets, inflight_gain, congestion))
            .ok()?;
        Some(Sampler {
            shared,
            thread: Some(thread),
        })
    }

    fn now_ns(&self) -> u64 {
        self.shared.t0.elapsed().as_nanos() as u64
    }

    /// This rank (`me`) shares its domain's WAN with the ranks behind
    /// `peers` (a connection to each): they exchange windows from start-up
    /// on. Call before [`Sampler::started`].
    pub fn set_domain(&self, me: usize, peers: Vec<Sender<Out>>) {
        if peers.is_empty() {
            return;
        }
        self.lock().set_domain(me);
        *self
            .shared
            .domain_peers
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = peers;
    }

    /// The estimate now.
    pub fn estimate(&self) -> Option<LinkEstimate> {
        let now = self.now_ns();
        self.lock().estimate(now)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Control> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Start-up is over: `sharers` ranks now send at once, the path's rate is
    /// `seed` (payload bytes/s, agreed by every rank), and, unless `pace` is
    /// `None`, the bulk connections of the `flows` ranks of the domain are paced — to a
    /// fixed configured rate (payload bytes/s) or, when that is `None`, to the
    /// live estimate.
    pub fn started(&self, sharers: usize, seed: Option<f64>, pace: Option<(usize, Option<f64>)>) {
        let now = self.now_ns();
        self.lock().started(now, sharers, seed, pace);
    }

    /// The seed given to [`Sampler::started`] is only a lower bound.
    pub fn seed_is_floor(&self) {
        self.lock().seed_is_floor();
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The congestion controls [`cc_choice`] chooses between, by name.
#[derive(Debug, Clone)]
pub(crate) struct CcNames {
    /// The configured, model-based one (`bbr`).
    pub model_based: String,
    /// Loss-based ones, the first the kernel takes.
    pub loss_based: Vec<String>,
}

fn run(
    shared: &Shared,
    sockets: &[TcpStream],
    inflight_gain: Option<f64>,
    congestion: Option<CcNames>,
) {
    let mut governor = inflight_gain.map(|g| inflight::InflightGovernor::new(sockets.len(), g));
    while !shared.stop.load(Ordering::Relaxed) {
        std::thread::sleep(SAMPLE_EVERY);
        let infos: Vec<Option<TcpInfo>> = sockets.iter().map(|s| tcp::tcp_info(s).ok()).collect();
        let now = shared.t0.elapsed().as_nanos() as u64;
        if let Some(g) = &mut governor {
            for (s, clamp) in sockets.iter().zip(g.observe(now, &infos)) {
                if let Some(c) = clamp {
                    if let Err(e) = tcp::set_window_clamp(s, c) {
                        tracing::debug!(%e, "window clamp not accepted");
                    }
                }
            }
        }
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let (cap, window, started, switches, announce) = {
            let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            // Whether this rank sends first: the cap below depends on it.
            let announce = state.sending(now, &infos);
            let (cap, window) = state.tick_at(now, wall, &infos);
            let switches = state.congestion(now, &infos);
            (cap, window, state.is_started(), switches, announce)
        };
        if let Some(sending) = announce {
            let payload = WanSending(sending).encode();
            to_domain(shared, FrameKind::WanSending, &payload);
        }
        if let Some(names) = &congestion {
            for (k, cc) in switches {
                switch_congestion(shared, &sockets[k], k, cc, names);
            }
        }
        // Start-up is over: pacing caps keep the queue short from now on. A
        // clamp sized by the minimum RTT would only cut a connection that
        // carries more than it did before while the RTT carries some queue
        // (a first version kept the clamps: 64 MiB on wan40 took 1.15× and
        // 1.22× the bound; released, 1.11× and 1.15×). Where the probe's
        // rate was only a floor and the caps wait for the domain's windows
        // (`seed_is_floor`, the lossy paths), clamps kept through the first
        // operations slowed them (lossy120, 16 MiB: 1.24–1.48× the bound,
        // first iterations up to 1.33× the median): BBR alone paces there.
        if started && governor.take().is_some() {
            for s in sockets {
                if let Err(e) = tcp::set_window_clamp(s, inflight::RELEASED) {
                    tracing::debug!(%e, "window clamp not released");
                }
            }
        }
        if let Some(w) = window {
            to_domain(shared, FrameKind::WanRate, &w.encode());
        }
        if let Some(cap) = cap {
            for s in sockets {
                if let Err(e) = tcp::set_max_pacing_rate(s, cap) {
                    tracing::debug!(%e, "pacing cap not accepted");
                }
            }
        }
    }
}

/// Sends a control frame to every other rank of the domain (a closed
/// connection is the readers' business, not the sampler's).
fn to_domain(shared: &Shared, kind: FrameKind, payload: &[u8]) {
    for p in shared
        .domain_peers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
    {
        let mut h = FrameHeader::control(kind, payload.len() as u32);
        h.lane = shared.path;
        let _ = p.send(Out::Frame(
            h,
            PooledBuf::unpooled(payload.to_vec()).into(),
            None,
        ));
    }
}

/// Applies one of [`cc_choice`]'s switches to connection `k`.
fn switch_congestion(shared: &Shared, s: &TcpStream, k: usize, cc: Cc, names: &CcNames) {
    let wanted: Vec<&str> = match cc {
        Cc::ModelBased => vec![names.model_based.as_str()],
        Cc::LossBased => names.loss_based.iter().map(String::as_str).collect(),
    };
    if tcp::prefer_congestion(socket2::SockRef::from(s), &wanted) {
        tracing::debug!(connection = k, ?cc, "congestion control switched");
        return;
    }
    tracing::warn!(
        connection = k,
        ?wanted,
        "the kernel refused these congestion controls; the WAN connections keep BBR \
         (`modprobe tcp_cubic`, or add one to net.ipv4.tcp_allowed_congestion_control)"
    );
    if cc == Cc::LossBased {
        shared
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .congestion_refused(k);
    }
}

#[cfg(test)]
mod tests;
