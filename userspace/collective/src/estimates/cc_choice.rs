//! Which congestion control a rank's bulk WAN connections run: the configured
//! model-based one (BBR) while the path loses packets, a loss-based one
//! (Reno by default) on a path that does not.
//!
//! Under the [`super::trim`] a connection keeps a short queue at the
//! bottleneck, so BBR v1 never sees an RTT below its minimum and enters
//! ProbeRTT (a window of 4 segments for ~250 ms) every 10 s, all of a rank's
//! connections at once: on wan40 one 64 MiB allreduce in two to four took
//! ~0.2 s longer (`--iters 8` medians 1.14–1.15× the bound). A loss-based
//! control has no ProbeRTT, and under the pacing caps it never fills the
//! queue itself (all iterations 1.07–1.10×, 0 drops), but it cuts its window
//! at each loss: on lossy80 (0.1 % random loss) CUBIC took 5–6× the bound.
//! CUBIC keeps a 40 ms, 200 Mbit/s path full only below a loss rate of
//! about 1e-5.
//!
//! Reno, not CUBIC, by default: the switch leaves BBR's infinite slow-start
//! threshold, and under the pacing caps the window never needs to grow far,
//! so Reno stays in slow start and grows its window at once whenever it
//! limits. CUBIC's HyStart leaves slow start at the first few ms of RTT
//! jitter and then grows its window by seconds-long cubic steps: on gig10
//! (10 ms, 1 Gbit/s, busy hosts) a run that kept CUBIC took 2.00× the bound
//! with the estimate at −34 %, where BBR took 1.6–1.7×. Reno's halving at
//! a loss does not matter here: a real loss takes the connections back to
//! BBR. Reno is also built in, so any process may set it.
//!
//! So the choice follows the **real** loss the connections see: their
//! retransmissions minus those the receiver reported as duplicates (D-SACK:
//! the testbed's veths reorder a little, and every such retransmission is
//! spurious). A D-SACK arrives about one RTT after its retransmission, so a
//! retransmission counts as a loss only once [`grace_us`] has passed
//! without one.
//!
//! - Start-up over and [`SETTLE_NS`] past, after [`JUDGE_SEGS`] segments
//!   sent with no real loss, the connections go loss-based; after a real
//!   loss, only after [`REJUDGE_SEGS`] clean ones. The settling time lets
//!   start-up's own losses pass: its probe runs before any pacing cap, the
//!   queue it left drains over the first round trips under the caps, and
//!   the retransmissions of its drops settle a grace later. On `dual` the
//!   drops of the probe's last rounds came 0–20 ms before start-up ended
//!   and settled as 9–25 "new" losses in the next 100 ms: the path stayed
//!   on BBR (and its ProbeRTT) for the whole run.
//! - Loss-based, they go back at once when the real loss rate since the
//!   switch exceeds [`LOSS_RATE_MAX`] (one loss within the first 100,000
//!   segments does).
//! - Back on the model-based control, they are judged again only after
//!   [`REJUDGE_SEGS`] segments without a real loss: a path with rare loss
//!   flips at most once per ~1.4 GB.
//!
//! A connection switches to the loss-based control only while its window is
//! above ProbeRTT's 4 segments (it would start from there), and goes back at
//! once. Pure: readings and time in, switches out; the sampler applies them.

use crate::transport::tcp::TcpInfo;

/// Segments sent after start-up with no real loss before the connections go
/// loss-based (~4.3 MB: on a path with 0.1 % loss, 3 losses expected).
pub const JUDGE_SEGS: u64 = 3_000;
/// How long after start-up ends its losses are not judged (its queue drains
/// and its retransmissions settle; ≥ 2 grace periods of a 200 ms path).
pub const SETTLE_NS: u64 = 1_000_000_000;
/// Segments without a real loss before a rank that went back to the
/// model-based control goes loss-based again.
pub const REJUDGE_SEGS: u64 = 1_000_000;
/// Real losses per segment sent above which a loss-based rank goes back.
pub const LOSS_RATE_MAX: f64 = 1e-5;
/// ProbeRTT's window (segments): no switch to a loss-based control there.
pub const PROBE_RTT_CWND: u32 = 4;

/// How long a retransmission waits for its D-SACK before it counts as a
/// loss: two smoothed RTTs and 20 ms (the receiver's delayed ACK, jitter).
pub fn grace_us(srtt_us: u32) -> u64 {
    2 * u64::from(srtt_us) + 20_000
}

/// The control a connection should run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cc {
    /// The configured one (BBR): robust to random loss.
    ModelBased,
    /// Reno (or CUBIC): no ProbeRTT, for a path that does not lose packets.
    LossBased,
}

/// One connection's retransmissions over time, to tell losses from
/// spurious retransmissions.
#[derive(Debug, Clone, Default)]
struct SockLoss {
    /// `(time µs, tcpi_total_retrans)` each time it changed, oldest first;
    /// at most one entry older than the grace is kept.
    retrans: std::collections::VecDeque<(u64, u32)>,
    /// Real losses (retransmissions past their grace with no D-SACK).
    lost: u64,
    /// `tcpi_data_segs_out` at the last reading.
    segs: u64,
    /// The control this connection was last switched to (`None`: the one
    /// it was created with, the model-based one).
    applied: Option<Cc>,
}

impl SockLoss {
    fn observe(&mut self, now_us: u64, i: &TcpInfo) -> Option<()> {
        let dsack = i.dsack_dups?;
        if self.retrans.back().map(|&(_, r)| r) != Some(i.total_retrans) {
            self.retrans.push_back((now_us, i.total_retrans));
        }
        let due = now_us.saturating_sub(grace_us(i.rtt_us));
        while self.retrans.len() > 1 && self.retrans[1].0 <= due {
            self.retrans.pop_front();
        }
        let settled = match self.retrans.front() {
            Some(&(t, r)) if t <= due => r,
            _ => 0,
        };
        self.lost = self.lost.max(u64::from(settled.saturating_sub(dsack)));
        self.segs = u64::from(i.data_segs_out);
        Some(())
    }
}

/// The choice for one rank's bulk connections (see the module docs).
#[derive(Debug, Clone)]
pub struct CcChoice {
    socks: Vec<SockLoss>,
    want: Cc,
    /// Real losses and segments of all connections when the current
    /// judgement began (start-up's end + [`SETTLE_NS`], the switch, the
    /// way back).
    since: Option<(u64, u64)>,
    /// When the first reading after start-up came (ns).
    started_at: Option<u64>,
    /// Segments to judge before going loss-based.
    judge: u64,
    /// A connection's kernel does not report D-SACKs: no choice is made.
    blind: bool,
    /// Switches to the loss-based control so far (for the estimate).
    pub switches: u32,
}

impl CcChoice {
    pub fn new(sockets: usize) -> Self {
        CcChoice {
            socks: vec![SockLoss::default(); sockets],
            want: Cc::ModelBased,
            since: None,
            started_at: None,
            judge: JUDGE_SEGS,
            blind: false,
            switches: 0,
        }
    }

    /// The control the rank's connections should run now.
    pub fn wanted(&self) -> Cc {
        self.want
    }

    /// Real losses so far over all connections.
    pub fn losses(&self) -> u64 {
        self.socks.iter().map(|s| s.lost).sum()
    }

    fn segs(&self) -> u64 {
        self.socks.iter().map(|s| s.segs).sum()
    }

    /// One reading at `now_ns`; `started`: start-up is over. Returns the
    /// connections to switch now and to what.
    pub fn observe(
        &mut self,
        now_ns: u64,
        started: bool,
        infos: &[Option<TcpInfo>],
    ) -> Vec<(usize, Cc)> {
        let now_us = now_ns / 1_000;
        for (s, i) in self.socks.iter_mut().zip(infos) {
            if let Some(i) = i {
                if s.observe(now_us, i).is_none() {
                    self.blind = true;
                }
            }
        }
        if self.blind {
            self.want = Cc::ModelBased;
        } else if started {
            let at = *self.started_at.get_or_insert(now_ns);
            if now_ns.saturating_sub(at) >= SETTLE_NS {
                self.judge_now();
            }
        }
        let want = self.want;
        let mut switch = Vec::new();
        for (k, (s, i)) in self.socks.iter_mut().zip(infos).enumerate() {
            let Some(i) = i else { continue };
            let now = s.applied.unwrap_or(Cc::ModelBased);
            let ready = want == Cc::ModelBased || i.snd_cwnd > PROBE_RTT_CWND;
            if now != want && ready {
                s.applied = Some(want);
                switch.push((k, want));
            }
        }
        switch
    }

    fn judge_now(&mut self) {
        let (lost, segs) = (self.losses(), self.segs());
        let (lost0, segs0) = *self.since.get_or_insert((lost, segs));
        let (new_lost, new_segs) = (lost - lost0.min(lost), segs.saturating_sub(segs0));
        match self.want {
            // A path that lost a packet is judged as one that went back:
            // on lossy80 a clean stretch of 3,000 segments comes by chance
            // every ~20,000, and each would have tried the loss-based
            // control until the next loss.
            Cc::ModelBased if new_lost > 0 => {
                self.judge = REJUDGE_SEGS;
                self.since = Some((lost, segs));
            }
            Cc::ModelBased if new_segs >= self.judge => {
                self.want = Cc::LossBased;
                self.switches += 1;
                self.since = Some((lost, segs));
            }
            Cc::LossBased if new_lost as f64 > LOSS_RATE_MAX * new_segs.max(1) as f64 => {
                self.want = Cc::ModelBased;
                self.judge = REJUDGE_SEGS;
                self.since = Some((lost, segs));
            }
            _ => {}
        }
    }

    /// A connection could not be switched to the loss-based control (none
    /// is available): it stays on the model-based one, and the rank's
    /// others go back to it at the next reading.
    pub fn refused(&mut self, sock: usize) {
        if let Some(s) = self.socks.get_mut(sock) {
            s.applied = Some(Cc::ModelBased);
        }
        self.blind = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A connection's reading: `segs` sent, `retrans` retransmitted, `dsack`
    /// of them reported as duplicates, window `cwnd`, 40 ms RTT.
    fn info(segs: u32, retrans: u32, dsack: u32, cwnd: u32) -> Option<TcpInfo> {
        Some(TcpInfo {
            rtt_us: 40_000,
            data_segs_out: segs,
            total_retrans: retrans,
            dsack_dups: Some(dsack),
            snd_cwnd: cwnd,
            ..TcpInfo::default()
        })
    }

    /// A choice whose start-up ended at time 0: judged from [`SETTLE_NS`] on,
    /// where the tests' readings begin.
    fn choice(sockets: usize) -> CcChoice {
        let mut c = CcChoice::new(sockets);
        let infos = vec![info(0, 0, 0, 500); sockets];
        assert!(c.observe(0, true, &infos).is_empty());
        c
    }

    /// Readings every 10 ms (from [`SETTLE_NS`]) of two connections sending
    /// `per_tick` segments each; `loss(tick)` gives (retransmitted,
    /// D-SACKed) totals per connection. Returns each tick's switches.
    fn run(
        c: &mut CcChoice,
        from: u64,
        ticks: u64,
        per_tick: u32,
        loss: impl Fn(u64) -> (u32, u32),
    ) -> Vec<(u64, Vec<(usize, Cc)>)> {
        let mut out = Vec::new();
        for t in from..from + ticks {
            let (r, d) = loss(t);
            let segs = (t as u32 + 1) * per_tick;
            let infos = [info(segs, r, d, 500), info(segs, r, d, 500)];
            let s = c.observe(SETTLE_NS + t * 10 * MS, true, &infos);
            if !s.is_empty() {
                out.push((t, s));
            }
        }
        out
    }

    #[test]
    fn a_lossless_path_goes_loss_based_after_the_judged_segments() {
        let mut c = choice(2);
        // 2 × 30 segments per 10 ms: 3,000 after 50 readings.
        let s = run(&mut c, 0, 100, 30, |_| (0, 0));
        assert_eq!(s.len(), 1, "{s:?}");
        assert!((49..=51).contains(&s[0].0), "{s:?}");
        assert_eq!(s[0].1, vec![(0, Cc::LossBased), (1, Cc::LossBased)]);
        assert_eq!(c.wanted(), Cc::LossBased);
    }

    #[test]
    fn nothing_is_chosen_during_start_up() {
        let mut c = CcChoice::new(1);
        for t in 0..500u64 {
            let infos = [info(t as u32 * 100, 0, 0, 500)];
            assert!(c.observe(t * 10 * MS, false, &infos).is_empty());
        }
        assert_eq!(c.wanted(), Cc::ModelBased);
    }

    #[test]
    fn spurious_retransmissions_d_sacked_within_the_grace_are_not_losses() {
        let mut c = choice(2);
        // A retransmission every 100 ms, its D-SACK 50 ms (one RTT + 10 ms) later.
        let s = run(&mut c, 0, 1_000, 30, |t| {
            ((t / 10) as u32, (t.saturating_sub(5) / 10) as u32)
        });
        assert_eq!(c.losses(), 0);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(c.wanted(), Cc::LossBased);
    }

    #[test]
    fn random_loss_keeps_the_model_based_control() {
        let mut c = choice(2);
        // 0.1 % loss: a retransmission every 1,000 segments, never D-SACKed.
        let s = run(&mut c, 0, 2_000, 30, |t| ((t * 30 / 1_000) as u32, 0));
        assert!(s.is_empty(), "{s:?}");
        assert!(c.losses() > 0);
        assert_eq!(c.wanted(), Cc::ModelBased);
    }

    #[test]
    fn a_lossy_path_is_not_tried_in_its_clean_stretches() {
        let mut c = choice(2);
        // A loss at tick 10, then 3,900 clean segments per connection
        // (7,800 in all): more than JUDGE_SEGS, less than REJUDGE_SEGS.
        let s = run(&mut c, 0, 400, 10, |t| (u32::from(t >= 10), 0));
        assert!(s.is_empty(), "{s:?}");
        assert_eq!(c.wanted(), Cc::ModelBased);
    }

    #[test]
    fn a_loss_soon_after_the_switch_goes_back_at_once_and_stays_a_while() {
        let mut c = choice(2);
        run(&mut c, 0, 100, 30, |_| (0, 0));
        assert_eq!(c.wanted(), Cc::LossBased);
        // One retransmission at tick 200, never D-SACKed: a loss after its
        // grace (100 ms), then back to the model-based control.
        let s = run(&mut c, 100, 300, 30, |t| (u32::from(t >= 200), 0));
        assert_eq!(s.len(), 1, "{s:?}");
        assert!((210..=212).contains(&s[0].0), "{s:?}");
        assert_eq!(s[0].1, vec![(0, Cc::ModelBased), (1, Cc::ModelBased)]);
        // Lossless again: judged only after REJUDGE_SEGS (2 × 30 per tick).
        let s = run(&mut c, 400, 20_000, 30, |_| (1, 0));
        assert_eq!(s.len(), 1, "{s:?}");
        let ticks = REJUDGE_SEGS / 60;
        assert!(s[0].0.abs_diff(211 + ticks) <= 2, "{s:?}");
    }

    #[test]
    fn a_rare_loss_after_many_clean_segments_keeps_the_loss_based_control() {
        let mut c = choice(2);
        run(&mut c, 0, 100, 30, |_| (0, 0));
        // 2,000,000 segments later one loss: rate 5e-7.
        let s = run(&mut c, 100, 40_000, 30, |t| (u32::from(t >= 35_000), 0));
        assert!(s.is_empty(), "{s:?}");
        assert_eq!(c.losses(), 2);
        assert_eq!(c.wanted(), Cc::LossBased);
    }

    #[test]
    fn no_switch_to_loss_based_while_the_window_is_probe_rtts() {
        let mut c = choice(2);
        let mut switched = Vec::new();
        for t in 0..200u64 {
            let segs = (t as u32 + 1) * 30;
            // Connection 1 sits at a window of 4 until tick 120.
            let cwnd1 = if t < 120 { PROBE_RTT_CWND } else { 500 };
            let infos = [info(segs, 0, 0, 500), info(segs, 0, 0, cwnd1)];
            for (k, cc) in c.observe(SETTLE_NS + t * 10 * MS, true, &infos) {
                switched.push((t, k, cc));
            }
        }
        assert_eq!(switched.len(), 2, "{switched:?}");
        assert_eq!((switched[0].1, switched[0].2), (0, Cc::LossBased));
        assert_eq!((switched[1].0, switched[1].1), (120, 1));
    }

    #[test]
    fn a_kernel_without_d_sack_counts_keeps_the_model_based_control() {
        let mut c = choice(1);
        for t in 0..1_000u64 {
            let mut i = info(t as u32 * 100, 0, 0, 500);
            if let Some(i) = &mut i {
                i.dsack_dups = None;
            }
            assert!(c.observe(SETTLE_NS + t * 10 * MS, true, &[i]).is_empty());
        }
    }

    #[test]
    fn a_refused_switch_takes_the_rank_back_to_the_model_based_control() {
        let mut c = choice(2);
        let s = run(&mut c, 0, 100, 30, |_| (0, 0));
        assert_eq!(s.len(), 1);
        c.refused(0);
        let s = run(&mut c, 100, 1_000, 30, |_| (0, 0));
        assert_eq!(s, vec![(100, vec![(1, Cc::ModelBased)])]);
        assert_eq!(c.wanted(), Cc::ModelBased);
    }

    /// Start-up's drops settle as losses just after it ended (the probe's
    /// unpaced last rounds): they do not count, later ones do.
    #[test]
    fn losses_settling_just_after_start_up_do_not_count() {
        let mut c = CcChoice::new(2);
        let mut switched = Vec::new();
        for t in 0..400u64 {
            let segs = (t as u32 + 1) * 30;
            // 20 retransmissions in the first 50 ms, never D-SACKed.
            let r = (t as u32 * 4).min(20);
            let infos = [info(segs, r, 0, 500), info(segs, 0, 0, 500)];
            for (k, cc) in c.observe(t * 10 * MS, true, &infos) {
                switched.push((t, k, cc));
            }
        }
        assert_eq!(c.losses(), 20);
        assert_eq!(switched.len(), 2, "{switched:?}");
        let judged_from = SETTLE_NS / (10 * MS);
        assert!(
            switched[0].0.abs_diff(judged_from + 50) <= 1,
            "{switched:?}"
        );
        assert_eq!(c.wanted(), Cc::LossBased);
        // The same loss a second after start-up keeps the model-based control.
        let mut c = CcChoice::new(2);
        for t in 0..400u64 {
            let segs = (t as u32 + 1) * 30;
            let r = if t >= judged_from + 5 { 20 } else { 0 };
            let infos = [info(segs, r, 0, 500), info(segs, 0, 0, 500)];
            assert!(c.observe(t * 10 * MS, true, &infos).is_empty(), "tick {t}");
        }
        assert_eq!(c.wanted(), Cc::ModelBased);
    }
}
