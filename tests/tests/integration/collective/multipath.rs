//! Striping over the `dual` testbed's two WAN paths (`CAUSEWAY_WAN_PATHS`),
//! and failover: four ranks (2 domains × 2 hosts) run a sequence of checked
//! 16 MiB allreduces; path 1 is cut in the middle. Every result must be
//! right (the worker checks each element), the path must be declared down
//! and its unacknowledged chunks resent on path 0, and the hit allreduce may
//! take at most 1 s + the resent bytes' time on path 0 longer than before.

use causeway_test_support::require_root;
use std::time::{Duration, Instant};

use causeway_netsim::{Profile, Testbed};
use causeway_tests::netsim_support;

use super::testbed::{collective_binary, next, start_with, World};

/// Four ranks on `tb` (the `dual` testbed), each listing its address on both
/// paths in `CAUSEWAY_WAN_PATHS`, running `iters` checked 16 MiB allreduces
/// (the release worker: the tests compare times, which a debug build's
/// reduction, seconds per 16 MiB on a loaded host, would swamp).
pub(super) fn start_striped(tb: &Testbed, port: u16, iters: usize) -> World {
    let bin = collective_binary("causeway-collective-worker", true);
    let iters = iters.to_string();
    let args = ["--elems", "4194304", "--iters", &iters];
    start_with(tb, &bin, port, &args, |_, host| {
        vec![
            "CAUSEWAY_TIMEOUT=20s".to_string(),
            format!(
                "CAUSEWAY_WAN_PATHS={},{}",
                host.ip_via(0).expect("path 0"),
                host.ip_via(1).expect("path 1")
            ),
        ]
    })
}

const WORLD: usize = 4;
const ITERS: usize = 8;
/// Rank 0's iteration after which path 1 is cut.
const CUT_AFTER: u64 = 2;

#[test]
fn a_cut_path_is_failed_over_and_every_allreduce_is_right() {
    require_root!("a_cut_path_is_failed_over_and_every_allreduce_is_right");
    let tb = netsim_support::testbed(2, 2, Profile::Dual);
    let w = start_striped(&tb, 29640, ITERS);
    let deadline = Instant::now() + Duration::from_secs(180);
    // Per rank, per iteration: (seconds, resent bytes so far, paths declared down so far).
    let mut iters: Vec<Vec<(f64, u64, u64)>> = vec![Vec::new(); WORLD];
    let mut done = [false; WORLD];
    let mut cut_at = None;
    while !done.iter().all(|d| *d) {
        let (r, v) = next(&w, deadline);
        match v["event"].as_str() {
            Some("ready") => assert_eq!(v["algorithm"], "Hierarchical", "rank {r}: {v}"),
            Some("iter") => {
                let s = v["s"].as_f64().unwrap_or(f64::NAN);
                eprintln!(
                    "rank {r} iteration {} took {s:.3} s ({})",
                    v["iter"], v["stripe"]
                );
                iters[r].push((
                    s,
                    v["resent_bytes"].as_u64().unwrap_or(0),
                    v["path_down"].as_u64().unwrap_or(0),
                ));
                if r == 0 && v["iter"].as_u64() == Some(CUT_AFTER) && cut_at.is_none() {
                    tb.cut_path(1).expect("cut path 1");
                    cut_at = Some(Instant::now());
                    eprintln!("path 1 cut");
                }
            }
            Some("done") => done[r] = true,
            _ => panic!("rank {r}: {v}"),
        }
    }
    w.finish("");
    assert!(cut_at.is_some(), "the cut happened");
    for (r, it) in iters.iter().enumerate() {
        assert_eq!(it.len(), ITERS, "rank {r}: every allreduce completed");
    }
    // The path was declared down on some rank, and chunks were sent again.
    let downs: u64 = iters.iter().map(|it| it.last().map_or(0, |x| x.2)).sum();
    let resent: u64 = iters.iter().map(|it| it.last().map_or(0, |x| x.1)).sum();
    assert!(downs >= 1, "no rank declared path 1 down: {iters:?}");
    // The slowest rank's time per iteration, before and at the cut.
    let slowest = |i: usize| iters.iter().map(|it| it[i].0).fold(0.0, f64::max);
    let before = (1..=CUT_AFTER as usize).map(slowest).fold(0.0, f64::max);
    let hit = ((CUT_AFTER as usize + 1)..ITERS.min(CUT_AFTER as usize + 3))
        .map(slowest)
        .fold(0.0, f64::max);
    // Resent bytes cross path 0 (200 Mbit/s), both domains' ranks at once.
    let resend_s = resent as f64 * 8.0 / 200e6;
    eprintln!(
        "before the cut: {before:.3} s; hit: {hit:.3} s; resent {resent} bytes ({resend_s:.3} s on path 0); path-down events {downs}"
    );
    assert!(
        hit <= before + 1.0 + resend_s,
        "the hit allreduce took {hit:.3} s, more than {before:.3} + 1 + {resend_s:.3} s"
    );
}
