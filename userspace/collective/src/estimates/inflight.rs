//! The in-flight governor: no more bytes in flight on a bulk WAN connection
//! than [`INFLIGHT_GAIN`] times its path's bandwidth-delay product, as the
//! receiver sees it.
//!
//! Pacing ([`super::Pacer`]) starts only once start-up is over. Before it,
//! the start-up probe's rounds run the congestion control's own start-up,
//! and BBR's start-up keeps up to 2.89 BDPs in flight: on a lossless path
//! whose bottleneck holds one BDP, the queue overflowed (1.6–2.0 k drops
//! per start-up on wan40, docs/BENCHMARKS.md). The receiver bounds the
//! sender by its window:
//! - each reading, the segments that **arrived** on a connection
//!   (`tcpi_data_segs_in` × `tcpi_rcv_mss`, in order or not) over a short
//!   span (a quarter of the minimum RTT, at least 20 ms, at most one RTT)
//!   give an arrival rate, of all the rank's bulk connections together.
//!   Segments leave the bottleneck at most at its rate, so the best rate
//!   seen is the path's (as this rank got it) as soon as one window's burst
//!   fills a span: slow start is not held back. Counting arrivals, not the
//!   in-order point (`tcpi_bytes_received`), keeps a loss recovery's jump
//!   from reading as a burst.
//! - the connections share one budget: the gain × that best rate × the
//!   minimum RTT (`tcpi_min_rtt`). Each connection's receive window is
//!   clamped (`TCP_WINDOW_CLAMP`) to what it had in flight (what arrived on
//!   it over the last RTT) plus an equal part of the budget's headroom (the
//!   budget less what all had in flight): the clamps never add up to more
//!   than the budget (and the floors), and a connection alone grows
//!   towards all of it. Once the path is full they keep at most the gain
//!   times one BDP in flight, so the queue holds at most (gain − 1) BDP.
//!   Per-connection budgets would not do: each connection carries the
//!   whole path's rate at some time (one chunk travels on one connection),
//!   and then all at once would keep their sum in flight (1.3 k drops in a
//!   wan40 start-up).
//! - the best rate is kept for the connections' life, so an idle connection
//!   resumes with its full window. The sampler releases the clamps
//!   ([`RELEASED`]) when start-up is over: pacing caps keep the queue short
//!   from then on, and a window sized by the minimum RTT would only cut a
//!   connection that carries more than it has before while the RTT carries
//!   some queue.
//!
//! Pure: time and readings come in, clamps go out; the sampler thread
//! applies them ([`super::Sampler`]).

use std::collections::VecDeque;

use crate::transport::tcp::TcpInfo;

/// In flight allowed, as a multiple of what the connections together
/// delivered in their best minimum RTT. Below 2: a one-BDP bottleneck queue
/// then holds the excess, with room for the segments' header overhead.
pub const INFLIGHT_GAIN: f64 = 1.5;
/// The smallest clamp: a fresh connection's start (ten segments, doubling)
/// is never slowed below it.
pub const WINDOW_FLOOR: u32 = 64 << 10;
/// The largest clamp the governor sets (`int` in the kernel).
const WINDOW_CEIL: u32 = i32::MAX as u32;
/// The clamp that releases a connection: the kernel's own default (the
/// largest window a scaled TCP window can express).
pub const RELEASED: u32 = 65_535 << 14;

/// Shortest span a rate is measured over (two sampler readings).
const SPAN_MIN_NS: u64 = 20_000_000;

/// One connection's arrivals and the clamp it was given.
#[derive(Debug, Clone, Default)]
struct Track {
    /// `tcpi_data_segs_in` at the last reading.
    segs: Option<u32>,
    /// Payload bytes arrived so far (segments × `tcpi_rcv_mss`).
    arrived: u64,
    /// The clamp set last, and `arrived` when it was set.
    applied: Option<(u32, u64)>,
}

/// The governor of a rank's bulk WAN connections (see the module docs).
#[derive(Debug, Clone)]
pub struct InflightGovernor {
    gain: f64,
    tracks: Vec<Track>,
    /// (time ns, each connection's `arrived`), oldest first, spanning one
    /// minimum RTT.
    readings: VecDeque<(u64, Vec<u64>)>,
    /// Best arrival rate of all the connections together, bytes/s.
    best: f64,
}

impl InflightGovernor {
    /// `gain` as [`INFLIGHT_GAIN`]; values below 1 are raised to 1.
    pub fn new(sockets: usize, gain: f64) -> Self {
        InflightGovernor {
            gain: gain.max(1.0),
            tracks: vec![Track::default(); sockets],
            readings: VecDeque::new(),
            best: 0.0,
        }
    }

    /// The best arrival rate (payload bytes/s) of all the connections together.
    pub fn best_rate(&self) -> f64 {
        self.best
    }

    /// One reading of every connection at `now_ns`; returns, per
    /// connection, the window clamp to set now (`None`: leave it). A clamp
    /// is set again whenever data arrived since the last one: the kernel's
    /// receive-buffer autotuning raises the clamp itself when it grows the
    /// buffer.
    pub fn observe(&mut self, now_ns: u64, infos: &[Option<TcpInfo>]) -> Vec<Option<u32>> {
        for (t, info) in self.tracks.iter_mut().zip(infos) {
            if let Some(i) = info {
                if let Some(before) = t.segs {
                    let new = i.data_segs_in.wrapping_sub(before);
                    t.arrived += u64::from(new) * u64::from(i.rcv_mss);
                }
                t.segs = Some(i.data_segs_in);
            }
        }
        let rtt_us = infos
            .iter()
            .flatten()
            .map(|i| {
                if i.min_rtt_us > 0 {
                    i.min_rtt_us
                } else {
                    i.rcv_rtt_us
                }
            })
            .filter(|&r| r > 0)
            .min();
        let Some(rtt_us) = rtt_us else {
            // No RTT yet: nothing to size a window by.
            return vec![None; self.tracks.len()];
        };
        let rtt_ns = u64::from(rtt_us) * 1_000;
        let span_ns = (rtt_ns / 4).max(SPAN_MIN_NS).min(rtt_ns);
        let now: Vec<u64> = self.tracks.iter().map(|t| t.arrived).collect();
        let total = |v: &[u64]| v.iter().sum::<u64>();
        self.readings.push_back((now_ns, now.clone()));
        // Keep one reading at least one min RTT old, and none older.
        while self
            .readings
            .get(1)
            .is_some_and(|(t, _)| now_ns.saturating_sub(*t) >= rtt_ns)
        {
            self.readings.pop_front();
        }
        // The arrival rate over the newest reading at least a span old.
        if let Some((t0, then)) = self
            .readings
            .iter()
            .rev()
            .find(|(t, _)| now_ns.saturating_sub(*t) >= span_ns)
        {
            let rate =
                (total(&now) - total(then)) as f64 / (now_ns.saturating_sub(*t0) as f64 * 1e-9);
            self.best = self.best.max(rate);
        }
        // What each connection had in flight: what arrived over the last RTT.
        let recent: Vec<u64> = match self.readings.front() {
            Some((_, then)) => now.iter().zip(then).map(|(n, t)| n - t).collect(),
            None => vec![0; now.len()],
        };
        let budget = self.gain * self.best * rtt_ns as f64 * 1e-9;
        // An equal part of the headroom for each: shares in proportion to
        // what each had in flight ramped faster and overflowed (0–132
        // drops per wan40 start-up, against 0).
        let headroom = (budget - total(&recent) as f64).max(0.0) / self.tracks.len().max(1) as f64;
        self.tracks
            .iter_mut()
            .zip(&recent)
            .zip(infos)
            .map(|((t, &mine), info)| {
                info.as_ref()?;
                let window = (mine as f64 + headroom).min(f64::from(WINDOW_CEIL)) as u32;
                let clamp = window.max(WINDOW_FLOOR);
                match t.applied {
                    Some((c, a)) if c == clamp && a == t.arrived => None,
                    _ => {
                        t.applied = Some((clamp, t.arrived));
                        Some(clamp)
                    }
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A reading after `bytes` arrived (in segments of 1,000 bytes).
    fn info(bytes: u64, min_rtt_ms: u32) -> Option<TcpInfo> {
        Some(TcpInfo {
            data_segs_in: (bytes / 1_000) as u32,
            rcv_mss: 1_000,
            min_rtt_us: min_rtt_ms * 1_000,
            ..TcpInfo::default()
        })
    }

    /// A fluid model of one connection through a bottleneck of `rate`
    /// bytes/s and base RTT `rtt_ms`: the sender keeps `want(t, delivered
    /// in the last RTT)` bytes in flight, bounded by the receive window the
    /// governor (of `gain`) sets. Returns the largest queue seen, in BDPs,
    /// and the bytes delivered, stepping every `SAMPLE` ns as the sampler
    /// does.
    fn run(
        gain: f64,
        rate: f64,
        rtt_ms: u64,
        want: impl Fn(u64, f64) -> f64,
        secs: f64,
    ) -> (f64, f64) {
        const SAMPLE: u64 = 10 * MS;
        let rtt = rtt_ms * MS;
        let bdp = rate * rtt as f64 * 1e-9;
        let mut g = InflightGovernor::new(1, gain);
        let mut window = 65_536.0f64;
        let (mut received, mut max_queue, mut t) = (0.0f64, 0.0f64, 0u64);
        let mut delivered_rtt_ago = 0.0f64;
        while (t as f64) < secs * 1e9 {
            // The sender keeps min(its want, the window) in flight; what is
            // beyond one BDP waits in the bottleneck's queue.
            let inflight = want(t, delivered_rtt_ago).min(window);
            max_queue = max_queue.max(inflight - bdp);
            let step_rate = (inflight / (rtt as f64 * 1e-9)).min(rate);
            received += step_rate * SAMPLE as f64 * 1e-9;
            delivered_rtt_ago = step_rate * rtt as f64 * 1e-9;
            t += SAMPLE;
            if let Some(Some(c)) = g
                .observe(t, &[info(received as u64, rtt_ms as u32)])
                .first()
            {
                window = f64::from(*c);
            }
        }
        (max_queue / bdp, received)
    }

    #[test]
    fn bbr_like_start_up_keeps_the_queue_below_one_bdp() {
        // 200 Mbit/s, 40 ms; the sender wants 2.89 × what it delivered in
        // the last RTT, doubling at least (BBR's start-up, cwnd gain 2.89).
        for (mbit, rtt_ms) in [(200.0, 40), (100.0, 80), (50.0, 120), (1000.0, 10)] {
            let rate = mbit * 1e6 / 8.0;
            let want = |_t: u64, last: f64| (2.89 * last).max(14_480.0);
            let (queue_bdps, received) = run(INFLIGHT_GAIN, rate, rtt_ms, want, 3.0);
            assert!(
                queue_bdps <= INFLIGHT_GAIN - 1.0 + 0.01,
                "{mbit} Mbit/s {rtt_ms} ms: queue peaked at {queue_bdps:.2} BDP"
            );
            // It still fills the path: 3 s hold at least 2 s at the full rate.
            assert!(
                received >= 2.0 * rate,
                "{mbit} Mbit/s {rtt_ms} ms: {:.1} MB in 3 s",
                received / 1e6
            );
            // The model does overflow a one-BDP queue when the clamp allows it.
            let (loose, _) = run(3.0, rate, rtt_ms, want, 3.0);
            assert!(loose > 1.5, "{mbit} Mbit/s {rtt_ms} ms: {loose:.2} BDP");
        }
    }

    #[test]
    fn the_window_is_the_gain_times_the_best_rate_times_the_rtt_and_is_kept() {
        let mut g = InflightGovernor::new(1, 1.5);
        let rtt = 40;
        // Nothing before an RTT is known.
        assert_eq!(g.observe(0, &[info(0, 0)]), vec![None]);
        // Below the floor: the floor.
        assert_eq!(
            g.observe(20 * MS, &[info(0, rtt)]),
            vec![Some(WINDOW_FLOOR)]
        );
        // Nothing arrived and nothing changed: nothing to set again.
        assert_eq!(g.observe(30 * MS, &[info(0, rtt)]), vec![None]);
        // 500 kB in the last 20 ms (a quarter RTT is 10 ms, the span at
        // least 20): 25 MB/s; the window is 1.5 × 25 MB/s × 40 ms.
        let c = g.observe(50 * MS, &[info(500_000, rtt)])[0];
        assert_eq!(c, Some(1_500_000));
        // Slower arrivals do not lower it; the clamp is set again because
        // data arrived (the kernel's autotuning may have raised it).
        let c = g.observe(70 * MS, &[info(600_000, rtt)])[0];
        assert_eq!(c, Some(1_500_000));
        // The connection idles: the window stays.
        assert_eq!(g.observe(400 * MS, &[info(600_000, rtt)])[0], None);
        assert!((g.best_rate() - 25e6).abs() < 1.0);
    }

    #[test]
    fn a_burst_shorter_than_the_rtt_opens_the_window_at_once() {
        // 120 ms RTT: the span is 30 ms. Slow start's third window (40 kB)
        // arrives within one span: it reads as 40 kB / 30 ms, not / 120 ms.
        let mut g = InflightGovernor::new(1, INFLIGHT_GAIN);
        g.observe(0, &[info(0, 120)]);
        g.observe(30 * MS, &[info(0, 120)]);
        let c = g.observe(60 * MS, &[info(40_000, 120)])[0];
        let want = (INFLIGHT_GAIN * 40_000.0 / 0.030 * 0.120) as u32;
        assert_eq!(c, Some(want.max(WINDOW_FLOOR)));
        assert!(want > 4 * 40_000, "the window opens to more than 4 bursts");
    }

    #[test]
    fn the_segment_counter_wraps_and_a_gain_below_one_is_one() {
        let mut g = InflightGovernor::new(2, 0.5);
        let at = |segs: u32| {
            Some(TcpInfo {
                data_segs_in: segs,
                rcv_mss: 1_000,
                min_rtt_us: 10_000,
                ..TcpInfo::default()
            })
        };
        g.observe(0, &[at(u32::MAX - 9), None]);
        // 2,000 segments later, across the wrap: 2 MB in 10 ms (the span
        // is the RTT, 10 ms) = 200 MB/s; × 10 ms × gain 1 = 2 MB.
        let c = g.observe(10 * MS, &[at(1_990), None]);
        assert_eq!(c, vec![Some(2_000_000), None]);
    }

    /// Two connections that each once carried the path's whole rate alone
    /// share one budget when both send: their clamps add up to at most the
    /// budget, and one alone grows to nearly all of it.
    #[test]
    fn connections_share_one_budget() {
        let rtt = 40;
        let two = |a: u64, b: u64| [info(a, rtt), info(b, rtt)];
        // The clamps in force: the last one set on each connection.
        let mut now = [0u64; 2];
        let mut set = |c: Vec<Option<u32>>| {
            for (n, w) in now.iter_mut().zip(c) {
                if let Some(w) = w {
                    *n = u64::from(w);
                }
            }
            now
        };
        let mut g = InflightGovernor::new(2, 1.5);
        set(g.observe(0, &two(0, 0)));
        // Connection 0 alone at 25 MB/s (what the path carries: 1 MB per
        // RTT arrives however much is in flight): the budget is 1.5 × 25
        // MB/s × 40 ms = 1.5 MB; 0 has its 1 MB in flight plus half the
        // 0.5 MB headroom, the idle one the other half.
        let mut a = 0u64;
        let mut w = [0; 2];
        for k in 1..=12u64 {
            a += 250_000;
            w = set(g.observe(k * 10 * MS, &two(a, 0)));
            assert!(
                w[0] + w[1] <= 1_500_000 + u64::from(WINDOW_FLOOR),
                "{k}: {w:?}"
            );
        }
        assert_eq!(w, [1_250_000, 250_000]);
        // Then connection 1 alone, as fast, then both at half the rate
        // each: the clamps never add up to more than the budget (and the
        // floor of one that idles).
        let mut b = 0u64;
        for k in 13..=24u64 {
            b += 250_000;
            let w = set(g.observe(k * 10 * MS, &two(a, b)));
            assert!(
                w[0] + w[1] <= 1_500_000 + u64::from(WINDOW_FLOOR),
                "{k}: {w:?}"
            );
        }
        for k in 25..=40u64 {
            a += 125_000;
            b += 125_000;
            let w = set(g.observe(k * 10 * MS, &two(a, b)));
            assert!(w[0] + w[1] <= 1_500_000, "{k}: {w:?}");
        }
        assert!((g.best_rate() - 25e6).abs() < 1.0);
    }
}
