//! `CAUSEWAY_TRACE` on a running world, merged by `cargo xtask trace`'s
//! merge (`xtask/src/trace_merge.rs`, compiled in here): four ranks in two
//! domains (threads of this process, TCP over loopback) write their files
//! when dropped; on the merged timeline every chunk sent was received, and
//! no receipt starts before its send. All ranks share this machine's clock,
//! so there is no agent estimate (each file says so: bound unknown) and the
//! merge is told to assume a bound of 0: what remains is the ranks' anchor
//! errors (the time one clock read takes), a few µs at most. A netns run
//! with the agent's estimates is not here (see the report of issue 18).

use causeway_collective::{Algorithm, Options, ReduceOp};

use crate::world::{run_world, test_options};

#[path = "../../../../xtask/src/trace_merge.rs"]
mod trace_merge;

#[test]
fn every_chunk_on_the_merged_timeline_arrives_after_it_was_sent() {
    let dir = std::env::temp_dir().join(format!("cw-trace-world-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let layout: Vec<(String, String)> = (0..4)
        .map(|r| (format!("d{}", r / 2), format!("h{r}")))
        .collect();
    let opts = Options {
        algorithm: Some(Algorithm::Ring),
        chunk_bytes: 16 << 10,
        trace_dir: Some(dir.clone()),
        ..test_options()
    };
    run_world(&layout, &opts, |c| {
        let mut v = vec![1.0f32; 1 << 16];
        for _ in 0..3 {
            c.allreduce(&mut v, ReduceOp::Sum).expect("allreduce");
        }
        c.broadcast(&mut v, 2).expect("broadcast");
    });
    let ranks = trace_merge::read_ranks(&dir).expect("the rank files");
    let seen: Vec<u64> = ranks.iter().map(|r| r.rank).collect();
    assert_eq!(seen, [0, 1, 2, 3], "one file per rank");
    let _ = std::fs::remove_dir_all(&dir);
    for r in &ranks {
        let ops = r.events.iter().filter(|e| e["cat"] == "op").count();
        assert_eq!(ops, 4, "rank {}: 3 allreduces and a broadcast", r.rank);
        assert_eq!(r.peers.len(), 3);
        assert!(r
            .peers
            .values()
            .all(|(o, b, s)| *o == 0.0 && b.is_none() && s == "none"));
        assert!(r.anchor_error_ns < 1e6, "{}", r.anchor_error_ns);
    }
    let sends: usize = ranks
        .iter()
        .map(|r| r.events.iter().filter(|e| e["name"] == "send").count())
        .sum();
    assert!(sends > 4 * 3 * 6, "{sends} sends");
    let (_, unchecked) = trace_merge::merge(&ranks, None);
    assert_eq!(unchecked.checked, 0, "unknown bounds are not checked");
    let (merged, c) = trace_merge::merge(&ranks, Some(0.0));
    assert_eq!(c.matched, sends, "{c:?}");
    assert_eq!((c.unmatched_sends, c.unmatched_recvs), (0, 0), "{c:?}");
    assert_eq!(c.checked, sends);
    assert!(
        c.violations.is_empty(),
        "{:?}",
        &c.violations[..c.violations.len().min(5)]
    );
    assert_eq!(merged["metadata"]["causality"]["violations"], 0);
    eprintln!(
        "trace: {sends} chunks, smallest slack {:.1} µs",
        c.min_slack_ns.unwrap_or(f64::NAN) / 1e3
    );
}
