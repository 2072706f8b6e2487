//! How to split the bytes queued for a remote domain over its paths.
//!
//! # The fluid optimum
//! Path `i` delivers its first byte after its one-way delay `dᵢ` (RTT/2)
//! and then `rᵢ` bytes per second. Sending `bᵢ` bytes on it completes at
//! `dᵢ + bᵢ/rᵢ`; the whole transfer completes at the latest of those. The
//! split that minimises it fills paths like water: with the paths sorted by
//! delay, the first `k` carry bytes and all finish together at
//! `T = (Q + Σᵢ<k rᵢ·dᵢ) / Σᵢ<k rᵢ`, where `k` is the largest for which
//! `T > d_k`: a path whose delay alone exceeds `T` gets nothing (a small
//! transfer goes on the quickest path only; a large one on every path in
//! proportion to its rate, less what its extra delay costs).
//!
//! # Weights that do not flap
//! [`Weights`] follows that optimum for the estimates at hand: a dead path
//! (not [`PathEstimate::is_usable`]) loses its share at once; otherwise the
//! weights move only when the current split's completion time is more than
//! [`WeightsConfig::tolerance`] above the optimum's, and then by
//! [`WeightsConfig::gain`] of the way, so a noisy or flapping estimate does
//! not move traffic back and forth, and a real change is followed within a
//! few updates.

use super::estimator::PathEstimate;

/// A split of `Q` bytes: when the last byte arrives, and the bytes per path.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    pub time_s: f64,
    pub bytes: Vec<f64>,
}

/// The fluid optimum for `bytes` over `paths` = (one-way delay s, rate
/// bytes/s). Paths with no rate (or a non-finite one) get nothing; with no
/// usable path at all the time is infinite.
pub fn fluid_split(paths: &[(f64, f64)], bytes: f64) -> Split {
    let usable = |&(d, r): &(f64, f64)| d.is_finite() && d >= 0.0 && r.is_finite() && r > 0.0;
    let mut order: Vec<usize> = (0..paths.len()).filter(|&i| usable(&paths[i])).collect();
    order.sort_by(|&a, &b| paths[a].0.total_cmp(&paths[b].0));
    let mut split = Split {
        time_s: f64::INFINITY,
        bytes: vec![0.0; paths.len()],
    };
    let (mut rate, mut weighted_delay) = (0.0, 0.0);
    let mut active = 0;
    for (k, &i) in order.iter().enumerate() {
        let (d, r) = paths[i];
        if k > 0 && split.time_s <= d {
            break;
        }
        rate += r;
        weighted_delay += r * d;
        split.time_s = (bytes.max(0.0) + weighted_delay) / rate;
        active = k + 1;
    }
    for &i in &order[..active] {
        let (d, r) = paths[i];
        split.bytes[i] = (r * (split.time_s - d)).max(0.0);
    }
    split
}

/// Tuning of [`Weights`].
#[derive(Clone, Debug, PartialEq)]
pub struct WeightsConfig {
    /// Move when the current split is this much slower than the optimum
    /// (fraction, default 0.03).
    pub tolerance: f64,
    /// Fraction of the way to the optimum moved per update (default 0.5).
    pub gain: f64,
    /// Bytes the split is planned for when nothing is queued (default 16 MiB).
    pub reference_bytes: f64,
}

impl Default for WeightsConfig {
    fn default() -> Self {
        WeightsConfig {
            tolerance: 0.03,
            gain: 0.5,
            reference_bytes: 16.0 * 1024.0 * 1024.0,
        }
    }
}

/// Per-path shares of the cross-domain bytes (they sum to 1 while any path
/// is usable, and are all 0 when none is).
#[derive(Clone, Debug, PartialEq)]
pub struct Weights {
    cfg: WeightsConfig,
    w: Vec<f64>,
}

impl Weights {
    /// `paths` paths, none known usable yet.
    pub fn new(paths: usize, cfg: WeightsConfig) -> Self {
        Weights {
            cfg,
            w: vec![0.0; paths],
        }
    }

    pub fn get(&self) -> &[f64] {
        &self.w
    }

    /// Follows the optimum for `estimates` (one per path, in order) and
    /// `queued` bytes (0: the reference size). Returns the new weights.
    pub fn update(&mut self, estimates: &[PathEstimate], queued: f64) -> &[f64] {
        let paths: Vec<(f64, f64)> = estimates.iter().map(model).collect();
        self.w.resize(paths.len(), 0.0);
        let q = if queued > 0.0 {
            queued
        } else {
            self.cfg.reference_bytes
        };
        let best = fluid_split(&paths, q);
        if !best.time_s.is_finite() {
            self.w.iter_mut().for_each(|w| *w = 0.0);
            return &self.w;
        }
        let target: Vec<f64> = best.bytes.iter().map(|b| b / q).collect();
        // A path that died (or was never up) loses its share now.
        let mut dropped = false;
        for (w, p) in self.w.iter_mut().zip(&paths) {
            if *w > 0.0 && p.1 <= 0.0 {
                *w = 0.0;
                dropped = true;
            }
        }
        let total: f64 = self.w.iter().sum();
        if total <= 0.0 {
            self.w = target;
            return &self.w;
        }
        if dropped {
            self.w.iter_mut().for_each(|w| *w /= total);
        }
        if completion(&paths, &self.w, q) > (1.0 + self.cfg.tolerance) * best.time_s {
            for (w, t) in self.w.iter_mut().zip(&target) {
                *w += self.cfg.gain * (t - *w);
            }
            // The step can leave a dead path's tiny share: keep the sum at 1.
            let total: f64 = self.w.iter().sum();
            self.w.iter_mut().for_each(|w| *w /= total);
        }
        &self.w
    }
}

/// (one-way delay s, effective rate bytes/s) of a path; rate 0 when unusable.
/// Loss scales the rate down: the fraction lost must be sent again. The
/// delay is half the window's minimum RTT (the smoothed one before there is
/// a minimum): the smoothed RTT of a busy path includes the queue behind
/// the bytes already sent on it, which is not a property of the path (the
/// split accounts for queued bytes itself), and would push the split off a
/// path in proportion to how much it was given.
fn model(e: &PathEstimate) -> (f64, f64) {
    let rate = if e.is_usable() {
        e.bw_bytes_per_s * (1.0 - e.loss.clamp(0.0, 1.0))
    } else {
        0.0
    };
    let rtt_ns = if e.min_rtt_ns > 0 {
        e.min_rtt_ns as f64
    } else {
        e.srtt_ns
    };
    (rtt_ns / 2e9, rate)
}

/// When the last byte of `q` arrives if path `i` carries `w[i]·q`.
pub fn completion(paths: &[(f64, f64)], w: &[f64], q: f64) -> f64 {
    paths
        .iter()
        .zip(w)
        .filter(|(_, &w)| w > 0.0)
        .map(|(&(d, r), &w)| {
            if r > 0.0 {
                d + w * q / r
            } else {
                f64::INFINITY
            }
        })
        .fold(0.0, f64::max)
}
