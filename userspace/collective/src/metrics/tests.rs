use std::sync::Arc;
use std::time::Duration;

use super::*;

#[test]
fn sizes_and_latencies_fall_in_their_buckets() {
    assert_eq!(size_index(0), 0);
    assert_eq!(size_index(4 << 10), 0);
    assert_eq!(size_index((4 << 10) + 1), 1);
    assert_eq!(size_index(1 << 20), 2);
    assert_eq!(size_index(1 << 30), 5);
    assert_eq!(latency_index(Duration::from_micros(10)), 0);
    assert_eq!(latency_index(Duration::from_micros(11)), 1);
    assert_eq!(latency_index(Duration::from_millis(10)), 5);
    assert_eq!(
        latency_index(Duration::from_secs(100)),
        LATENCY_BOUNDS.len()
    );
    assert_eq!(SIZE_LABELS.len(), SIZE_BOUNDS.len() + 1);
}

#[test]
fn the_text_has_histograms_bytes_and_errors_per_rank() {
    let m = Arc::new(RankMetrics::new(3, 1));
    m.op_done(OpKind::Allreduce, 1 << 20, Duration::from_millis(3));
    m.op_done(OpKind::Allreduce, 1 << 20, Duration::from_millis(30));
    m.op_done(OpKind::Barrier, 2, Duration::from_micros(5));
    m.sent(LinkClass::InterDomain, 1000);
    m.sent(LinkClass::InterDomain, 24);
    m.received(LinkClass::IntraHost, 7);
    m.op_failed(OpKind::Broadcast { root: 0 }, &CollectiveError::Closed);
    assert_eq!(m.op_count(OpKind::Allreduce), 2);
    assert_eq!(m.link_bytes(LinkClass::InterDomain), (1024, 0));
    let other = Arc::new(RankMetrics::new(4, 1));
    let text = encode_text(&[m, other]);
    let has = |line: &str| {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    };
    let ar = "rank=\"3\",epoch=\"1\",op=\"allreduce\",size_bucket=\"64KiB-1MiB\"";
    has("# TYPE causeway_op_duration_seconds histogram");
    has("# UNIT causeway_op_duration_seconds seconds");
    has(&format!("causeway_op_duration_seconds_count{{{ar}}} 2"));
    has(&format!("causeway_op_duration_seconds_sum{{{ar}}} 0.033"));
    // Cumulative: 3 ms is under 10.24 ms, 30 ms under 40.96 ms.
    has(&format!(
        "causeway_op_duration_seconds_bucket{{le=\"0.00256\",{ar}}} 0"
    ));
    has(&format!(
        "causeway_op_duration_seconds_bucket{{le=\"0.01024\",{ar}}} 1"
    ));
    has(&format!(
        "causeway_op_duration_seconds_bucket{{le=\"+Inf\",{ar}}} 2"
    ));
    has("causeway_link_sent_bytes_total{rank=\"3\",epoch=\"1\",link=\"wan\"} 1024");
    has("causeway_link_received_bytes_total{rank=\"3\",epoch=\"1\",link=\"host\"} 7");
    has("causeway_link_sent_bytes_total{rank=\"4\",epoch=\"1\",link=\"wan\"} 0");
    has("causeway_op_errors_total{rank=\"3\",epoch=\"1\",op=\"broadcast\",kind=\"closed\"} 1");
    // Sizes never used have no series.
    assert!(!text.contains("size_bucket=\"256MiB+\""), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
}
