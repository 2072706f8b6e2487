//! A rank that stops (SIGSTOP: alive, connections open, silent) mid-stream:
//! every survivor must name *it* — not a healthy rank that waits on it — with
//! how that was decided, within the timeout + 2 s. Four worker processes in two
//! domains (even/odd ranks) on loopback.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::procs::{spawn_world, wait_for_iterations};

const TIMEOUT: Duration = Duration::from_secs(3);

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

/// Stops `victim` once every rank has completed an allreduce (forced to
/// `algo`), then checks what each survivor reports.
fn stopped_rank_is_named(victim: usize, algo: &str) {
    let n = 4;
    let ms = format!("{}ms", TIMEOUT.as_millis());
    let (ranks, rx) = spawn_world(
        n,
        &[("CAUSEWAY_TIMEOUT", &ms), ("CAUSEWAY_ALGO", algo)],
        &["--elems", "2000000", "--iters", "100000"],
    );
    wait_for_iterations(&rx, n, 1);
    let pid = ranks.0[victim].id();
    signal(pid, "-STOP");
    let stopped_at = Instant::now();
    let mut errors = vec![None; n];
    let budget = TIMEOUT + Duration::from_secs(2);
    while errors
        .iter()
        .enumerate()
        .any(|(r, e)| r != victim && e.is_none())
    {
        let left = (budget + Duration::from_secs(10)).saturating_sub(stopped_at.elapsed());
        let Ok((r, v)) = rx.recv_timeout(left) else {
            break;
        };
        if v["event"] == "error" && errors[r].is_none() {
            errors[r] = Some((v, stopped_at.elapsed()));
        }
    }
    signal(pid, "-CONT");
    drop(ranks); // kills every rank
    let mut report = String::new();
    for (r, e) in errors.iter().enumerate().filter(|(r, _)| *r != victim) {
        match e {
            Some((v, after)) => report += &format!("\n  rank {r} after {after:.2?}: {v}"),
            None => report += &format!("\n  rank {r}: no error"),
        }
    }
    eprintln!("{algo}, rank {victim} stopped:{report}");
    for (r, e) in errors.iter().enumerate().filter(|(r, _)| *r != victim) {
        let (v, after) = e
            .as_ref()
            .unwrap_or_else(|| panic!("rank {r} reported no error:{report}"));
        assert_eq!(
            v["peer"], victim,
            "rank {r} names the stopped rank:{report}"
        );
        let text = v["error"].as_str().unwrap_or_default();
        assert!(
            text.contains("timeout on a direct link") || text.contains("reported by rank"),
            "rank {r} says how it was decided:{report}"
        );
        assert!(*after <= budget, "rank {r} took {after:?}:{report}");
    }
}

// With two ranks per domain every rank faces the WAN in the hierarchical
// plan (domain ring, then an exchange with its counterpart); in the ring
// (order 0 2 1 3) ranks 0 and 1 receive across the WAN, 2 and 3 inside
// their domain, and two survivors wait on the stopped rank only through others.

#[test]
fn stopped_rank_is_named_hierarchical_rank_0() {
    stopped_rank_is_named(0, "hier");
}

#[test]
fn stopped_rank_is_named_hierarchical_rank_3() {
    stopped_rank_is_named(3, "hier");
}

#[test]
fn stopped_wan_receiving_rank_is_named_ring() {
    stopped_rank_is_named(1, "ring");
}

#[test]
fn stopped_domain_internal_rank_is_named_ring() {
    stopped_rank_is_named(2, "ring");
}
