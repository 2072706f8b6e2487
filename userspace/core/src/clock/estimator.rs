//! Offset and drift of a peer's clock relative to ours, from four-timestamp
//! exchanges (t1 local send, t2 peer receive, t3 peer send, t4 local receive).
//!
//! Pure and deterministic: samples and "now" come in as arguments; nothing
//! here reads a clock or does I/O.
//!
//! # Model
//! The peer's clock reads `local + θ(t)` with `θ(t) = θ₀ + r·(t − t_ref)`
//! (offset θ₀, drift r) over the sliding window. Each exchange gives
//! `θᵢ = ((t2 − t1) + (t3 − t4)) / 2` and the round-trip delay
//! `δᵢ = (t4 − t1) − (t3 − t2)`, taken at the local midpoint `(t1 + t4) / 2`.
//!
//! # Per-sample bound
//! With one-way delays `a + q_f` and `b + q_b` (base `a`, `b`, queueing
//! `q ≥ 0`), `θᵢ − θ = (a − b)/2 + (q_f − q_b)/2`, so
//! `|θᵢ − θ| ≤ A + (q_f + q_b)/2 = A + (δᵢ − δ_base)/2`, where `A` is the
//! configured bound on the base path asymmetry (it cannot be measured from
//! the endpoints: a constant asymmetry is indistinguishable from an
//! offset). `δ_base` is estimated by the window's minimum delay; how far
//! that minimum sits above the floor is estimated from the gap to the
//! fifth-lowest delay (for a delay density that is flat near its floor the
//! expected distance of the minimum from the floor equals the expected gap
//! between the first two order statistics; the fifth leaves a margin for
//! densities that rise from zero, such as the sum of two jitters).
//! So `eᵢ = 2·res + A + (δᵢ − δ_min)/2 + (δ₍₅₎ − δ₍₁₎)/2` (`res`: how far
//! one timestamp may be from the instant it stands for).
//!
//! # Fit and estimate bound
//! Minimum-delay filtering keeps the lowest-delay samples of each time
//! bucket of the window; a weighted least-squares line (weights `1/eᵢ²`) is
//! fitted through them, once with drift and once offset-only. Any linear
//! smoother predicts `θ̂(t) = Σ ℓᵢ(t) θᵢ` with `Σ ℓᵢ = 1` and exact
//! reproduction of lines, so `|θ̂(t) − θ(t)| ≤ Σ |ℓᵢ(t)| eᵢ` whenever every
//! sample lies within its own bound: a deterministic bound, including the
//! extrapolation from the last sample to `now`. The offset-only model adds
//! `max_drift · |t − xᵢ|` per sample. The model with the smaller bound wins.
//! Away from `now` the same sum grows at most linearly: `ℓᵢ(t)` is linear in
//! `t`, so the bound at `now + Δ` is the bound at `now` plus `|Δ|` times
//! `Σ |dℓᵢ/dt| eᵢ` for the drift model (`max_drift` for the offset-only one):
//! the drift bound published with every estimate.
//! Samples whose residual exceeds their bound by more than `outlier_k`
//! robust scales are rejected and the line refitted; the largest remaining
//! excess `|rᵢ| − eᵢ` (evidence that an assumption is off) is added to the
//! bound. If the newest samples are all outliers on the same side of the
//! line through the older ones, the peer clock (or the path) stepped: the
//! older samples are dropped.
//!
//! # Reported estimate
//! Once the window holds five samples and the fit's bound exceeds
//! `split_min_above_ns` (a jittery path), the reported offset and drift come
//! from separately minimum-filtered one-way delays (`split_min.rs`), which
//! converge faster under jitter, projected into the fit's interval
//! `[fit − bound, fit + bound]` (which holds the truth); the bound is the
//! distance to the interval's far end.

use std::collections::VecDeque;

use super::{
    regression::{fit, select_min_delay, Bounds, Fit, Model, Point},
    split_min,
};

/// One completed exchange, every stamp in nanoseconds on its own host's
/// clock: `t1`, `t4` local; `t2`, `t3` the peer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub t1: u64,
    pub t2: u64,
    pub t3: u64,
    pub t4: u64,
}

impl Sample {
    /// `((t2 − t1) + (t3 − t4)) / 2`: the peer's clock minus ours.
    pub fn offset_ns(&self) -> f64 {
        let twice = (self.t2 as i128 - self.t1 as i128) + (self.t3 as i128 - self.t4 as i128);
        twice as f64 / 2.0
    }

    /// Round-trip time minus the peer's hold time.
    pub fn delay_ns(&self) -> i128 {
        (self.t4 as i128 - self.t1 as i128) - (self.t3 as i128 - self.t2 as i128)
    }

    /// Local midpoint of the exchange.
    pub fn local_mid_ns(&self) -> u64 {
        self.t1 / 2 + self.t4 / 2 + (self.t1 % 2 + self.t4 % 2) / 2
    }
}

/// Tuning of an [`Estimator`]; [`EstimatorConfig::default`] suits probes every
/// 100 ms to 1 s over LAN or WAN paths.
#[derive(Clone, Debug, PartialEq)]
pub struct EstimatorConfig {
    /// Samples older than this (local time) are forgotten.
    pub window_ns: u64,
    /// Minimum-delay filtering keeps the best samples of each bucket.
    pub bucket_ns: u64,
    /// How many of each bucket's lowest-delay samples the fit uses.
    pub keep_per_bucket: usize,
    /// Hard cap on stored samples.
    pub max_samples: usize,
    /// Largest drift the clocks may have, in ppm (bounds the offset-only
    /// model's extrapolation and rejects absurd drift fits).
    pub max_drift_ppm: f64,
    /// Assumed bound on half the base path asymmetry, ns (unmeasurable).
    pub path_asymmetry_ns: f64,
    /// How far one timestamp may be from the instant it stands for (clock
    /// resolution, the gap between the stamp and the wire), ns.
    pub stamp_resolution_ns: f64,
    /// The drift model is considered once the selected samples span this.
    pub min_drift_span_ns: u64,
    /// Outliers: residual > bound + `outlier_k` × robust residual scale.
    pub outlier_k: f64,
    /// The split-minimum estimate is reported only while the fit's bound
    /// exceeds this, ns.
    pub split_min_above_ns: f64,
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        EstimatorConfig {
            window_ns: 30_000_000_000,
            bucket_ns: 1_000_000_000,
            keep_per_bucket: 3,
            max_samples: 4096,
            max_drift_ppm: 500.0,
            path_asymmetry_ns: 0.0,
            stamp_resolution_ns: 100.0,
            min_drift_span_ns: 200_000_000,
            outlier_k: 4.0,
            split_min_above_ns: 100_000.0,
        }
    }
}

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("clock window_ns must be > 0 and bucket_ns must be in 1..=window_ns (got window {window}, bucket {bucket})")]
    Window { window: u64, bucket: u64 },
    #[error("clock keep_per_bucket must be at least 1")]
    KeepPerBucket,
    #[error("clock max_samples must be at least 4 (got {0})")]
    MaxSamples(usize),
    #[error("clock {name} must be finite and within {min}..={max} (got {value})")]
    Range {
        name: &'static str,
        value: f64,
        min: f64,
        max: f64,
    },
}

/// Why a sample was not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SampleError {
    #[error("sample has t4 < t1 or t3 < t2 (clock went backwards or stamps swapped)")]
    NotMonotonic,
    #[error("sample has a negative round-trip delay ({0} ns)")]
    NegativeDelay(i128),
    #[error("sample is older than the window")]
    TooOld,
}

/// The current belief about a peer's clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// Local time the estimate is for.
    pub at_local_ns: u64,
    /// Peer clock minus local clock at `at_local_ns`, ns.
    pub offset_ns: f64,
    /// Peer clock rate minus ours, ppm (0 for the offset-only model).
    pub drift_ppm: f64,
    /// |true offset − `offset_ns`| ≤ this, under the documented assumptions.
    pub error_bound_ns: f64,
    /// How fast that bound grows for a prediction away from `at_local_ns`
    /// ([`Estimate::bound_at`]), ppm: the drift's own error bound.
    pub drift_bound_ppm: f64,
    /// Smallest round-trip delay in the window, ns.
    pub min_delay_ns: u64,
    /// Samples in the window / used by the fit / rejected as outliers.
    pub samples_in_window: usize,
    pub samples_used: usize,
    pub outliers: usize,
    pub model: Model,
    /// The regression fit's own offset (diagnostics: equals `offset_ns`
    /// unless the split-minimum estimate was reported).
    pub fit_offset_ns: f64,
}

impl Estimate {
    /// Offset predicted at another local time with this estimate's line.
    pub fn offset_at(&self, local_ns: u64) -> f64 {
        let dt = local_ns as i128 - self.at_local_ns as i128;
        self.offset_ns + self.drift_ppm * 1e-6 * dt as f64
    }

    /// The error bound of [`Estimate::offset_at`] at `local_ns`.
    pub fn bound_at(&self, local_ns: u64) -> f64 {
        let dt = (local_ns as i128 - self.at_local_ns as i128).unsigned_abs();
        self.error_bound_ns + self.drift_bound_ppm * 1e-6 * dt as f64
    }
}

/// Sliding-window offset/drift estimator for one peer.
#[derive(Clone, Debug)]
pub struct Estimator {
    cfg: EstimatorConfig,
    /// Sorted by local midpoint.
    points: VecDeque<Point>,
    accepted: u64,
    rejected: u64,
    steps: u64,
}

/// Newest samples that must all be same-side outliers to declare a step.
const STEP_CONFIRM: usize = 3;
/// The minimum's distance from the delay floor is bounded by its gap to the
/// delay of this rank (1-based) in the window.
const FLOOR_RANK: usize = 5;

impl Estimator {
    pub fn new(cfg: EstimatorConfig) -> Result<Self, ConfigError> {
        if cfg.window_ns == 0 || cfg.bucket_ns == 0 || cfg.bucket_ns > cfg.window_ns {
            return Err(ConfigError::Window {
                window: cfg.window_ns,
                bucket: cfg.bucket_ns,
            });
        }
        if cfg.keep_per_bucket == 0 {
            return Err(ConfigError::KeepPerBucket);
        }
        if cfg.max_samples < 4 {
            return Err(ConfigError::MaxSamples(cfg.max_samples));
        }
        check_range("max_drift_ppm", cfg.max_drift_ppm, 0.001, 10_000.0)?;
        check_range("path_asymmetry_ns", cfg.path_asymmetry_ns, 0.0, 1e9)?;
        check_range("stamp_resolution_ns", cfg.stamp_resolution_ns, 0.0, 1e9)?;
        check_range("outlier_k", cfg.outlier_k, 0.5, 100.0)?;
        check_range("split_min_above_ns", cfg.split_min_above_ns, 0.0, 1e12)?;
        Ok(Estimator {
            cfg,
            points: VecDeque::new(),
            accepted: 0,
            rejected: 0,
            steps: 0,
        })
    }

    pub fn config(&self) -> &EstimatorConfig {
        &self.cfg
    }

    /// Samples accepted and rejected by [`Estimator::add`] so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.accepted, self.rejected)
    }

    /// Adds one exchange. Samples that cannot be right are refused and
    /// leave the state untouched.
    pub fn add(&mut self, s: Sample) -> Result<(), SampleError> {
        let r = self.check(&s);
        match r {
            Ok(p) => {
                let at = self.points.partition_point(|q| q.x <= p.x);
                self.points.insert(at, p);
                self.prune();
                self.forget_before_step();
                self.accepted += 1;
                Ok(())
            }
            Err(e) => {
                self.rejected += 1;
                Err(e)
            }
        }
    }

    fn check(&self, s: &Sample) -> Result<Point, SampleError> {
        if s.t4 < s.t1 || s.t3 < s.t2 {
            return Err(SampleError::NotMonotonic);
        }
        let delay = s.delay_ns();
        if delay < 0 {
            return Err(SampleError::NegativeDelay(delay));
        }
        let x = s.local_mid_ns();
        if let Some(newest) = self.points.back() {
            if x.saturating_add(self.cfg.window_ns) < newest.x {
                return Err(SampleError::TooOld);
            }
        }
        Ok(Point {
            x,
            y: s.offset_ns(),
            delay: delay.min(u64::MAX as i128) as u64,
        })
    }

    /// If the newest [`STEP_CONFIRM`] samples all lie on the same side of
    /// the line fitted through the older ones, beyond their bounds plus the
    /// outlier margin, the peer clock (or the path) stepped: the older
    /// samples describe a clock that no longer exists and are dropped.
    fn forget_before_step(&mut self) {
        let n = self.points.len();
        if n < 2 * STEP_CONFIRM {
            return;
        }
        self.points.make_contiguous();
        let (older, newest) = self.points.as_slices().0.split_at(n - STEP_CONFIRM);
        let now = newest[STEP_CONFIRM - 1].x;
        let fit = self.fit_window(older, now);
        let sides: Vec<i8> = newest.iter().map(|p| fit.outlier_side(p)).collect();
        if sides.iter().all(|&s| s == 1) || sides.iter().all(|&s| s == -1) {
            self.points.drain(..n - STEP_CONFIRM);
            self.steps += 1;
        }
    }

    /// Clock steps detected (each dropped the samples before it).
    pub fn steps_detected(&self) -> u64 {
        self.steps
    }

    fn prune(&mut self) {
        let Some(newest) = self.points.back().map(|p| p.x) else {
            return;
        };
        let cutoff = newest.saturating_sub(self.cfg.window_ns);
        while self.points.front().is_some_and(|p| p.x < cutoff) {
            self.points.pop_front();
        }
        while self.points.len() > self.cfg.max_samples {
            self.points.pop_front();
        }
    }

    /// The estimate for local time `now_ns`, from the samples in the window
    /// ending at `now_ns` (samples after `now_ns` are ignored). `None` until
    /// a sample is in the window.
    pub fn estimate(&self, now_ns: u64) -> Option<Estimate> {
        let start = now_ns.saturating_sub(self.cfg.window_ns);
        let window: Vec<Point> = self
            .points
            .iter()
            .filter(|p| p.x >= start && p.x <= now_ns)
            .copied()
            .collect();
        if window.is_empty() {
            return None;
        }
        let fit = self.fit_window(&window, now_ns);
        let mut est = Estimate {
            at_local_ns: now_ns,
            offset_ns: fit.offset_ns,
            drift_ppm: fit.drift * 1e6,
            error_bound_ns: fit.bound_ns,
            drift_bound_ppm: fit.drift_bound * 1e6,
            min_delay_ns: fit.min_delay,
            samples_in_window: window.len(),
            samples_used: fit.used,
            outliers: fit.outliers,
            model: fit.model,
            fit_offset_ns: fit.offset_ns,
        };
        // On a quiet path the fit is already tight and slightly better
        // than the split minima, which pay off under jitter.
        if window.len() >= FLOOR_RANK && fit.bound_ns > self.cfg.split_min_above_ns {
            if let Some(sm) = split_min::split_min(&window, now_ns, self.cfg.max_drift_ppm * 1e-6) {
                // The truth lies in the fit's interval; projecting the
                // split-minimum estimate into it can only bring it closer,
                // and its worst-case error is the distance to the far end.
                let (lo, hi) = (fit.offset_ns - fit.bound_ns, fit.offset_ns + fit.bound_ns);
                let offset = sm.offset.clamp(lo, hi);
                est.error_bound_ns = (offset - lo).max(hi - offset);
                est.offset_ns = offset;
                est.drift_ppm = sm.drift * 1e6;
                // The truth stays within the fit's interval, which widens at
                // the fit's drift bound; the reported line leaves the fit's
                // line at the difference of their drifts.
                est.drift_bound_ppm = (fit.drift_bound + (sm.drift - fit.drift).abs()) * 1e6;
                est.samples_used = window.len();
                est.model = Model::SplitMin;
            }
        }
        Some(est)
    }

    fn fit_window(&self, window: &[Point], now_ns: u64) -> Fit {
        let selected = select_min_delay(
            window,
            self.cfg.bucket_ns,
            now_ns,
            self.cfg.window_ns,
            self.cfg.keep_per_bucket,
        );
        let mut delays: Vec<u64> = window.iter().map(|p| p.delay).collect();
        delays.sort_unstable();
        let min_delay = delays[0];
        let floor_gap = delays[delays.len().min(FLOOR_RANK) - 1] - min_delay;
        let floor_gap = floor_gap as f64 / 2.0;
        // Fewer than three samples: nothing tells how far the minimum sits
        // above the floor, so only the hard bound δ/2 is honest.
        let lone = if delays.len() < 3 {
            min_delay as f64 / 2.0
        } else {
            0.0
        };
        // Four stamps, each off by up to the resolution, move the offset
        // ((t2 − t1) + (t3 − t4))/2 by up to twice that.
        let base =
            2.0 * self.cfg.stamp_resolution_ns + self.cfg.path_asymmetry_ns + floor_gap.max(lone);
        fit(&selected, Bounds { base, min_delay }, now_ns, &self.cfg)
    }
}

fn check_range(name: &'static str, value: f64, min: f64, max: f64) -> Result<(), ConfigError> {
    if value.is_finite() && (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::Range {
            name,
            value,
            min,
            max,
        })
    }
}
