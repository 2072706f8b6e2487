//! Merges the ranks' `CAUSEWAY_TRACE` files (`causeway_collective::trace`)
//! onto one time base, rank 0's clock, and checks causality on the result.
//! Pure but for [`read_ranks`] (which reads a trace directory): text in,
//! text and numbers out (also compiled into the collective library's and
//! the netns trace tests, so it depends on `serde_json` and std only).
//!
//! Rank r's times move by its clock's offset from rank 0's: r's own estimate
//! of rank 0 (offset = clock₀ − clock_r) when it has one, else rank 0's
//! estimate of r negated, else 0 with the bound unknown (or the caller's
//! assumption). Each rank's bound adds both ranks' anchor errors.
//!
//! Causality: every chunk rank a sent to b and b received (matched by
//! operation, lane, step and offset) must arrive after it left:
//! send start ≤ receive start + bound_a + bound_b (stronger than ≤ receive
//! end, which follows). A pair with an unknown bound is counted unchecked.

use std::collections::HashMap;

use serde_json::{json, Value};

/// One rank's file, parsed.
#[derive(Debug, Clone)]
pub struct RankTrace {
    pub rank: u64,
    pub anchor_error_ns: f64,
    /// Peer rank → (offset peer − this, bound; `None` unknown, source).
    pub peers: HashMap<u64, (f64, Option<f64>, String)>,
    pub events: Vec<Value>,
}

/// How a rank's times map onto rank 0's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Shift {
    pub rank: u64,
    /// Added to the rank's times, ns.
    pub offset_ns: f64,
    /// `None`: unknown.
    pub bound_ns: Option<f64>,
    pub how: String,
}

/// What the causality check found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Causality {
    /// Sent chunks matched with their receipt.
    pub matched: usize,
    /// Of those, checked with known bounds.
    pub checked: usize,
    /// (description, by how many ns the bound was exceeded).
    pub violations: Vec<(String, f64)>,
    /// Sends with no receipt in the files, and receipts with no send.
    pub unmatched_sends: usize,
    pub unmatched_recvs: usize,
    /// Smallest `receive start + bound − send start` over the checked pairs, ns.
    pub min_slack_ns: Option<f64>,
}

/// Every `rank-<r>.json` in `dir` (the first epoch's files), parsed and
/// sorted by rank; an error names the file. No file is an empty list.
pub fn read_ranks(dir: &std::path::Path) -> Result<Vec<RankTrace>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let mut ranks = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("reading {}: {e}", dir.display()))?
            .path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !(name.starts_with("rank-") && name.ends_with(".json")) {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        ranks.push(parse_rank(&text).map_err(|e| format!("parsing {}: {e}", path.display()))?);
    }
    ranks.sort_by_key(|r| r.rank);
    Ok(ranks)
}

pub fn parse_rank(text: &str) -> Result<RankTrace, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let m = &v["metadata"];
    if m["causeway_trace"] != 1 {
        return Err("not a causeway trace (metadata.causeway_trace != 1)".into());
    }
    let rank = m["rank"].as_u64().ok_or("metadata.rank missing")?;
    let mut peers = HashMap::new();
    for p in m["peers"].as_array().into_iter().flatten() {
        let q = p["rank"].as_u64().ok_or("a peer without a rank")?;
        let offset = p["offset_ns"].as_f64().unwrap_or(0.0);
        let source = p["source"].as_str().unwrap_or("none").to_string();
        peers.insert(q, (offset, p["bound_ns"].as_f64(), source));
    }
    Ok(RankTrace {
        rank,
        anchor_error_ns: m["anchor_error_ns"].as_f64().unwrap_or(0.0),
        peers,
        events: v["traceEvents"].as_array().cloned().unwrap_or_default(),
    })
}

/// The shift of every rank onto rank 0's clock; `assume_bound_ns` stands
/// in for unknown bounds when given (e.g. 0 when every rank ran on one host).
pub fn shifts(ranks: &[RankTrace], assume_bound_ns: Option<f64>) -> Vec<Shift> {
    let zero = ranks.iter().find(|r| r.rank == 0);
    let anchor0 = zero.map_or(0.0, |z| z.anchor_error_ns);
    ranks
        .iter()
        .map(|r| {
            let (offset, bound, how) = if r.rank == 0 {
                (0.0, Some(0.0), "reference".to_string())
            } else if let Some((o, b, s)) = r.peers.get(&0).filter(|p| p.1.is_some()) {
                (*o, *b, format!("own estimate of rank 0 ({s})"))
            } else if let Some((o, b, s)) = zero
                .and_then(|z| z.peers.get(&r.rank))
                .filter(|p| p.1.is_some())
            {
                (-*o, *b, format!("rank 0's estimate ({s})"))
            } else {
                (0.0, None, "no estimate".to_string())
            };
            let (bound, how) = match (bound, assume_bound_ns) {
                (None, Some(a)) => (Some(a), format!("{how}, bound assumed")),
                (b, _) => (b, how),
            };
            // Rank 0 is the time base itself: nothing to add.
            let anchors = if r.rank == 0 {
                0.0
            } else {
                r.anchor_error_ns + anchor0
            };
            Shift {
                rank: r.rank,
                offset_ns: offset,
                bound_ns: bound.map(|b| b + anchors),
                how,
            }
        })
        .collect()
}

/// An exact time of an event, ns (f64 would round CLOCK_TAI to 256 ns).
fn ns(e: &Value, key: &str) -> Option<i128> {
    let v = &e["args"][key];
    v.as_u64()
        .map(i128::from)
        .or_else(|| v.as_i64().map(i128::from))
}

/// The chunk key of a send/recv event on `pid` (sender, receiver, op, lane, step, offset).
fn chunk_key(e: &Value, pid: u64) -> Option<(String, [u64; 6])> {
    let a = &e["args"];
    let peer = a["peer"].as_u64()?;
    let name = e["name"].as_str()?.to_string();
    let (from, to) = match name.as_str() {
        "send" => (pid, peer),
        "recv" => (peer, pid),
        _ => return None,
    };
    let f = |k: &str| a[k].as_u64();
    Some((
        name,
        [from, to, f("op")?, f("lane")?, f("step")?, f("offset")?],
    ))
}

/// Rank files → one Chrome trace on rank 0's clock, plus the causality check.
pub fn merge(ranks: &[RankTrace], assume_bound_ns: Option<f64>) -> (Value, Causality) {
    let shifts = shifts(ranks, assume_bound_ns);
    let shift_of: HashMap<u64, &Shift> = shifts.iter().map(|s| (s.rank, s)).collect();
    let mut out = Vec::new();
    // (start, end) on rank 0's clock, per chunk key and side.
    // Relative to the earliest start (small, so f64 is exact to the ns).
    let mut sends: HashMap<[u64; 6], (f64, f64)> = HashMap::new();
    let mut recvs: HashMap<[u64; 6], (f64, f64)> = HashMap::new();
    let offset_of = |rank: u64| {
        shift_of
            .get(&rank)
            .map_or(0, |s| s.offset_ns.round() as i128)
    };
    let base = ranks
        .iter()
        .flat_map(|r| {
            let off = offset_of(r.rank);
            r.events
                .iter()
                .filter_map(move |e| ns(e, "start_ns").map(|t| t + off))
        })
        .min()
        .unwrap_or(0);
    for r in ranks {
        let off = offset_of(r.rank);
        for e in &r.events {
            let mut e = e.clone();
            if let (Some(a), Some(b)) = (ns(&e, "start_ns"), ns(&e, "end_ns")) {
                let (abs_a, abs_b) = (a + off, b + off);
                let (a, b) = ((abs_a - base) as f64, (abs_b - base) as f64);
                e["ts"] = json!(a / 1e3);
                e["dur"] = json!((b - a) / 1e3);
                e["args"]["start_ns"] = json!(i64::try_from(abs_a).ok());
                e["args"]["end_ns"] = json!(i64::try_from(abs_b).ok());
                if let Some((side, key)) = chunk_key(&e, r.rank) {
                    match side.as_str() {
                        "send" => sends.insert(key, (a, b)),
                        _ => recvs.insert(key, (a, b)),
                    };
                }
            }
            out.push(e);
        }
    }
    let mut c = Causality::default();
    let mut flow = 0u64;
    for (key, (s_start, _)) in &sends {
        let Some((r_start, r_end)) = recvs.get(key) else {
            c.unmatched_sends += 1;
            continue;
        };
        c.matched += 1;
        flow += 1;
        let [from, to, ..] = *key;
        out.push(json!({"name": "chunk", "cat": "flow", "ph": "s", "id": flow, "pid": from, "tid": 1 + to, "ts": s_start / 1e3}));
        out.push(json!({"name": "chunk", "cat": "flow", "ph": "f", "bp": "e", "id": flow, "pid": to, "tid": 1 + from, "ts": r_end / 1e3}));
        let bound = match (shift_of.get(&from), shift_of.get(&to)) {
            (Some(a), Some(b)) => a.bound_ns.zip(b.bound_ns).map(|(x, y)| x + y),
            _ => None,
        };
        let Some(bound) = bound else { continue };
        c.checked += 1;
        let slack = r_start + bound - s_start;
        c.min_slack_ns = Some(c.min_slack_ns.map_or(slack, |m: f64| m.min(slack)));
        if slack < 0.0 {
            c.violations.push((
                format!(
                    "op {} lane {} step {} offset {}: rank {from} → rank {to}",
                    key[2], key[3], key[4], key[5]
                ),
                -slack,
            ));
        }
    }
    c.unmatched_recvs = recvs.keys().filter(|k| !sends.contains_key(*k)).count();
    let meta: Vec<Value> = shifts
        .iter()
        .map(|s| json!({"rank": s.rank, "offset_ns": s.offset_ns, "bound_ns": s.bound_ns, "how": s.how}))
        .collect();
    let merged = json!({
        "traceEvents": out,
        "displayTimeUnit": "ns",
        "metadata": {
            "time_base": "rank 0's clock",
            "time_base_ns": i64::try_from(base).ok(),
            "ranks": meta,
            "causality": {
                "matched": c.matched,
                "checked": c.checked,
                "violations": c.violations.len(),
                "min_slack_ns": c.min_slack_ns,
            },
        },
    });
    (merged, c)
}

#[cfg(test)]
#[path = "trace_merge_tests.rs"]
mod tests;
