//! WAN codec work against transfer, from a merged trace
//! ([`crate::trace_merge::merge`]): per rank and operation, how long the
//! engine spent encoding and decoding WAN chunks (`encode` / `decode` spans),
//! and how much of the encoding ran while an earlier chunk of that rank was
//! still on its way (queued before the encode began, not yet read by the
//! peer): the pipelining of encoding with transfer. Pure: events in, numbers out.

use std::collections::HashMap;

use serde_json::Value;

/// One rank's codec work in one operation, ms.
#[derive(Debug, Clone, PartialEq)]
pub struct CodecUse {
    pub rank: u64,
    pub op: u64,
    pub op_ms: f64,
    pub chunks: usize,
    pub encode_ms: f64,
    /// Encoding time during which an earlier chunk was in flight.
    pub overlapped_ms: f64,
    pub decode_ms: f64,
}

type Key = [u64; 6];

fn field(e: &Value, k: &str) -> Option<u64> {
    e["args"][k].as_u64()
}

fn span(e: &Value) -> Option<(f64, f64)> {
    let t = |k: &str| e["args"][k].as_i64().map(|v| v as f64);
    Some((t("start_ns")?, t("end_ns")?))
}

/// (rank, peer, op, lane, step, offset) of a chunk event on rank `pid`.
fn key(e: &Value) -> Option<Key> {
    Some([
        e["pid"].as_u64()?,
        field(e, "peer")?,
        field(e, "op")?,
        field(e, "lane")?,
        field(e, "step")?,
        field(e, "offset")?,
    ])
}

/// Every (rank, op) with encode spans, in order.
pub fn codec_use(events: &[Value]) -> Vec<CodecUse> {
    let by = |name: &str| -> HashMap<Key, (f64, f64)> {
        events
            .iter()
            .filter(|e| e["name"] == name)
            .filter_map(|e| Some((key(e)?, span(e)?)))
            .collect()
    };
    let (encodes, decodes, sends, recvs) = (by("encode"), by("decode"), by("send"), by("recv"));
    let mut out: Vec<CodecUse> = Vec::new();
    let mut ops: Vec<(u64, u64)> = encodes.keys().map(|k| (k[0], k[2])).collect();
    ops.sort_unstable();
    ops.dedup();
    for (rank, op) in ops {
        let mine = |m: &HashMap<Key, (f64, f64)>| -> Vec<(Key, (f64, f64))> {
            let mut v: Vec<_> = m
                .iter()
                .filter(|(k, _)| k[0] == rank && k[2] == op)
                .map(|(k, s)| (*k, *s))
                .collect();
            v.sort_by(|a, b| a.1 .0.total_cmp(&b.1 .0));
            v
        };
        let enc = mine(&encodes);
        // In flight: from the engine queuing the frame to the peer reading it.
        let flights: Vec<(f64, f64)> = enc
            .iter()
            .filter_map(|(k, _)| {
                let (s, _) = sends.get(k)?;
                let (r, _) = recvs.get(&[k[1], k[0], k[2], k[3], k[4], k[5]])?;
                Some((*s, *r))
            })
            .collect();
        let overlapped = enc
            .iter()
            .map(|(_, (a, b))| {
                let until = flights
                    .iter()
                    .filter(|(s, _)| s < a)
                    .map(|(_, r)| *r)
                    .fold(f64::MIN, f64::max);
                (until.min(*b) - a).max(0.0)
            })
            .sum::<f64>();
        let total = |v: &[(Key, (f64, f64))]| v.iter().map(|(_, (a, b))| b - a).sum::<f64>() / 1e6;
        let op_ms = events
            .iter()
            .filter(|e| e["cat"] == "op" && e["pid"].as_u64() == Some(rank))
            .filter(|e| field(e, "op") == Some(op))
            .find_map(span)
            .map_or(f64::NAN, |(a, b)| (b - a) / 1e6);
        out.push(CodecUse {
            rank,
            op,
            op_ms,
            chunks: enc.len(),
            encode_ms: total(&enc),
            overlapped_ms: overlapped / 1e6,
            decode_ms: total(&mine(&decodes)),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ev(name: &str, pid: u64, peer: u64, offset: u64, a: i64, b: i64) -> Value {
        json!({"name": name, "pid": pid, "args": {"op": 3, "peer": peer, "lane": 0, "step": 1,
            "offset": offset, "start_ns": a, "end_ns": b}})
    }

    #[test]
    fn encoding_counts_as_overlapped_while_an_earlier_chunk_is_in_flight() {
        const MS: i64 = 1_000_000;
        let events = vec![
            json!({"name": "allreduce", "cat": "op", "pid": 0, "args": {"op": 3, "start_ns": 0, "end_ns": 100 * MS}}),
            // Chunk 0: encoded 0–2 ms, queued at 2, read by rank 2 at 30.
            ev("encode", 0, 2, 0, 0, 2 * MS),
            ev("send", 0, 2, 0, 2 * MS, 3 * MS),
            ev("recv", 2, 0, 0, 30 * MS, 31 * MS),
            // Chunk 1: encoded 2–5 ms while chunk 0 is in flight.
            ev("encode", 0, 2, 8, 2 * MS + 1, 5 * MS),
            ev("send", 0, 2, 8, 5 * MS, 6 * MS),
            ev("recv", 2, 0, 8, 40 * MS, 41 * MS),
            // Chunk 2: encoded 45–46 ms, after both arrived.
            ev("encode", 0, 2, 16, 45 * MS, 46 * MS),
            ev("decode", 0, 2, 0, 50 * MS, 51 * MS),
        ];
        let u = codec_use(&events);
        assert_eq!(u.len(), 1);
        let u = &u[0];
        assert_eq!((u.rank, u.op, u.chunks), (0, 3, 3));
        assert!((u.op_ms - 100.0).abs() < 1e-9);
        assert!((u.encode_ms - 6.0).abs() < 1e-5, "{u:?}");
        assert!((u.overlapped_ms - 3.0).abs() < 1e-5, "{u:?}");
        assert!((u.decode_ms - 1.0).abs() < 1e-9);
    }
}
