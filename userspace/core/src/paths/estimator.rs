//! One WAN path's estimator: RTT, loss, bandwidth and up/down state from
//! probe exchanges and delivery-rate samples, with time as an argument.
//!
//! - **RTT**: RFC 6298's smoothed RTT and variance (gains 1/8 and 1/4), and
//!   the minimum over [`EstimatorConfig::min_rtt_window_ns`].
//! - **Loss**: a probe with no reply after the loss timeout
//!   (`max(srtt + 4·rttvar, 2·srtt, min_loss_timeout)`) counts as lost; the
//!   rate is an exponentially weighted mean of probe outcomes (gain
//!   [`EstimatorConfig::loss_gain`]). A reply that comes after its probe
//!   was counted lost is ignored, so no probe is counted twice. An outage
//!   is not random loss: when the path is declared down the rate goes back
//!   to its value at the last reply, and probes lost while down do not count.
//! - **Bandwidth**: the maximum of the delivery-rate samples (the kernel's
//!   `tcpi_delivery_rate` of live traffic, or packet-train dispersion when
//!   idle) within [`EstimatorConfig::bw_window_ns`], as BBR's max filter;
//!   an app-limited sample (the sender had less to send than the path
//!   could carry) only counts when it raises the estimate. When every
//!   sample has aged out the last estimate stays, with its age.
//! - **State**: `Unknown` until the first reply; `Down` when probes go out
//!   but no reply has come for [`EstimatorConfig::down_after_ns`]; back
//!   `Up` only after [`EstimatorConfig::up_after_replies`] replies in a
//!   row, so a flapping path does not flip its traffic back and forth.

use std::collections::VecDeque;

/// Tuning of a [`PathEstimator`]; times in nanoseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct EstimatorConfig {
    /// No reply for this long while probing: the path is down (default 1 s).
    pub down_after_ns: u64,
    /// Replies in a row that bring a down path back up (default 3).
    pub up_after_replies: u32,
    /// Window of the bandwidth max filter (default 2 s).
    pub bw_window_ns: u64,
    /// Window of the minimum RTT (default 10 s).
    pub min_rtt_window_ns: u64,
    /// Weight of one probe's outcome in the loss rate (default 1/16).
    pub loss_gain: f64,
    /// Shortest wait before a probe counts as lost (default 200 ms).
    pub min_loss_timeout_ns: u64,
    /// Wait before a probe counts as lost while no RTT is known (default 1 s).
    pub initial_loss_timeout_ns: u64,
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        EstimatorConfig {
            down_after_ns: 1_000_000_000,
            up_after_replies: 3,
            bw_window_ns: 2_000_000_000,
            min_rtt_window_ns: 10_000_000_000,
            loss_gain: 1.0 / 16.0,
            min_loss_timeout_ns: 200_000_000,
            initial_loss_timeout_ns: 1_000_000_000,
        }
    }
}

/// Whether a path carries traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathState {
    /// No reply yet.
    Unknown,
    Up,
    /// Probes went unanswered for `down_after_ns`; `replies` in a row since.
    Down {
        replies: u32,
    },
}

/// What the estimator knows of its path at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct PathEstimate {
    pub state: PathState,
    /// Smoothed RTT and its mean deviation, ns (0 before the first reply).
    pub srtt_ns: f64,
    pub rttvar_ns: f64,
    /// Minimum RTT within the window, ns (0 before the first reply).
    pub min_rtt_ns: u64,
    /// Fraction of probes lost (weighted towards recent ones).
    pub loss: f64,
    /// Bandwidth estimate, bytes/s (0 before the first sample).
    pub bw_bytes_per_s: f64,
    /// How old the newest sample behind `bw_bytes_per_s` is, ns.
    pub bw_age_ns: u64,
}

impl PathEstimate {
    pub fn is_usable(&self) -> bool {
        self.state == PathState::Up && self.bw_bytes_per_s > 0.0
    }
}

/// The estimator of one path.
#[derive(Clone, Debug)]
pub struct PathEstimator {
    cfg: EstimatorConfig,
    state: PathState,
    /// Probes sent and not yet answered or counted lost: (seq, sent at).
    outstanding: VecDeque<(u64, u64)>,
    srtt_ns: f64,
    rttvar_ns: f64,
    /// (at, rtt): candidates for the windowed minimum, rtt increasing.
    min_rtt: VecDeque<(u64, u64)>,
    loss: f64,
    /// (at, bytes/s): candidates for the windowed maximum, rate decreasing.
    bw: VecDeque<(u64, f64)>,
    /// The estimate and its sample time when every sample has aged out.
    last_bw: (u64, f64),
    last_reply_ns: Option<u64>,
    last_sent_ns: Option<u64>,
    /// While down: when the first probe of the current run of replies was
    /// sent (a probe lost before it does not break the run).
    streak_from_ns: u64,
    /// The loss rate as of the last reply: what it goes back to when the
    /// path is declared down (an outage is not random loss).
    loss_at_reply: f64,
}

impl PathEstimator {
    pub fn new(cfg: EstimatorConfig) -> Self {
        PathEstimator {
            cfg,
            state: PathState::Unknown,
            outstanding: VecDeque::new(),
            srtt_ns: 0.0,
            rttvar_ns: 0.0,
            min_rtt: VecDeque::new(),
            loss: 0.0,
            bw: VecDeque::new(),
            last_bw: (0, 0.0),
            last_reply_ns: None,
            last_sent_ns: None,
            streak_from_ns: 0,
            loss_at_reply: 0.0,
        }
    }

    /// A probe `seq` left at `now`.
    pub fn probe_sent(&mut self, seq: u64, now: u64) {
        self.expire(now);
        self.outstanding.push_back((seq, now));
        self.last_sent_ns = Some(now);
    }

    /// The reply to probe `seq` came at `now`. Returns the RTT sample, or
    /// `None` for a reply to no outstanding probe (a duplicate, or one
    /// already counted lost).
    pub fn probe_reply(&mut self, seq: u64, now: u64) -> Option<u64> {
        let i = self.outstanding.iter().position(|&(s, _)| s == seq)?;
        let (_, sent) = self.outstanding.remove(i)?;
        let rtt = now.checked_sub(sent)?;
        self.rtt_sample(rtt, now);
        self.loss += self.cfg.loss_gain * (0.0 - self.loss);
        self.loss_at_reply = self.loss;
        self.last_reply_ns = Some(now);
        if self.state == (PathState::Down { replies: 0 }) {
            self.streak_from_ns = sent;
        }
        self.state = match self.state {
            PathState::Unknown | PathState::Up => PathState::Up,
            PathState::Down { replies } if replies + 1 >= self.cfg.up_after_replies => {
                PathState::Up
            }
            PathState::Down { replies } => PathState::Down {
                replies: replies + 1,
            },
        };
        Some(rtt)
    }

    /// A delivery-rate sample of `bytes_per_s` taken at `now`.
    pub fn delivery_sample(&mut self, bytes_per_s: f64, app_limited: bool, now: u64) {
        if !bytes_per_s.is_finite() || bytes_per_s <= 0.0 {
            return;
        }
        self.prune_bw(now);
        // "At least this much": it may raise the estimate, never lower it,
        // not even once the window's samples aged out and the estimate is the
        // last one they left.
        if app_limited && bytes_per_s <= self.current_bw().max(self.stale_bw()) {
            return;
        }
        while self.bw.back().is_some_and(|&(_, b)| b <= bytes_per_s) {
            self.bw.pop_back();
        }
        self.bw.push_back((now, bytes_per_s));
    }

    /// An RTT measured elsewhere (e.g. the kernel's smoothed RTT of a live
    /// connection, `tcpi_rtt`) at `now`: updates the smoothed RTT and the
    /// windowed minimum as a probe reply would, without touching loss or state.
    pub fn rtt_observed(&mut self, rtt_ns: u64, now: u64) {
        if rtt_ns > 0 {
            self.rtt_sample(rtt_ns, now);
        }
    }

    /// A packet train of `frames` frames of `frame_bytes` whose first and
    /// last arrivals were `dispersion_ns` apart: a bandwidth sample.
    pub fn train_sample(&mut self, frames: u32, frame_bytes: u32, dispersion_ns: u64, now: u64) {
        if frames < 2 || dispersion_ns == 0 {
            return;
        }
        let bytes = f64::from(frames - 1) * f64::from(frame_bytes);
        self.delivery_sample(bytes * 1e9 / dispersion_ns as f64, false, now);
    }

    /// Counts overdue probes as lost and updates the state; call it at
    /// least once per probe interval.
    pub fn tick(&mut self, now: u64) {
        self.expire(now);
        let probing = match (self.last_sent_ns, self.last_reply_ns) {
            (Some(sent), Some(reply)) => sent > reply,
            (Some(_), None) => true,
            _ => false,
        };
        let since = self.last_reply_ns.unwrap_or(0);
        if probing
            && self.state == PathState::Up
            && now.saturating_sub(since) >= self.cfg.down_after_ns
        {
            self.state = PathState::Down { replies: 0 };
            self.loss = self.loss_at_reply;
        }
    }

    /// The estimate at `now`.
    pub fn estimate(&mut self, now: u64) -> PathEstimate {
        self.tick(now);
        self.prune_bw(now);
        self.prune_min_rtt(now);
        let (bw, at) = match self.bw.front() {
            Some(&(at, b)) => (b, at),
            None => (self.last_bw.1, self.last_bw.0),
        };
        PathEstimate {
            state: self.state,
            srtt_ns: self.srtt_ns,
            rttvar_ns: self.rttvar_ns,
            min_rtt_ns: self.min_rtt.front().map_or(0, |&(_, r)| r),
            loss: self.loss,
            bw_bytes_per_s: bw,
            bw_age_ns: now.saturating_sub(at),
        }
    }

    fn rtt_sample(&mut self, rtt: u64, now: u64) {
        let r = rtt as f64;
        if self.srtt_ns == 0.0 {
            self.srtt_ns = r;
            self.rttvar_ns = r / 2.0;
        } else {
            self.rttvar_ns += 0.25 * ((self.srtt_ns - r).abs() - self.rttvar_ns);
            self.srtt_ns += 0.125 * (r - self.srtt_ns);
        }
        self.prune_min_rtt(now);
        while self.min_rtt.back().is_some_and(|&(_, m)| m >= rtt) {
            self.min_rtt.pop_back();
        }
        self.min_rtt.push_back((now, rtt));
    }

    fn loss_timeout(&self) -> u64 {
        if self.srtt_ns == 0.0 {
            return self.cfg.initial_loss_timeout_ns;
        }
        let t = (self.srtt_ns + 4.0 * self.rttvar_ns).max(2.0 * self.srtt_ns);
        (t as u64).max(self.cfg.min_loss_timeout_ns)
    }

    fn expire(&mut self, now: u64) {
        let timeout = self.loss_timeout();
        while let Some(&(_, sent)) = self.outstanding.front() {
            if now.saturating_sub(sent) < timeout {
                break;
            }
            self.outstanding.pop_front();
            if let PathState::Down { replies } = self.state {
                if replies > 0 && sent > self.streak_from_ns {
                    self.state = PathState::Down { replies: 0 };
                }
            } else {
                self.loss += self.cfg.loss_gain * (1.0 - self.loss);
            }
        }
    }

    fn current_bw(&self) -> f64 {
        self.bw.front().map_or(0.0, |&(_, b)| b)
    }

    /// What [`PathEstimator::estimate`] reports once every sample aged out.
    fn stale_bw(&self) -> f64 {
        if self.bw.is_empty() {
            self.last_bw.1
        } else {
            0.0
        }
    }

    fn prune_bw(&mut self, now: u64) {
        while let Some(&(at, b)) = self.bw.front() {
            if now.saturating_sub(at) <= self.cfg.bw_window_ns {
                break;
            }
            self.bw.pop_front();
            if self.bw.is_empty() {
                self.last_bw = (at, b);
            }
        }
    }

    fn prune_min_rtt(&mut self, now: u64) {
        while self
            .min_rtt
            .front()
            .is_some_and(|&(at, _)| now.saturating_sub(at) > self.cfg.min_rtt_window_ns)
        {
            self.min_rtt.pop_front();
        }
    }
}
