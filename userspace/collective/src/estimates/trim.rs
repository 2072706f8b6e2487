//! The queue trim: how far above or below the estimate a domain's ranks pace,
//! from the queue the bottleneck shows.
//!
//! Paced at a fixed fraction of an estimate, the path is underused by the
//! estimate's error: the domain's windows measure the path to within 1–3 %,
//! low as often as high, so pacing at [`PACING_TARGET`] of it sent 93–95 % of
//! what wan40 carries and 64 MiB took 1.13–1.14× the bound (docs/BENCHMARKS.md,
//! "Where wan40's 64 MiB time goes"); paced at the estimate itself, a high
//! reading keeps a queue growing until it overflows. The trim closes the loop
//! on the queue instead. The queueing delay is the busy connections' smoothed
//! RTT above the path's minimum; its error is `(target − delay) / target`,
//! clamped to ±1, with the [`target_us`] an eighth of the minimum RTT. The
//! level is [`TRIM_CENTER`] + [`TRIM_GAIN`] × error: [`TRIM_CEIL`] with no
//! queue, [`PACING_TARGET`] (the pacing before the trim) at twice the
//! target and up to four times it (half a one-BDP queue). Beyond that it
//! falls by [`TRIM_GAIN`] per target, to [`TRIM_FLOOR`] at six times it, so
//! that the queue an estimate a few per cent high builds drains before it
//! overflows (a fluid model: an estimate 6 % high overflowed a one-BDP queue
//! with the floor at [`PACING_TARGET`]). Only there: with that slope from
//! twice the target on, host jitter in the RTT readings pulled the level
//! under the path now and then (wan40, 64 MiB: 1.09–1.14× the bound against
//! 1.09–1.10×). It settles where a short queue
//! stands at the bottleneck: the path never idles, and the queue stays a
//! small part of a BDP. A loss-based flow that keeps the queue full holds
//! the level at its floor: Causeway yields to it rather than add to it.
//!
//! Proportional only, so that the ranks of a domain, which see the same
//! queue, pace at the same level: with an integral each rank's drifted on
//! its own (only their sum is held by the queue), one rank sent faster,
//! finished its half first, and the other then ran alone at its share of
//! the path (wan40: the last WAN chunks of a domain's two ranks 90 ms apart,
//! 6 ms without the integral).
//!
//! The delay is the smallest over the busy connections: host jitter inflates
//! one connection's RTT now and then; a queue at the bottleneck shows on all.
//! Pure: readings in, level out.
//!
//! Known cost: under BBR v1 a connection that keeps this short queue never
//! sees an RTT below its minimum, so it enters ProbeRTT (a window of 4
//! segments for ~250 ms) every 10 s, and a rank's connections, started
//! together, do so together: one wan40 64 MiB iteration in two to four took
//! ~0.2 s longer. CUBIC has no ProbeRTT (all iterations 1.07–1.10×) but
//! cuts its window at each random loss (lossy80: 5–6× the bound);
//! [`super::cc_choice`] chooses between them by the path's loss.

use super::PACING_TARGET;
use crate::transport::tcp::TcpInfo;

/// The level at an error of 0 (the queue at its target).
pub const TRIM_CENTER: f64 = 1.02;
/// The level's change from [`TRIM_CENTER`] at an error of ±1 (no queue;
/// twice the target).
pub const TRIM_GAIN: f64 = 0.06;
/// The highest level, × the estimate.
pub const TRIM_CEIL: f64 = 1.08;
/// The lowest level (a queue of six times the target).
pub const TRIM_FLOOR: f64 = 0.84;
/// The smallest queueing delay aimed at, µs (sampling and host jitter).
pub const TARGET_MIN_US: u32 = 2_000;

/// The queueing delay aimed at for a path whose minimum RTT is
/// `min_rtt_us`: an eighth of it, at least [`TARGET_MIN_US`]. A drop-tail
/// queue of one BDP holds eight times that.
pub fn target_us(min_rtt_us: u32) -> u32 {
    (min_rtt_us / 8).max(TARGET_MIN_US)
}

/// The level the domain's ranks pace at, × the estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueTrim {
    level: f64,
}

impl Default for QueueTrim {
    fn default() -> Self {
        QueueTrim {
            level: PACING_TARGET,
        }
    }
}

impl QueueTrim {
    pub fn level(&self) -> f64 {
        self.level
    }

    /// Whether the level is at its ceiling: the estimate is too low for
    /// the trim to fill the path.
    pub fn at_ceiling(&self) -> bool {
        self.level >= TRIM_CEIL
    }

    /// One reading of the sockets; `min_rtt_us` is the path's minimum RTT
    /// (all connections). Returns the level; it stays as it was while no
    /// connection is busy or no RTT is known.
    pub fn observe(&mut self, infos: &[Option<TcpInfo>], min_rtt_us: u32) -> f64 {
        if min_rtt_us == 0 {
            return self.level;
        }
        let delay = infos
            .iter()
            .flatten()
            .filter(|i| i.busy && i.rtt_us > 0)
            .map(|i| i.rtt_us.saturating_sub(min_rtt_us))
            .min();
        let Some(delay) = delay else {
            return self.level;
        };
        let target = f64::from(target_us(min_rtt_us));
        let error = (target - f64::from(delay)) / target;
        self.level = if error < -3.0 {
            // Beyond four times the target: drain before it overflows.
            (PACING_TARGET + TRIM_GAIN * (error + 3.0)).max(TRIM_FLOOR)
        } else {
            (TRIM_CENTER + TRIM_GAIN * error.clamp(-1.0, 1.0)).min(TRIM_CEIL)
        };
        self.level
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(rtt_ms: f64) -> Option<TcpInfo> {
        Some(TcpInfo {
            rtt_us: (rtt_ms * 1000.0) as u32,
            busy: true,
            ..TcpInfo::default()
        })
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn the_level_follows_the_queue_between_floor_and_ceiling() {
        assert!(close(PACING_TARGET - 2.0 * TRIM_GAIN, TRIM_FLOOR));
        assert!(close(TRIM_CENTER - TRIM_GAIN, PACING_TARGET));
        assert!(close(TRIM_CENTER + TRIM_GAIN, TRIM_CEIL));
        let mut t = QueueTrim::default();
        assert_eq!(t.level(), PACING_TARGET);
        // No queue: the ceiling.
        assert_eq!(t.observe(&[busy(40.0), busy(40.2)], 40_000), TRIM_CEIL);
        assert!(t.at_ceiling());
        // 5 ms is the target at 40 ms: the centre.
        assert!(close(t.observe(&[busy(45.0)], 40_000), TRIM_CENTER));
        // Half the target: half way up.
        let half = t.observe(&[busy(42.5)], 40_000);
        assert!(close(half, TRIM_CENTER + TRIM_GAIN / 2.0), "{half}");
        // Two to four times the target: the pacing before the trim.
        assert!(close(t.observe(&[busy(50.0)], 40_000), PACING_TARGET));
        assert!(close(t.observe(&[busy(60.0)], 40_000), PACING_TARGET));
        // Beyond: down by the gain per target, to the floor at six times.
        let five = t.observe(&[busy(65.0)], 40_000);
        assert!(close(five, PACING_TARGET - TRIM_GAIN), "{five}");
        assert!(close(t.observe(&[busy(70.0)], 40_000), TRIM_FLOOR));
        assert!(close(t.observe(&[busy(90.0)], 40_000), TRIM_FLOOR));
        assert!(!t.at_ceiling());
    }

    #[test]
    fn one_jittery_connection_and_an_idle_path_leave_it() {
        let mut t = QueueTrim::default();
        // One connection's RTT jumped; the other shows no queue.
        assert_eq!(t.observe(&[busy(70.0), busy(40.0)], 40_000), TRIM_CEIL);
        // Idle connections say nothing.
        let idle = Some(TcpInfo {
            rtt_us: 90_000,
            ..TcpInfo::default()
        });
        assert_eq!(t.observe(&[idle, None], 40_000), TRIM_CEIL);
        // No RTT known yet.
        assert_eq!(t.observe(&[busy(90.0)], 0), TRIM_CEIL);
    }

    #[test]
    fn the_target_is_an_eighth_of_the_min_rtt_at_least_2_ms() {
        assert_eq!(target_us(40_000), 5_000);
        assert_eq!(target_us(120_000), 15_000);
        assert_eq!(target_us(10_000), TARGET_MIN_US);
    }
}
