use std::time::{Duration, Instant};

use super::*;

#[test]
fn spans_become_chrome_events_on_the_local_clock() {
    let dir = std::env::temp_dir().join(format!("cw-trace-unit-{}", std::process::id()));
    let t = Tracer::new(2, &dir);
    let t0 = t.anchor + Duration::from_micros(5);
    // Instants map onto the clock by the anchor, both ways.
    assert_eq!(t.ns(t0), t.anchor_ns + 5_000);
    assert_eq!(t.ns(t.anchor - Duration::from_nanos(7)), t.anchor_ns - 7);
    let chunk = Chunk {
        seq: 3,
        peer: 1,
        lane: 0,
        step: 2,
        offset: 4096,
        bytes: 512,
    };
    t.record(SpanKind::Send(chunk), t0, t0 + Duration::from_micros(2));
    let op = SpanKind::Op {
        name: "allreduce",
        seq: 3,
        bytes: 1 << 20,
        ok: true,
    };
    t.record(op, t0, t0 + Duration::from_micros(9));
    let notes = [PeerClockNote {
        rank: 1,
        offset_ns: -250.0,
        bound_ns: None,
        source: "none",
    }];
    let path = t.write(0, 3, &notes).expect("write");
    assert_eq!(path, dir.join("rank-2.json"));
    let text = std::fs::read_to_string(&path).expect("read");
    let _ = std::fs::remove_dir_all(&dir);
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let ev = v["traceEvents"].as_array().expect("events");
    assert_eq!(ev.len(), 3, "{text}");
    let send = &ev[1];
    assert_eq!(send["ph"], "X");
    assert_eq!(send["name"], "send");
    assert_eq!(send["tid"], 2);
    assert_eq!(send["args"]["offset"], 4096);
    assert_eq!(send["args"]["start_ns"], t.anchor_ns + 5_000);
    assert_eq!(send["args"]["end_ns"], t.anchor_ns + 7_000);
    assert_eq!(send["dur"].as_f64(), Some(2.0));
    assert_eq!(ev[2]["name"], "allreduce");
    assert_eq!(ev[2]["tid"], 0);
    let m = &v["metadata"];
    assert_eq!(m["rank"], 2);
    assert_eq!(m["world"], 3);
    assert_eq!(m["peers"][0]["bound_ns"], serde_json::Value::Null);
    assert_eq!(m["peers"][0]["offset_ns"].as_f64(), Some(-250.0));
    assert_eq!(m["dropped_spans"], 0);
    let _ = Instant::now();
}

#[test]
fn the_same_host_is_one_clock_and_others_are_unknown_without_an_agent() {
    let topo = crate::topology::Topology::from_labels(&[("a", "h"), ("a", "h"), ("b", "g")]);
    let addrs: Vec<std::net::SocketAddr> = (0..3)
        .map(|i| format!("127.0.0.{}:1", i + 1).parse().expect("addr"))
        .collect();
    let notes = clock_notes(&topo, 0, &addrs, None, 0);
    assert_eq!(notes.len(), 2);
    assert_eq!((notes[0].rank, notes[0].bound_ns), (1, Some(0.0)));
    assert_eq!(notes[0].source, "same_host");
    assert_eq!((notes[1].rank, notes[1].bound_ns), (2, None));
    // A map that cannot be opened leaves the bound unknown too.
    let missing = std::path::Path::new("/nonexistent/CW_CLK_PEERS");
    let notes = clock_notes(&topo, 0, &addrs, Some(missing), 0);
    assert_eq!((notes[1].source, notes[1].bound_ns), ("none", None));
}
