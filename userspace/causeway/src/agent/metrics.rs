//! The agent's Prometheus metrics: an [`Observation`] in the OpenMetrics text
//! exposition format (`prometheus-client`), base units in the names
//! (`_bytes`, `_seconds`, `_bytes_per_second`), counters ending in `_total`.
//!
//! | metric | labels |
//! |---|---|
//! | `causeway_class_packets_total`, `causeway_class_bytes_total`, `causeway_class_drops_total` | `iface`, `class` (XDP ingress) |
//! | `causeway_unclassified_packets_total` | `iface` |
//! | `causeway_shaper_rate_bytes_per_second`, `causeway_shaper_ceil_bytes_per_second` | `iface`, `class` |
//! | `causeway_shaper_sent_packets_total`, `causeway_shaper_sent_bytes_total` | `iface`, `class` (TC egress) |
//! | `causeway_shaper_over_limit_packets_total` | `iface`, `class`, `outcome` (`dropped`, `marked`, `demoted`, `passed`) |
//! | `causeway_clock_offset_seconds`, `causeway_clock_error_bound_seconds` | `peer`, `addr`, `source` |
//! | `causeway_clock_samples` | `peer`, `addr`, `source` |
//! | `causeway_path_packets_total`, `causeway_path_bytes_total` | `iface`, `path` (frames steered onto it) |
//! | `causeway_path_up` | `iface`, `path` (1 up, 0 down in the steering map) |
//! | `causeway_path_rtt_seconds`, `causeway_path_loss_ratio` | `iface`, `path` (the controller's probes, when it runs) |
//!
//! The values are read at each scrape (a fresh registry each time): the maps
//! hold totals since attach, which is what a counter is.

use std::sync::atomic::AtomicU64;

use prometheus_client::{
    encoding::text::encode,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};

use super::observe::Observation;

type Labels = Vec<(String, String)>;
type Counters = Family<Labels, Counter>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

/// The content type of [`encode_observation`]'s text.
pub use causeway_core::scrape_http::CONTENT_TYPE;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn counter(reg: &mut Registry, name: &str, help: &str, unit: Option<Unit>) -> Counters {
    let f = Counters::default();
    match unit {
        Some(u) => reg.register_with_unit(name, help, u, f.clone()),
        None => reg.register(name, help, f.clone()),
    }
    f
}

fn gauge(reg: &mut Registry, name: &str, help: &str, unit: Option<Unit>) -> Gauges {
    let f = Gauges::default();
    match unit {
        Some(u) => reg.register_with_unit(name, help, u, f.clone()),
        None => reg.register(name, help, f.clone()),
    }
    f
}

/// `o` as OpenMetrics text (ends with `# EOF`).
pub fn encode_observation(o: &Observation) -> String {
    let mut reg = Registry::with_prefix("causeway");
    let packets = counter(
        &mut reg,
        "class_packets",
        "Frames per class at XDP ingress",
        None,
    );
    let bytes = counter(
        &mut reg,
        "class",
        "Bytes per class at XDP ingress",
        Some(Unit::Bytes),
    );
    let drops = counter(
        &mut reg,
        "class_drops",
        "Frames dropped by a rule, per class",
        None,
    );
    let unclassified = counter(
        &mut reg,
        "unclassified_packets",
        "Frames the classifier could not parse",
        None,
    );
    let bps = || Some(Unit::Other("bytes_per_second".into()));
    let rate = gauge(
        &mut reg,
        "shaper_rate",
        "Guaranteed egress rate per class",
        bps(),
    );
    let ceil = gauge(&mut reg, "shaper_ceil", "Egress ceiling per class", bps());
    let sent = counter(
        &mut reg,
        "shaper_sent_packets",
        "Frames sent per class",
        None,
    );
    let sent_bytes = counter(
        &mut reg,
        "shaper_sent",
        "Bytes sent per class",
        Some(Unit::Bytes),
    );
    let over = counter(
        &mut reg,
        "shaper_over_limit_packets",
        "Frames found over their class's limit, by outcome",
        None,
    );
    let secs = || Some(Unit::Seconds);
    let offset = gauge(
        &mut reg,
        "clock_offset",
        "Peer clock minus local clock",
        secs(),
    );
    let bound = gauge(
        &mut reg,
        "clock_error_bound",
        "Bound on the offset's error",
        secs(),
    );
    let samples = gauge(&mut reg, "clock_samples", "Exchanges in the estimate", None);
    let refused = counter(
        &mut reg,
        "clock_probes_refused",
        "Clock probes refused by authentication, by reason",
        None,
    );

    for i in &o.interfaces {
        let iface = i.stats.iface.as_str();
        for c in &i.stats.classes {
            let l = labels(&[("iface", iface), ("class", &c.name)]);
            packets.get_or_create(&l).inc_by(c.packets);
            bytes.get_or_create(&l).inc_by(c.bytes);
            drops.get_or_create(&l).inc_by(c.drops);
        }
        unclassified
            .get_or_create(&labels(&[("iface", iface)]))
            .inc_by(i.stats.unclassified.packets);
        for s in &i.shaping {
            let l = labels(&[("iface", iface), ("class", &s.class)]);
            rate.get_or_create(&l).set(s.rate_bits as f64 / 8.0);
            ceil.get_or_create(&l).set(s.ceil_bits as f64 / 8.0);
            sent.get_or_create(&l).inc_by(s.sent_packets);
            sent_bytes.get_or_create(&l).inc_by(s.sent_bytes);
            let passed = s.shaped.saturating_sub(s.dropped + s.marked + s.demoted);
            for (outcome, n) in [
                ("dropped", s.dropped),
                ("marked", s.marked),
                ("demoted", s.demoted),
                ("passed", passed),
            ] {
                let l = labels(&[("iface", iface), ("class", &s.class), ("outcome", outcome)]);
                over.get_or_create(&l).inc_by(n);
            }
        }
    }
    for p in &o.peers {
        let r = p.probes_refused;
        for (reason, n) in [
            ("unauthenticated", r.unauthenticated),
            ("forged", r.forged),
            ("replayed", r.replayed),
        ] {
            let l = labels(&[("peer", &p.name), ("addr", &p.addr), ("reason", reason)]);
            refused.get_or_create(&l).inc_by(n);
        }
        let (Some(source), Some(off), Some(b)) = (&p.source, p.offset_ns, p.error_bound_ns) else {
            continue;
        };
        let l = labels(&[("peer", &p.name), ("addr", &p.addr), ("source", source)]);
        offset.get_or_create(&l).set(off / 1e9);
        bound.get_or_create(&l).set(b / 1e9);
        samples.get_or_create(&l).set(p.samples as f64);
    }
    encode_steering(&mut reg, o);
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut text, &reg);
    text
}

fn encode_steering(reg: &mut Registry, o: &Observation) {
    let packets = counter(reg, "path_packets", "Frames steered onto a WAN path", None);
    let bytes = counter(
        reg,
        "path",
        "Bytes steered onto a WAN path",
        Some(Unit::Bytes),
    );
    let up = gauge(
        reg,
        "path_up",
        "1 when the path is up in the steering map",
        None,
    );
    let rtt = gauge(
        reg,
        "path_rtt",
        "Smoothed probe RTT of a WAN path",
        Some(Unit::Seconds),
    );
    let loss = gauge(reg, "path_loss_ratio", "Fraction of probes lost", None);
    for s in &o.steering {
        for p in &s.paths {
            let id = p.path.to_string();
            let l = labels(&[("iface", &s.iface), ("path", &id)]);
            packets.get_or_create(&l).inc_by(p.packets);
            bytes.get_or_create(&l).inc_by(p.bytes);
            up.get_or_create(&l).set(if p.up { 1.0 } else { 0.0 });
        }
        for h in s.monitor.iter().flatten() {
            let id = h.path.to_string();
            let l = labels(&[("iface", &s.iface), ("path", &id)]);
            rtt.get_or_create(&l).set(h.srtt_ms / 1e3);
            loss.get_or_create(&l).set(h.loss);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::observe::{IfaceObservation, PeerObservation, ShapedClass};
    use super::*;
    use crate::stats::{ClassStats, InterfaceStats, Totals};

    fn sample() -> Observation {
        Observation {
            interfaces: vec![IfaceObservation {
                stats: InterfaceStats {
                    scope: "host".into(),
                    iface: "wan0".into(),
                    policy_generation: Some(3),
                    classes: vec![ClassStats {
                        id: 1,
                        name: "gradient".into(),
                        packets: 10,
                        bytes: 15_000,
                        drops: 1,
                    }],
                    unclassified: Totals {
                        packets: 2,
                        bytes: 120,
                        drops: 0,
                    },
                    reasons: Vec::new(),
                },
                shaping: vec![ShapedClass {
                    class: "gradient".into(),
                    rate_bits: 150_000_000,
                    ceil_bits: 196_000_000,
                    over_limit: "ecn".into(),
                    sent_packets: 9,
                    sent_bytes: 13_500,
                    shaped: 4,
                    dropped: 0,
                    marked: 3,
                    demoted: 0,
                }],
            }],
            peers: vec![
                PeerObservation {
                    name: "dc2".into(),
                    addr: "10.1.0.2:7339".into(),
                    source: Some("kernel".into()),
                    offset_ns: Some(-2_500_000.0),
                    error_bound_ns: Some(12_000.0),
                    drift_ppm: Some(1.5),
                    samples: 40,
                    probes_refused: crate::clock::auth::AuthCounters {
                        unauthenticated: 0,
                        forged: 4,
                        replayed: 2,
                    },
                },
                PeerObservation {
                    name: "dc3".into(),
                    addr: "10.2.0.2:7339".into(),
                    ..PeerObservation::default()
                },
            ],
            steering: vec![super::super::observe::SteeringObservation {
                iface: "br0".into(),
                paths: vec![crate::paths::PathRow {
                    path: 1,
                    mark: 0x1001,
                    up: false,
                    flows: 2,
                    packets: 7,
                    bytes: 9_000,
                }],
                unsteered_bytes: 100,
                monitor: Some(vec![crate::paths::monitor::PathHealth {
                    path: 1,
                    probe: "10.200.1.2:7360".parse().expect("addr"),
                    state: "down".into(),
                    srtt_ms: 60.5,
                    rttvar_ms: 1.0,
                    min_rtt_ms: 60.0,
                    loss: 0.25,
                    sent: 40,
                    replies: 30,
                }]),
            }],
        }
    }

    #[test]
    fn an_observation_encodes_with_units_in_the_names() {
        let text = encode_observation(&sample());
        for line in [
            "# TYPE causeway_class_bytes counter",
            "# UNIT causeway_class_bytes bytes",
            r#"causeway_class_bytes_total{iface="wan0",class="gradient"} 15000"#,
            r#"causeway_class_packets_total{iface="wan0",class="gradient"} 10"#,
            r#"causeway_class_drops_total{iface="wan0",class="gradient"} 1"#,
            r#"causeway_unclassified_packets_total{iface="wan0"} 2"#,
            r#"causeway_shaper_rate_bytes_per_second{iface="wan0",class="gradient"} 18750000.0"#,
            r#"causeway_shaper_ceil_bytes_per_second{iface="wan0",class="gradient"} 24500000.0"#,
            r#"causeway_shaper_sent_bytes_total{iface="wan0",class="gradient"} 13500"#,
            r#"causeway_shaper_over_limit_packets_total{iface="wan0",class="gradient",outcome="marked"} 3"#,
            r#"causeway_shaper_over_limit_packets_total{iface="wan0",class="gradient",outcome="passed"} 1"#,
            r#"causeway_clock_offset_seconds{peer="dc2",addr="10.1.0.2:7339",source="kernel"} -0.0025"#,
            r#"causeway_clock_error_bound_seconds{peer="dc2",addr="10.1.0.2:7339",source="kernel"} 0.000012"#,
            r#"causeway_clock_probes_refused_total{peer="dc2",addr="10.1.0.2:7339",reason="forged"} 4"#,
            r#"causeway_clock_probes_refused_total{peer="dc2",addr="10.1.0.2:7339",reason="replayed"} 2"#,
            r#"causeway_path_bytes_total{iface="br0",path="1"} 9000"#,
            r#"causeway_path_packets_total{iface="br0",path="1"} 7"#,
            r#"causeway_path_up{iface="br0",path="1"} 0.0"#,
            r#"causeway_path_rtt_seconds{iface="br0",path="1"} 0.0605"#,
            r#"causeway_path_loss_ratio{iface="br0",path="1"} 0.25"#,
            "# EOF",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        // A peer without an estimate has no samples rather than zeros (its
        // refusal counters, all zero, are the only lines naming it).
        assert!(
            text.lines()
                .filter(|l| l.contains("dc3"))
                .all(|l| l.starts_with("causeway_clock_probes_refused_total") && l.ends_with(" 0")),
            "{text}"
        );
    }
}
