//! Clock-sync accuracy: |estimate − truth| per profile (and, on the
//! testbed, per timestamp source), p50/p99/max, and how often the error
//! stayed within the estimate's own bound. Not a timed benchmark.
//!
//! ```text
//! cargo bench -p causeway-tests --bench clock              # both parts
//! cargo bench -p causeway-tests --bench clock -- --virtual # estimator only (no root)
//! ```
//! Part 1 drives the estimator on the virtual network of
//! `causeway::clock::sim` (8 seeds × 120 s, probes every 100 ms, measured
//! after the first 100 probes; remote clock +20 ms, +50 ppm). Part 2 runs
//! two `causeway agent`s on the netsim testbed (needs root) and, on the same
//! link at the same time, chrony as an outside reference: `chronyd -x` in
//! both hosts (never adjusting the host clock; `cargo xtask setup` installs
//! it with service starts denied), measured over the same window — see
//! `causeway_tests::chrony` for what its error is.
//!
//! With `CAUSEWAY_BENCH_SAMPLES=FILE`, part 2 also writes every |error|
//! sample (ns) per profile and source to FILE as JSON
//! (`[{"profile", "source", "abs_ns": [..]}]`), which `cargo xtask bench
//! clock` plots as CDFs.

use std::time::Duration;

use causeway::clock::{
    sim::{Jitter, Path, Sim, VirtualClock},
    Estimator, EstimatorConfig,
};
use causeway_netsim::{params::ParamsPatch, Profile, Testbed};
use causeway_tests::{
    chrony::{self, ChronyError, ChronyErrors, ChronyPair, PairSpec, Programs},
    clock_agent::{measure_pair, quantile},
    netsim_support::two_hosts,
};

const MS: f64 = 1e6;
const INTERVAL_NS: f64 = 100.0 * MS;

fn virtual_profiles() -> Vec<(&'static str, Path)> {
    let mut lossy80 = Path::symmetric(80.0 * MS, Jitter::None);
    lossy80.loss = 0.001;
    vec![
        ("wan40", Path::symmetric(40.0 * MS, Jitter::None)),
        // netsim's ±1 ms: each delay uniform in [d − 1 ms, d + 1 ms].
        (
            "wan40 ±1 ms uniform",
            Path::symmetric(38.0 * MS, Jitter::Uniform { max_ns: 2.0 * MS }),
        ),
        (
            "wan40 exp(1 ms)",
            Path::symmetric(40.0 * MS, Jitter::Exponential { mean_ns: 1.0 * MS }),
        ),
        (
            "wan40 asymmetric exp(2 ms)/U(0.1 ms)",
            Path::wan40_asymmetric(),
        ),
        (
            "wan40 U(1 ms) + 10 % loss + bursts",
            Path::wan40_lossy_bursts(),
        ),
        ("lossy80", lossy80),
    ]
}

fn run_virtual() {
    println!("| profile (virtual network) | p50 µs | p99 µs | max µs | fit-only p99 µs | within bound | median bound µs |");
    println!("|---|---|---|---|---|---|---|");
    for (name, path) in virtual_profiles() {
        let (mut err, mut fit_err, mut bounds, mut within) =
            (Vec::new(), Vec::new(), Vec::new(), 0usize);
        for seed in 0..8u64 {
            let local = VirtualClock {
                offset_ns: 0.0,
                drift_ppm: 0.0,
            };
            let remote = VirtualClock {
                offset_ns: 20.0 * MS,
                drift_ppm: 50.0,
            };
            let mut sim = Sim::new(0xBE4C + seed, path, local, remote);
            let mut est = Estimator::new(EstimatorConfig::default()).expect("default config");
            for i in 0..1200 {
                let send = i as f64 * INTERVAL_NS;
                if let Some(s) = sim.exchange(send) {
                    est.add(s).expect("consistent sample");
                }
                let now = local.read(send + INTERVAL_NS - 1.0);
                let Some(e) = est.estimate(now) else { continue };
                if i < 100 {
                    continue;
                }
                let truth = sim.true_offset(now);
                let abs = (e.offset_ns - truth).abs();
                err.push(abs);
                fit_err.push((e.fit_offset_ns - truth).abs());
                bounds.push(e.error_bound_ns);
                within += usize::from(abs <= e.error_bound_ns);
            }
        }
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} % | {:.1} |",
            quantile(&err, 0.5) / 1e3,
            quantile(&err, 0.99) / 1e3,
            quantile(&err, 1.0) / 1e3,
            quantile(&fit_err, 0.99) / 1e3,
            100.0 * within as f64 / err.len() as f64,
            quantile(&bounds, 0.5) / 1e3,
        );
    }
}

/// Our agents' relative drift (B +70 ppm against A −30 ppm): chrony's
/// client starts with the same frequency error to find.
const CHRONY_FREQ_ERROR_PPM: f64 = 100.0;

fn run_testbed() {
    let warmup = Duration::from_secs(10);
    let measure = Duration::from_secs(30);
    let chrony = chrony::installed();
    let mut samples = Vec::new();
    println!("| testbed profile | source | n | p50 µs | p99 µs | max µs | within bound | fit-only p99 µs |");
    println!("|---|---|---|---|---|---|---|---|");
    for (name, profile, jitter) in [
        ("wan40", Profile::Wan40, 0),
        ("wan40 ±1 ms", Profile::Wan40, 1_000_000),
        ("lossy80", Profile::Lossy80, 0),
    ] {
        let tb = two_hosts(profile);
        if jitter > 0 {
            tb.set_path(
                0,
                &ParamsPatch {
                    jitter_ns: Some(jitter),
                    ..Default::default()
                },
            )
            .expect("set jitter");
        }
        let pair = chrony
            .as_ref()
            .map_err(ChronyError::to_string)
            .and_then(|programs| start_chrony(&tb, programs).map_err(|e| e.to_string()));
        let (errors, chrony_errors) = match &pair {
            Ok(pair) => {
                let (errors, c) = chrony::measure_alongside(pair, measure, || {
                    measure_pair(&tb, name, warmup, measure)
                });
                match pair.client_log() {
                    Ok(log) => eprintln!("{name}: chrony client {log:?}"),
                    Err(e) => eprintln!("{name}: chrony client log: {e}"),
                }
                (errors, Ok(c))
            }
            Err(e) => (measure_pair(&tb, name, warmup, measure), Err(e.clone())),
        };
        for (source, e) in errors {
            let fit = format!("{:.1}", quantile(&e.fit_abs, 0.99) / 1e3);
            println!(
                "{}",
                error_row(name, &source.to_string(), &e.abs, e.within_bound, &fit)
            );
            samples.push(sample_set(name, &source.to_string(), &e.abs));
        }
        if let Ok(c) = &chrony_errors {
            samples.push(sample_set(name, "chrony (chronyd -x)", &c.abs));
        }
        println!("{}", chrony_row(name, chrony_errors));
        drop(pair);
    }
    if let Some(file) = std::env::var_os("CAUSEWAY_BENCH_SAMPLES") {
        let text = serde_json::Value::Array(samples).to_string();
        if let Err(e) = std::fs::write(&file, text) {
            eprintln!("writing the samples to {file:?}: {e}");
        }
    }
    let adjusting = chrony::clock_adjusting_chronyds();
    if !adjusting.is_empty() {
        eprintln!("WARNING: chronyd processes that may adjust the host clock: {adjusting:?}");
    }
}

fn sample_set(profile: &str, source: &str, abs_ns: &[f64]) -> serde_json::Value {
    serde_json::json!({ "profile": profile, "source": source, "abs_ns": abs_ns })
}

fn start_chrony(tb: &Testbed, programs: &Programs) -> Result<ChronyPair, ChronyError> {
    let (client, server) = (tb.host(0, 0), tb.host(1, 0));
    ChronyPair::start(
        programs,
        &PairSpec {
            server_netns: &server.netns,
            server_ip: server.ip,
            client_netns: &client.netns,
            client_freq_error_ppm: CHRONY_FREQ_ERROR_PPM,
        },
    )
}

fn chrony_row(name: &str, errors: Result<ChronyErrors, String>) -> String {
    let unavailable = |why: String| {
        format!("| {name} | chrony reference: unavailable: {why} | – | – | – | – | – | – |")
    };
    let e = match errors {
        Ok(e) if !e.abs.is_empty() => e,
        Ok(e) => {
            return unavailable(format!(
                "not synchronised in the window ({} polls unsynchronised, {} failed{})",
                e.unsynchronised,
                e.failed,
                e.last_failure.map(|f| format!(": {f}")).unwrap_or_default()
            ))
        }
        Err(why) => return unavailable(why),
    };
    if e.unsynchronised + e.failed > 0 {
        eprintln!(
            "{name}: chrony unsynchronised at {} polls, chronyc failed at {} ({:?})",
            e.unsynchronised, e.failed, e.last_failure
        );
    }
    error_row(name, "chrony (chronyd -x)", &e.abs, e.within_bound, "–")
}

/// One row of the testbed table: |error| quantiles in µs from ns.
fn error_row(name: &str, source: &str, abs: &[f64], within_bound: usize, fit: &str) -> String {
    format!(
        "| {name} | {source} | {} | {:.1} | {:.1} | {:.1} | {:.1} % | {fit} |",
        abs.len(),
        quantile(abs, 0.5) / 1e3,
        quantile(abs, 0.99) / 1e3,
        quantile(abs, 1.0) / 1e3,
        100.0 * within_bound as f64 / abs.len() as f64,
    )
}

fn main() {
    let virtual_only = std::env::args().any(|a| a == "--virtual");
    run_virtual();
    if virtual_only {
        return;
    }
    if !causeway_test_support::root_or_skip("benches/clock (the testbed part)") {
        return;
    }
    run_testbed();
}
