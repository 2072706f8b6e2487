//! A path whose rate is halved mid-run (issue 14): four ranks (2 domains ×
//! 2 hosts) on the `dual` testbed (path 0: 40 ms / 200 Mbit/s, path 1:
//! 60 ms / 100 Mbit/s) run a sequence of checked 16 MiB allreduces striped
//! over both paths; after rank 0's iteration [`HALVE_AFTER`] path 0's rate
//! is set to 100 Mbit/s with the testbed's live parameter change.
//!
//! Checked: every result is right; path 0's share of the striped bytes falls
//! from near the old fluid optimum (≈ 2/3) to near the new one (≈ 1/2)
//! within [`SETTLE`] iterations and stays there; and the allreduce time
//! after the change, relative to before, follows the ratio of the two fluid
//! optima's completion times. The weights at each iteration's end are
//! printed, not checked: they are planned for the few bytes still queued
//! then, not for the iteration's bulk.

use causeway_test_support::require_root;
use std::time::{Duration, Instant};

use causeway_core::paths::fluid_split;
use causeway_netsim::{ParamsPatch, Profile};
use causeway_tests::netsim_support;

use super::multipath::start_striped;
use super::testbed::next;

const WORLD: usize = 4;
const ITERS: usize = 14;
/// Rank 0's iteration after which path 0's rate is halved.
const HALVE_AFTER: u64 = 5;
/// Iterations after the change that may still carry the old split (the
/// bandwidth estimate's window, and the iteration in flight at the change).
const SETTLE: usize = 3;

/// (one-way delay s, rate bytes/s) of the two paths.
const BEFORE: [(f64, f64); 2] = [(0.020, 25e6), (0.030, 12.5e6)];
const AFTER: [(f64, f64); 2] = [(0.020, 12.5e6), (0.030, 12.5e6)];

/// One rank's report of one iteration.
#[derive(Clone, Debug)]
struct Iter {
    s: f64,
    bytes: [u64; 2],
    w0: f64,
}

#[test]
fn a_path_whose_rate_is_halved_loses_share_and_the_time_follows_the_optimum() {
    require_root!("a_path_whose_rate_is_halved_loses_share_and_the_time_follows_the_optimum");
    let tb = netsim_support::testbed(2, 2, Profile::Dual);
    let w = start_striped(&tb, 29650, ITERS);
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut iters: Vec<Vec<Iter>> = vec![Vec::new(); WORLD];
    let mut done = [false; WORLD];
    let mut halved = false;
    while !done.iter().all(|d| *d) {
        let (r, v) = next(&w, deadline);
        match v["event"].as_str() {
            Some("ready") => assert_eq!(v["algorithm"], "Hierarchical", "rank {r}: {v}"),
            Some("iter") => {
                let b = |p: usize| v["bytes_per_path"][p].as_u64().unwrap_or(0);
                let it = Iter {
                    s: v["s"].as_f64().unwrap_or(f64::NAN),
                    bytes: [b(0), b(1)],
                    w0: v["weights"][0].as_f64().unwrap_or(f64::NAN),
                };
                eprintln!("rank {r} iteration {}: {it:?}", v["iter"]);
                iters[r].push(it);
                if r == 0 && v["iter"].as_u64() == Some(HALVE_AFTER) && !halved {
                    let patch = ParamsPatch {
                        rate_bps: Some(100_000_000),
                        ..Default::default()
                    };
                    tb.set_path(0, &patch).expect("halve path 0");
                    halved = true;
                    eprintln!("path 0 halved to 100 Mbit/s");
                }
            }
            Some("done") => done[r] = true,
            _ => panic!("rank {r}: {v}"),
        }
    }
    w.finish("");
    assert!(halved, "the change happened");
    for (r, it) in iters.iter().enumerate() {
        assert_eq!(it.len(), ITERS, "rank {r}: every allreduce completed");
    }
    // Per iteration, over every rank: the striped bytes of each path, and the
    // slowest rank's time.
    let delta = |i: usize, p: usize| -> u64 {
        iters
            .iter()
            .map(|it| it[i].bytes[p] - if i == 0 { 0 } else { it[i - 1].bytes[p] })
            .sum()
    };
    let share = |i: usize| {
        let (a, b) = (delta(i, 0) as f64, delta(i, 1) as f64);
        a / (a + b)
    };
    let slowest = |i: usize| iters.iter().map(|it| it[i].s).fold(0.0, f64::max);
    let w0 = |i: usize| iters.iter().map(|it| it[i].w0).sum::<f64>() / WORLD as f64;
    let h = HALVE_AFTER as usize;
    // Before: from the second iteration (the first measures the paths).
    let before: Vec<usize> = (1..=h).collect();
    let after: Vec<usize> = (h + 1 + SETTLE..ITERS).collect();
    let mean = |v: &[usize], f: &dyn Fn(usize) -> f64| {
        v.iter().map(|&i| f(i)).sum::<f64>() / v.len() as f64
    };
    // Bytes one rank stripes per iteration (the same before and after).
    let per_rank = (delta(ITERS - 1, 0) + delta(ITERS - 1, 1)) as f64 / WORLD as f64;
    let opt = |paths: &[(f64, f64)]| {
        let s = fluid_split(paths, per_rank);
        (s.bytes[0] / (s.bytes[0] + s.bytes[1]), s.time_s)
    };
    let (share_before_opt, t_before_opt) = opt(&BEFORE);
    let (share_after_opt, t_after_opt) = opt(&AFTER);
    for i in 0..ITERS {
        eprintln!(
            "iteration {i}: path 0 share {:.3}, weight {:.3}, slowest {:.3} s",
            share(i),
            w0(i),
            slowest(i)
        );
    }
    let (sb, sa) = (mean(&before, &share), mean(&after, &share));
    let (wb, wa) = (mean(&before, &w0), mean(&after, &w0));
    let (t0, t1) = (mean(&before, &slowest), mean(&after, &slowest));
    let opt_ratio = t_after_opt / t_before_opt;
    eprintln!(
        "share {sb:.3} → {sa:.3} (optimum {share_before_opt:.3} → {share_after_opt:.3}); \
         weight {wb:.3} → {wa:.3}; time {t0:.3} → {t1:.3} s (ratio {:.3}, optimum's {opt_ratio:.3})",
        t1 / t0
    );
    // Shares move in whole 1 MiB chunks, about 1/20 of what a rank stripes
    // per iteration, and one iteration's share varies by ±0.1 even on an
    // idle host: the mean over the iterations before the change (5) and over
    // those from SETTLE after it (5), each within ±0.08 of its optimum. The
    // two bands stay apart (0.677 − 0.08 > 0.507 + 0.08), so a split that
    // did not move fails one of them. With 3 iterations and ±0.06, 1 run in
    // 5 missed the first band (share ~0.6) on an idle host.
    const SHARE_TOL: f64 = 0.08;
    assert!(
        (sb - share_before_opt).abs() <= SHARE_TOL,
        "before the change path 0 carried {sb:.3} of the bytes, the optimum {share_before_opt:.3}"
    );
    assert!(
        (sa - share_after_opt).abs() <= SHARE_TOL,
        "from {SETTLE} iterations after the change path 0 carried {sa:.3} of the bytes, \
         the new optimum {share_after_opt:.3}"
    );
    // The time follows the new optimum: the slowdown is at most the
    // optimum's own (its WAN part grows by that ratio; the intra-domain
    // phases and the reduction do not grow) plus 25 %: on a loaded 2-core
    // host one iteration's time varies by up to ±15 % before the change.
    assert!(
        t1 / t0 <= opt_ratio * 1.25,
        "after the change the allreduce took {t1:.3} s, {:.3}× the {t0:.3} s before; \
         the optimum's ratio is {opt_ratio:.3}",
        t1 / t0
    );
}
