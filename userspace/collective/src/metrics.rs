//! Per-rank Prometheus metrics (`CAUSEWAY_METRICS_ADDR`, served by
//! [`crate::metrics_http`]): recorded by the engine thread with relaxed
//! atomics (no lock on the data path), encoded at each scrape in the
//! OpenMetrics text format (`prometheus-client`), base units in the names.
//!
//! | metric | labels |
//! |---|---|
//! | `causeway_op_duration_seconds` (histogram) | `rank`, `epoch`, `op`, `size_bucket` |
//! | `causeway_link_sent_bytes_total`, `causeway_link_received_bytes_total` | `rank`, `epoch`, `link` (`host`: same host, shared memory or loopback; `domain`: same domain; `wan`: across domains) |
//! | `causeway_op_errors_total` | `rank`, `epoch`, `op`, `kind` |
//! | `causeway_wan_copies_dropped_total` | `rank`, `epoch`: second copies of frames sent twice (small transfers across domains, `CAUSEWAY_WAN_DUPLICATE_BYTES`) dropped on arrival |
//!
//! An operation's duration is the time the engine ran it (from its start
//! to its result; the wait behind earlier operations is not included). Its
//! size is the working buffer's bytes (for allgather the gathered buffer).
//! Bytes are data-frame payloads as written to and read from the
//! connections (after a codec across domains), start-up probes included; a
//! frame sent twice counts once, its dropped copy in
//! `causeway_wan_copies_dropped_total`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use crate::error::CollectiveError;
use crate::schedule::OpKind;
use crate::topology::LinkClass;

/// The `op` label values, indexed by [`op_index`].
pub const OPS: [&str; 5] = [
    "allreduce",
    "broadcast",
    "allgather",
    "reduce_scatter",
    "barrier",
];
/// Upper bounds (bytes, inclusive) of the size buckets but the last.
pub const SIZE_BOUNDS: [u64; 5] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20];
/// The `size_bucket` label values: one per bound, then the rest.
pub const SIZE_LABELS: [&str; 6] = [
    "0-4KiB",
    "4KiB-64KiB",
    "64KiB-1MiB",
    "1MiB-16MiB",
    "16MiB-256MiB",
    "256MiB+",
];
/// Latency bucket bounds, seconds: 10 µs × 4ᵏ, up to about 42 s (then +Inf).
pub const LATENCY_BOUNDS: [f64; 12] = [
    10e-6, 40e-6, 160e-6, 640e-6, 2.56e-3, 10.24e-3, 40.96e-3, 163.84e-3, 655.36e-3, 2.62144,
    10.48576, 41.94304,
];
/// The `link` label values, indexed by [`link_index`].
pub const LINKS: [&str; 3] = ["host", "domain", "wan"];

pub fn op_index(k: OpKind) -> usize {
    match k {
        OpKind::Allreduce => 0,
        OpKind::Broadcast { .. } => 1,
        OpKind::Allgather => 2,
        OpKind::ReduceScatter => 3,
        OpKind::Barrier => 4,
    }
}

pub fn link_index(c: LinkClass) -> usize {
    match c {
        LinkClass::IntraHost => 0,
        LinkClass::IntraDomain => 1,
        LinkClass::InterDomain => 2,
    }
}

/// The size bucket of an operation on `bytes`.
pub fn size_index(bytes: u64) -> usize {
    SIZE_BOUNDS
        .iter()
        .position(|&b| bytes <= b)
        .unwrap_or(SIZE_BOUNDS.len())
}

/// The latency bucket of `d` (`LATENCY_BOUNDS.len()`: +Inf).
pub fn latency_index(d: Duration) -> usize {
    let s = d.as_secs_f64();
    LATENCY_BOUNDS
        .iter()
        .position(|&b| s <= b)
        .unwrap_or(LATENCY_BOUNDS.len())
}

/// One histogram: counts per bucket (not cumulative), sum and count.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

/// What one rank's communicator records.
#[derive(Debug)]
pub struct RankMetrics {
    rank: AtomicUsize,
    epoch: AtomicU64,
    ops: [[Histogram; SIZE_LABELS.len()]; OPS.len()],
    sent: [AtomicU64; LINKS.len()],
    received: [AtomicU64; LINKS.len()],
    copies_dropped: AtomicU64,
    /// (op, kind) → count; failures are rare, so a lock is fine here.
    errors: Mutex<BTreeMap<(usize, &'static str), u64>>,
}

impl RankMetrics {
    pub fn new(rank: usize, epoch: u64) -> Self {
        RankMetrics {
            rank: AtomicUsize::new(rank),
            epoch: AtomicU64::new(epoch),
            ops: Default::default(),
            sent: Default::default(),
            received: Default::default(),
            copies_dropped: AtomicU64::new(0),
            errors: Mutex::new(BTreeMap::new()),
        }
    }

    /// The membership epoch the series are labelled with.
    pub fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::Relaxed);
    }

    /// An operation of `kind` on `bytes` took `d`.
    pub fn op_done(&self, kind: OpKind, bytes: u64, d: Duration) {
        let h = &self.ops[op_index(kind)][size_index(bytes)];
        h.buckets[latency_index(d)].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        h.sum_ns.fetch_add(ns, Ordering::Relaxed);
        h.count.fetch_add(1, Ordering::Relaxed);
    }

    /// An operation of `kind` failed with `e`.
    pub fn op_failed(&self, kind: OpKind, e: &CollectiveError) {
        if let Ok(mut m) = self.errors.lock() {
            *m.entry((op_index(kind), e.kind())).or_insert(0) += 1;
        }
    }

    pub fn sent(&self, class: LinkClass, bytes: usize) {
        self.sent[link_index(class)].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn received(&self, class: LinkClass, bytes: usize) {
        self.received[link_index(class)].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The second copy of a frame sent twice arrived and was dropped.
    pub fn copy_dropped(&self) {
        self.copies_dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Second copies dropped so far.
    pub fn copies_dropped(&self) -> u64 {
        self.copies_dropped.load(Ordering::Relaxed)
    }

    /// Operations of `kind` completed so far (all sizes).
    pub fn op_count(&self, kind: OpKind) -> u64 {
        self.ops[op_index(kind)]
            .iter()
            .map(|h| h.count.load(Ordering::Relaxed))
            .sum()
    }

    /// Bytes sent and received so far over links of `class`.
    pub fn link_bytes(&self, class: LinkClass) -> (u64, u64) {
        let i = link_index(class);
        (
            self.sent[i].load(Ordering::Relaxed),
            self.received[i].load(Ordering::Relaxed),
        )
    }
}

/// Encodes every rank in `ranks` (one process may serve several).
pub(crate) fn encode_all(
    ranks: &[std::sync::Arc<RankMetrics>],
    mut enc: DescriptorEncoder,
) -> std::fmt::Result {
    let base = |m: &RankMetrics| {
        (
            m.rank.load(Ordering::Relaxed).to_string(),
            m.epoch.load(Ordering::Relaxed).to_string(),
        )
    };
    {
        let mut e = enc.encode_descriptor(
            "causeway_op_duration",
            "Time the engine ran a collective operation, by operation and buffer size",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for m in ranks {
            let (rank, epoch) = base(m);
            for (o, per_size) in m.ops.iter().enumerate() {
                for (s, h) in per_size.iter().enumerate() {
                    let count = h.count.load(Ordering::Relaxed);
                    if count == 0 {
                        continue;
                    }
                    let labels = [
                        ("rank", rank.as_str()),
                        ("epoch", epoch.as_str()),
                        ("op", OPS[o]),
                        ("size_bucket", SIZE_LABELS[s]),
                    ];
                    let buckets: Vec<(f64, u64)> = LATENCY_BOUNDS
                        .iter()
                        .copied()
                        .chain([f64::MAX])
                        .zip(h.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
                        .collect();
                    let sum = h.sum_ns.load(Ordering::Relaxed) as f64 * 1e-9;
                    e.encode_family(&labels)?
                        .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
                }
            }
        }
    }
    for (name, help, pick) in [
        (
            "causeway_link_sent",
            "Data-frame payload bytes written to peers, by link class",
            Pick::Sent,
        ),
        (
            "causeway_link_received",
            "Data-frame payload bytes read from peers, by link class",
            Pick::Received,
        ),
    ] {
        let mut e = enc.encode_descriptor(name, help, Some(&Unit::Bytes), MetricType::Counter)?;
        for m in ranks {
            let (rank, epoch) = base(m);
            let values = match pick {
                Pick::Sent => &m.sent,
                Pick::Received => &m.received,
            };
            for (l, v) in values.iter().enumerate() {
                let labels = [
                    ("rank", rank.as_str()),
                    ("epoch", epoch.as_str()),
                    ("link", LINKS[l]),
                ];
                e.encode_family(&labels)?
                    .encode_counter::<NoLabelSet, u64, u64>(&v.load(Ordering::Relaxed), None)?;
            }
        }
    }
    let mut e = enc.encode_descriptor(
        "causeway_wan_copies_dropped",
        "Second copies of frames sent twice across domains, dropped on arrival",
        None,
        MetricType::Counter,
    )?;
    for m in ranks {
        let (rank, epoch) = base(m);
        let labels = [("rank", rank.as_str()), ("epoch", epoch.as_str())];
        e.encode_family(&labels)?
            .encode_counter::<NoLabelSet, u64, u64>(&m.copies_dropped(), None)?;
    }
    let mut e = enc.encode_descriptor(
        "causeway_op_errors",
        "Collective operations that failed, by operation and error kind",
        None,
        MetricType::Counter,
    )?;
    for m in ranks {
        let (rank, epoch) = base(m);
        let errors = m.errors.lock().map(|e| e.clone()).unwrap_or_default();
        for ((o, kind), n) in errors {
            let labels = [
                ("rank", rank.as_str()),
                ("epoch", epoch.as_str()),
                ("op", OPS[o]),
                ("kind", kind),
            ];
            e.encode_family(&labels)?
                .encode_counter::<NoLabelSet, u64, u64>(&n, None)?;
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Pick {
    Sent,
    Received,
}

/// `ranks` as OpenMetrics text (ends with `# EOF`).
pub fn encode_text(ranks: &[std::sync::Arc<RankMetrics>]) -> String {
    #[derive(Debug)]
    struct All(Vec<std::sync::Arc<RankMetrics>>);
    impl prometheus_client::collector::Collector for All {
        fn encode(&self, enc: DescriptorEncoder) -> std::fmt::Result {
            encode_all(&self.0, enc)
        }
    }
    let mut reg = prometheus_client::registry::Registry::default();
    reg.register_collector(Box::new(All(ranks.to_vec())));
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &reg);
    out
}

#[cfg(test)]
mod tests;
