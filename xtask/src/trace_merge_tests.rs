use super::*;

/// A rank file as the library writes it: `events` are (name, peer, start, end)
/// chunk spans of op 0, lane 0, step 0 at `offset`; `peers` are
/// (rank, offset, bound).
fn file(
    rank: u64,
    events: &[(&str, u64, u64, u64, u64)],
    peers: &[(u64, f64, Option<f64>)],
) -> RankTrace {
    let evs: Vec<Value> = events
        .iter()
        .map(|(name, peer, offset, a, b)| {
            json!({"name": name, "cat": "chunk", "ph": "X", "pid": rank, "tid": 1 + peer,
                   "ts": *a as f64 / 1e3, "dur": (b - a) as f64 / 1e3,
                   "args": {"op": 0, "peer": peer, "lane": 0, "step": 0, "offset": offset,
                            "bytes": 64, "start_ns": a, "end_ns": b}})
        })
        .collect();
    let ps: Vec<Value> = peers
        .iter()
        .map(|(q, o, b)| json!({"rank": q, "offset_ns": o, "bound_ns": b, "source": "kernel"}))
        .collect();
    let text = json!({"traceEvents": evs, "metadata": {"causeway_trace": 1, "rank": rank,
                      "world": 2, "anchor_error_ns": 10, "peers": ps}})
    .to_string();
    parse_rank(&text).expect("parses")
}

const MS: u64 = 1_000_000;

#[test]
fn a_rank_behind_by_5_ms_is_moved_by_its_estimate_of_rank_0() {
    // Rank 1's clock reads 5 ms less than rank 0's: clock₀ − clock₁ = +5 ms.
    // Rank 0 sends at 100 ms (its clock); rank 1 has it 2 ms later, at
    // 97 ms on its own clock.
    let r0 = file(0, &[("send", 1, 0, 100 * MS, 100 * MS + 500)], &[]);
    let r1 = file(
        1,
        &[("recv", 0, 0, 97 * MS, 97 * MS + 300)],
        &[(0, 5e6, Some(1000.0))],
    );
    let (merged, c) = merge(&[r0.clone(), r1.clone()], None);
    assert_eq!(
        (c.matched, c.checked, c.violations.len()),
        (1, 1, 0),
        "{c:?}"
    );
    // Slack: 102 ms + bound (1000 + anchors 10 + 10) − 100 ms.
    assert_eq!(c.min_slack_ns, Some(2e6 + 1020.0));
    let ranks = &merged["metadata"]["ranks"];
    assert_eq!(ranks[1]["offset_ns"], 5e6);
    assert_eq!(ranks[1]["bound_ns"], 1020.0);
    // The receipt now sits at 102 ms on rank 0's clock, 2 ms after the send.
    let recv = merged["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["name"] == "recv")
        .expect("recv")
        .clone();
    assert_eq!(recv["args"]["start_ns"], 102e6);
    assert_eq!(recv["ts"], 2000.0);
    // Flow arrows link the two.
    let flows = merged["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["cat"] == "flow")
        .count();
    assert_eq!(flows, 2);

    // Without the estimate the same run breaks causality by 3 ms.
    let r1_blind = file(1, &[("recv", 0, 0, 97 * MS, 97 * MS + 300)], &[]);
    let (_, c) = merge(&[r0.clone(), r1_blind.clone()], None);
    assert_eq!(
        (c.matched, c.checked),
        (1, 0),
        "unknown bounds are not checked"
    );
    let (_, c) = merge(&[r0, r1_blind], Some(0.0));
    assert_eq!(c.violations.len(), 1, "{c:?}");
    assert_eq!(c.violations[0].1, 3e6 - 20.0);
}

#[test]
fn rank_0s_estimate_is_used_negated_and_a_tight_bound_is_a_violation() {
    // Rank 0 says clock₁ − clock₀ = −5 ms (so rank 1 moves by +5 ms).
    let r0 = file(
        0,
        &[("send", 1, 0, 100 * MS, 100 * MS + 10)],
        &[(1, -5e6, Some(0.0))],
    );
    // Rank 1's own note on rank 0 has no bound: rank 0's estimate wins.
    let r1 = file(
        1,
        &[("recv", 0, 0, 95 * MS - 100, 95 * MS + 50)],
        &[(0, 0.0, None)],
    );
    let s = shifts(&[r0.clone(), r1.clone()], None);
    assert_eq!(s[1].offset_ns, 5e6);
    assert!(s[1].how.contains("rank 0's estimate"), "{}", s[1].how);
    // The receipt starts 100 ns before the send: only the anchors' 20 ns cover it.
    let (_, c) = merge(&[r0, r1], None);
    assert_eq!(c.violations.len(), 1, "{c:?}");
    assert_eq!(c.violations[0].1, 80.0);
}

#[test]
fn unmatched_chunks_are_counted_and_bad_files_refused() {
    let r0 = file(0, &[("send", 1, 0, 10, 20), ("send", 1, 64, 30, 40)], &[]);
    let r1 = file(
        1,
        &[("recv", 0, 0, 25, 26), ("recv", 0, 128, 50, 60)],
        &[(0, 0.0, Some(0.0))],
    );
    let (_, c) = merge(&[r0, r1], None);
    assert_eq!((c.matched, c.unmatched_sends, c.unmatched_recvs), (1, 1, 1));
    assert!(parse_rank("{}").is_err());
    assert!(parse_rank("not json").is_err());
}
