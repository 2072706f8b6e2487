//! Virtual-clock tests of the estimator: offsets up to ±50 ms, drift up to
//! ±100 ppm, symmetric and asymmetric jitter, loss and bursts.

use super::estimator::{Estimator, EstimatorConfig, Sample, SampleError};
use super::sim::{Jitter, Path, Sim, VirtualClock};

const MS: f64 = 1e6;
const US: f64 = 1e3;
/// Probe period of every scenario.
const INTERVAL_NS: f64 = 100.0 * MS;

struct Outcome {
    /// |error| of every step once a first sample exists.
    errors: Vec<f64>,
    /// Steps whose |error| exceeded the estimate's own bound.
    violations: Vec<usize>,
    /// Steps whose estimate, extrapolated 1 s ahead with its drift, missed
    /// the truth there by more than `bound_at` (bound + drift bound · 1 s).
    ahead_violations: usize,
}

/// How far ahead the published line is checked (readers use it between updates).
const AHEAD_NS: u64 = 1_000_000_000;

fn quantile(errors: &[f64], q: f64) -> f64 {
    let mut v = errors.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Probes every 100 ms for `steps` periods; the estimate is checked just
/// before each next probe (the worst point: longest extrapolation).
fn run(seed: u64, path: Path, remote: VirtualClock, steps: usize) -> Outcome {
    let local = VirtualClock {
        offset_ns: 0.0,
        drift_ppm: 0.0,
    };
    let mut sim = Sim::new(seed, path, local, remote);
    let mut est = Estimator::new(EstimatorConfig::default()).expect("default config is valid");
    let mut out = Outcome {
        errors: Vec::new(),
        violations: Vec::new(),
        ahead_violations: 0,
    };
    for i in 0..steps {
        let send = i as f64 * INTERVAL_NS;
        if let Some(s) = sim.exchange(send) {
            est.add(s).expect("simulated samples are consistent");
        }
        let now = local.read(send + INTERVAL_NS - 1.0);
        let Some(e) = est.estimate(now) else { continue };
        let err = (e.offset_ns - sim.true_offset(now)).abs();
        out.errors.push(err);
        if err > e.error_bound_ns {
            out.violations.push(i);
        }
        let ahead = now + AHEAD_NS;
        let ahead_err = (e.offset_at(ahead) - sim.true_offset(ahead)).abs();
        out.ahead_violations += usize::from(ahead_err > e.bound_at(ahead));
    }
    out
}

fn clocks() -> Vec<VirtualClock> {
    let mut v = Vec::new();
    for offset_ns in [-50.0 * MS, 3.7 * MS, 50.0 * MS] {
        for drift_ppm in [-100.0, 0.0, 100.0] {
            v.push(VirtualClock {
                offset_ns,
                drift_ppm,
            });
        }
    }
    v
}

/// Runs every clock with `path` for 60 s and checks: the error stayed
/// within the estimate's own bound in ≥ 99 % of steps; from probe
/// `converge_within` on, the p99 of the errors of all runs pooled is
/// ≤ `p99_target` and no single run's p99 exceeds 1.5 × `p99_target`.
fn check_all(name: &str, path: Path, p99_target: f64, converge_within: usize) {
    let mut pooled = Vec::new();
    for (k, remote) in clocks().into_iter().enumerate() {
        let o = run(0xC10C + k as u64, path, remote, 600);
        let settled = &o.errors[converge_within..];
        let within = 1.0 - o.violations.len() as f64 / o.errors.len() as f64;
        eprintln!(
            "{name}: offset {:+.1} ms drift {:+.0} ppm: after {converge_within} probes p50 {:.1} µs p99 {:.1} µs max {:.1} µs; within bound {:.2} % (violations at {:?})",
            remote.offset_ns / MS,
            remote.drift_ppm,
            quantile(settled, 0.5) / US,
            quantile(settled, 0.99) / US,
            quantile(settled, 1.0) / US,
            within * 100.0,
            &o.violations[..o.violations.len().min(8)],
        );
        assert!(within >= 0.99, "{name}: error exceeded its bound too often");
        let ahead_within = 1.0 - o.ahead_violations as f64 / o.errors.len() as f64;
        assert!(
            ahead_within >= 0.99,
            "{name}: 1 s ahead the error exceeded bound + drift bound in {} steps",
            o.ahead_violations
        );
        assert!(
            quantile(settled, 0.99) <= 1.5 * p99_target,
            "{name}: p99 of one run too large"
        );
        pooled.extend_from_slice(settled);
    }
    let p99 = quantile(&pooled, 0.99);
    eprintln!(
        "{name}: pooled p50 {:.1} µs p99 {:.1} µs",
        quantile(&pooled, 0.5) / US,
        p99 / US
    );
    assert!(
        p99 <= p99_target,
        "{name}: pooled p99 {p99} ns above {p99_target} ns"
    );
}

#[test]
fn no_jitter_converges_fast_and_tightly() {
    let path = Path::symmetric(40.0 * MS, Jitter::None);
    check_all("no jitter", path, 1.0 * US, 3);
}

#[test]
fn symmetric_uniform_jitter_of_1ms() {
    let path = Path::symmetric(40.0 * MS, Jitter::Uniform { max_ns: 1.0 * MS });
    check_all("uniform 1 ms", path, 100.0 * US, 100);
}

#[test]
fn symmetric_exponential_jitter_of_1ms() {
    let path = Path::symmetric(40.0 * MS, Jitter::Exponential { mean_ns: 1.0 * MS });
    check_all("exponential 1 ms", path, 100.0 * US, 100);
}

#[test]
fn asymmetric_jitter() {
    check_all("asymmetric", Path::wan40_asymmetric(), 150.0 * US, 100);
}

#[test]
fn loss_and_bursts() {
    check_all("loss+bursts", Path::wan40_lossy_bursts(), 100.0 * US, 100);
}

#[test]
fn bound_covers_constant_path_asymmetry_when_configured() {
    // 400 µs more one way: a constant asymmetry biases the offset by 200 µs,
    // which no endpoint can observe; the configured bound must cover it.
    let mut path = Path::symmetric(40.0 * MS, Jitter::Uniform { max_ns: 0.5 * MS });
    path.base_fwd_ns += 200.0 * US;
    path.base_back_ns -= 200.0 * US;
    let remote = VirtualClock {
        offset_ns: 10.0 * MS,
        drift_ppm: 20.0,
    };
    let mut sim = Sim::new(
        7,
        path,
        VirtualClock {
            offset_ns: 0.0,
            drift_ppm: 0.0,
        },
        remote,
    );
    let cfg = EstimatorConfig {
        path_asymmetry_ns: 250.0 * US,
        ..EstimatorConfig::default()
    };
    let mut est = Estimator::new(cfg).expect("valid config");
    let mut within = 0;
    for i in 0..300 {
        let send = i as f64 * INTERVAL_NS;
        est.add(sim.exchange(send).expect("no loss"))
            .expect("consistent");
        let now = sim.local.read(send + INTERVAL_NS - 1.0);
        let e = est.estimate(now).expect("has samples");
        let err = (e.offset_ns - sim.true_offset(now)).abs();
        assert!(
            i < 50 || err > 150.0 * US,
            "a constant asymmetry must show up as bias ({err} ns)"
        );
        within += usize::from(err <= e.error_bound_ns);
    }
    assert!(within >= 297, "bound held in only {within}/300 steps");
}

#[test]
fn a_peer_clock_step_is_followed_within_a_few_samples() {
    let path = Path::symmetric(10.0 * MS, Jitter::Uniform { max_ns: 0.2 * MS });
    let local = VirtualClock {
        offset_ns: 0.0,
        drift_ppm: 0.0,
    };
    let mut sim = Sim::new(
        11,
        path,
        local,
        VirtualClock {
            offset_ns: 1.0 * MS,
            drift_ppm: 0.0,
        },
    );
    let mut est = Estimator::new(EstimatorConfig::default()).expect("valid config");
    for i in 0..400 {
        if i == 200 {
            sim.remote.offset_ns += 5.0 * MS;
        }
        let send = i as f64 * INTERVAL_NS;
        est.add(sim.exchange(send).expect("no loss"))
            .expect("consistent");
        let now = local.read(send + INTERVAL_NS - 1.0);
        let e = est.estimate(now).expect("has samples");
        let err = (e.offset_ns - sim.true_offset(now)).abs();
        if !(200..204).contains(&i) {
            assert!(err < 200.0 * US, "step {i}: error {err} ns");
        }
    }
}

#[test]
fn inconsistent_samples_are_refused_and_change_nothing() {
    let mut est = Estimator::new(EstimatorConfig::default()).expect("valid config");
    let good = Sample {
        t1: 1_000_000,
        t2: 6_000_000,
        t3: 6_010_000,
        t4: 11_010_000,
    };
    est.add(good).expect("consistent");
    let before = est.estimate(12_000_000);
    let backwards = Sample {
        t4: 900_000,
        ..good
    };
    assert_eq!(est.add(backwards), Err(SampleError::NotMonotonic));
    let swapped = Sample {
        t2: 6_010_000,
        t3: 6_000_000,
        ..good
    };
    assert_eq!(est.add(swapped), Err(SampleError::NotMonotonic));
    let impossible = Sample {
        t2: 1_000_000,
        t3: 20_000_000,
        ..good
    };
    assert!(matches!(
        est.add(impossible),
        Err(SampleError::NegativeDelay(_))
    ));
    assert_eq!(est.estimate(12_000_000), before);
    assert_eq!(est.counts(), (1, 3));
    let later = Sample {
        t1: 60_000_000_000,
        t2: 60_005_000_000,
        t3: 60_005_010_000,
        t4: 60_010_010_000,
    };
    est.add(later).expect("consistent");
    assert_eq!(est.add(good), Err(SampleError::TooOld));
    assert_eq!(est.counts(), (2, 4));
}

#[test]
fn a_single_sample_gives_the_hard_half_rtt_bound() {
    let mut est = Estimator::new(EstimatorConfig::default()).expect("valid config");
    // RTT 10 ms, measured offset 2 ms.
    est.add(Sample {
        t1: 0,
        t2: 7_000_000,
        t3: 7_000_000,
        t4: 10_000_000,
    })
    .expect("consistent");
    let e = est.estimate(10_000_000).expect("one sample");
    assert_eq!(e.offset_ns, 2_000_000.0);
    assert!(
        e.error_bound_ns >= 5_000_000.0,
        "bound {} below RTT/2",
        e.error_bound_ns
    );
}

#[test]
fn bad_configs_are_refused() {
    let bad = [
        EstimatorConfig {
            window_ns: 0,
            ..EstimatorConfig::default()
        },
        EstimatorConfig {
            bucket_ns: 40_000_000_000,
            ..EstimatorConfig::default()
        },
        EstimatorConfig {
            max_samples: 2,
            ..EstimatorConfig::default()
        },
        EstimatorConfig {
            max_drift_ppm: f64::NAN,
            ..EstimatorConfig::default()
        },
        EstimatorConfig {
            outlier_k: 0.0,
            ..EstimatorConfig::default()
        },
    ];
    for cfg in bad {
        assert!(Estimator::new(cfg.clone()).is_err(), "{cfg:?} accepted");
    }
}
