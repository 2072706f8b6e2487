//! Weighted least-squares line through offset samples, with a deterministic
//! prediction bound and outlier rejection (see `estimator.rs` for the model).

use super::estimator::EstimatorConfig;

/// One accepted exchange: local midpoint, measured offset, round-trip delay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Point {
    pub x: u64,
    pub y: f64,
    pub delay: u64,
}

/// Fewest points the fit wants from the buckets before it takes several per bucket.
const MIN_POINTS: usize = 6;

/// Which line was fitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Model {
    /// Constant offset; drift only widens the bound.
    OffsetOnly,
    /// Offset and drift.
    OffsetAndDrift,
    /// Separately minimum-filtered one-way delays (see `split_min.rs`).
    SplitMin,
}

/// What a sample's own bound is made of: `base + (delay − min_delay)/2`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    pub base: f64,
    pub min_delay: u64,
}

impl Bounds {
    fn of(&self, p: &Point) -> f64 {
        self.base + p.delay.saturating_sub(self.min_delay) as f64 / 2.0
    }
}

/// A fitted line, evaluated at `now`.
#[derive(Clone, Debug)]
pub(crate) struct Fit {
    pub model: Model,
    pub now: u64,
    pub offset_ns: f64,
    /// Dimensionless (ns per ns).
    pub drift: f64,
    pub bound_ns: f64,
    /// How fast the bound grows away from `now`: at `now + Δ` the error is
    /// at most `bound_ns + drift_bound · |Δ|` (dimensionless).
    pub drift_bound: f64,
    pub used: usize,
    pub outliers: usize,
    pub min_delay: u64,
    bounds: Bounds,
    /// Residual threshold above the sample's own bound.
    margin: f64,
}

impl Fit {
    pub fn predict(&self, x: u64) -> f64 {
        self.offset_ns + self.drift * (x as i128 - self.now as i128) as f64
    }

    /// +1 / −1 if `p` lies above / below the line by more than its bound
    /// plus the outlier margin, else 0.
    pub fn outlier_side(&self, p: &Point) -> i8 {
        let r = p.y - self.predict(p.x);
        if r.abs() > self.bounds.of(p) + self.margin {
            r.signum() as i8
        } else {
            0
        }
    }
}

/// Fits `points` (sorted by x, non-empty), rejects outliers once, refits.
pub(crate) fn fit(points: &[Point], bounds: Bounds, now: u64, cfg: &EstimatorConfig) -> Fit {
    let first = fit_once(points, bounds, now, cfg);
    let kept: Vec<Point> = points
        .iter()
        .filter(|p| first.outlier_side(p) == 0)
        .copied()
        .collect();
    let rejected = points.len() - kept.len();
    // Reject only a minority: a majority of "outliers" means the model, not
    // the samples, is wrong; then the residual excess widens the bound.
    let mut out = if rejected > 0 && kept.len() * 2 > points.len() {
        fit_once(&kept, bounds, now, cfg)
    } else {
        first
    };
    out.outliers = points.len() - out.used;
    out
}

fn fit_once(points: &[Point], bounds: Bounds, now: u64, cfg: &EstimatorConfig) -> Fit {
    let max_drift = cfg.max_drift_ppm * 1e-6;
    let e: Vec<f64> = points.iter().map(|p| bounds.of(p).max(1e-3)).collect();
    let x: Vec<f64> = points
        .iter()
        .map(|p| (p.x as i128 - now as i128) as f64)
        .collect();
    // Inverse-variance weights: given its excess delay s, a sample's error
    // is spread over ±s/2, so its variance grows like e².
    let w: Vec<f64> = e.iter().map(|e| 1.0 / (e * e)).collect();
    let sum_w: f64 = w.iter().sum();
    let mean = |v: &[f64]| v.iter().zip(&w).map(|(v, w)| v * w).sum::<f64>() / sum_w;
    let ys: Vec<f64> = points.iter().map(|p| p.y).collect();
    let (x_bar, y_bar) = (mean(&x), mean(&ys));

    // Offset only: θ̂ = weighted mean; each sample also carries the drift it
    // may have accumulated between its time and now.
    let off_bound: f64 = (0..points.len())
        .map(|i| w[i] / sum_w * (e[i] + max_drift * x[i].abs()))
        .sum();
    let mut best = (Model::OffsetOnly, y_bar, 0.0, off_bound, max_drift);

    let span = points.last().map_or(0, |l| l.x) - points.first().map_or(0, |f| f.x);
    if points.len() >= 3 && span >= cfg.min_drift_span_ns {
        let sxx: f64 = (0..points.len())
            .map(|i| w[i] * (x[i] - x_bar).powi(2))
            .sum();
        let sxy: f64 = (0..points.len())
            .map(|i| w[i] * (x[i] - x_bar) * (ys[i] - y_bar))
            .sum();
        if sxx > 0.0 {
            let slope = sxy / sxx;
            // Prediction at x = 0 (now): ℓᵢ = wᵢ/W + wᵢ(xᵢ − x̄)(0 − x̄)/Sxx.
            let drift_bound: f64 = (0..points.len())
                .map(|i| (w[i] / sum_w - w[i] * (x[i] - x_bar) * x_bar / sxx).abs() * e[i])
                .sum();
            // ℓᵢ(x) = ℓᵢ(0) + x·wᵢ(xᵢ − x̄)/Sxx, so Σ|ℓᵢ(x)|eᵢ grows by at most
            // |x|·Σ|wᵢ(xᵢ − x̄)/Sxx|·eᵢ; no more than twice the largest drift
            // (both the truth's and the fit's are within it).
            let rate_bound = (0..points.len())
                .map(|i| (w[i] * (x[i] - x_bar) / sxx).abs() * e[i])
                .sum::<f64>()
                .min(2.0 * max_drift);
            if slope.abs() <= max_drift && drift_bound < off_bound {
                best = (
                    Model::OffsetAndDrift,
                    y_bar - slope * x_bar,
                    slope,
                    drift_bound,
                    rate_bound,
                );
            }
        }
    }
    let (model, offset_ns, drift, bound, drift_bound) = best;
    let mut abs_res: Vec<f64> = (0..points.len())
        .map(|i| (ys[i] - (offset_ns + drift * x[i])).abs())
        .collect();
    let excess = (0..points.len())
        .map(|i| abs_res[i] - e[i])
        .fold(0.0_f64, f64::max);
    abs_res.sort_by(f64::total_cmp);
    let scale = 1.4826 * abs_res[abs_res.len() / 2];
    Fit {
        model,
        now,
        offset_ns,
        drift,
        bound_ns: bound + excess,
        drift_bound,
        used: points.len(),
        outliers: 0,
        min_delay: bounds.min_delay,
        bounds,
        margin: cfg.outlier_k * scale.max(cfg.stamp_resolution_ns).max(1.0),
    }
}

/// Keeps the lowest-delay point of each bucket (more per bucket while the
/// window holds few buckets, so a cold start still has several points).
pub(crate) fn select_min_delay(
    window: &[Point],
    bucket_ns: u64,
    now_ns: u64,
    window_ns: u64,
    keep: usize,
) -> Vec<Point> {
    let start = now_ns.saturating_sub(window_ns);
    let buckets = (window_ns / bucket_ns + 1) as usize;
    let mut by_bucket: Vec<Vec<Point>> = vec![Vec::new(); buckets];
    for p in window {
        let b = ((p.x - start) / bucket_ns) as usize;
        by_bucket[b.min(buckets - 1)].push(*p);
    }
    let filled = by_bucket.iter().filter(|b| !b.is_empty()).count().max(1);
    let per_bucket = MIN_POINTS.div_ceil(filled).max(keep);
    let mut out = Vec::new();
    for mut b in by_bucket {
        b.sort_by_key(|p| p.delay);
        out.extend(b.into_iter().take(per_bucket));
    }
    out.sort_by_key(|p| p.x);
    out
}
