//! A real Prometheus server scrapes the agent's `/metrics` and answers
//! queries with the values the agent has: two agents with synthetic clocks
//! on a veth pair, A with a policy that shapes the clock class, A's
//! Prometheus in A's namespace on loopback. Checked through the HTTP API:
//! the target is up, the shaper's configured rate exactly, the clock class's
//! ingress and egress counters against `causeway stats`, and the clock offset
//! against the synthetic ground truth within the published bound.

use causeway_test_support::require_root;
use std::{net::IpAddr, time::Duration};

use causeway::{clock::source::raw_tai_now, clock::SyncClock, stats::InterfaceStats};
use causeway_test_support::netns::VethLink;
use causeway_tests::{
    causeway_cli::causeway_ok,
    clock_agent::{true_offset, Agent},
    prometheus::Prometheus,
};
use serde::Deserialize;

#[derive(Deserialize)]
struct Report {
    interfaces: Vec<InterfaceStats>,
}

#[test]
fn prometheus_scrapes_the_agents_classes_shaping_and_clock() {
    require_root!("prometheus_scrapes_the_agents_classes_shaping_and_clock");
    let link = VethLink::new(96);
    let ip = |s: &str| s.parse::<IpAddr>().expect("test address");
    let epoch = raw_tai_now();
    let clock_a = SyncClock {
        offset_ns: 2_000_000,
        drift_ppb: 10_000,
        epoch_ns: epoch,
    };
    let clock_b = SyncClock {
        offset_ns: -7_000_000,
        drift_ppb: -20_000,
        epoch_ns: epoch,
    };
    let metrics: std::net::SocketAddr = "127.0.0.1:9464".parse().expect("addr");
    let a_ns = link.a.name().to_string();
    link.a.ip(&["link", "set", "lo", "up"]);
    let agent_a = Agent::start_with(
        &a_ns,
        &link.a_if,
        1,
        ip(&link.b_addr),
        clock_a,
        &format!("metrics = \"{metrics}\""),
    );
    let _b = Agent::start(link.b.name(), &link.b_if, 2, ip(&link.a_addr), clock_b);
    agent_a.wait_ready();
    let dir = std::env::temp_dir().join(format!("cw-prom-policy-{}", std::process::id()));
    std::fs::write(&dir, super::POLICY).expect("write policy");
    let policy = dir.to_str().expect("UTF-8 path");
    causeway_ok(&[
        "--netns", &a_ns, "policy", "apply", "--iface", &link.a_if, policy,
    ]);
    let _ = std::fs::remove_file(&dir);

    let prom = Prometheus::start(
        &a_ns,
        "127.0.0.1:9090".parse().expect("addr"),
        &[("agent", metrics)],
    );
    let up = prom.wait_for("up{job=\"agent\"}", Duration::from_secs(30), |v| v == 1.0);
    assert_eq!(up, 1.0, "{}", prom.log());

    // Configured, so exact: 10 Mbit/s is 1.25 MB/s.
    let sel = format!("{{job=\"agent\",iface=\"{}\",class=\"clock\"}}", link.a_if);
    let rate = prom.wait_for(
        &format!("causeway_shaper_rate_bytes_per_second{sel}"),
        Duration::from_secs(20),
        |_| true,
    );
    assert_eq!(rate, 1_250_000.0);
    let ceil = prom.scalar(&format!("causeway_shaper_ceil_bytes_per_second{sel}"));
    assert_eq!(ceil, 2_500_000.0);

    // The probes: counted at ingress (B's requests and answers) and egress.
    let ingress = prom.wait_for(
        &format!("causeway_class_packets_total{sel}"),
        Duration::from_secs(20),
        |v| v >= 20.0,
    );
    let out = causeway_ok(&["--netns", &a_ns, "stats", "--iface", &link.a_if, "--json"]);
    let report: Report = serde_json::from_str(&out).expect("stats --json");
    let now = report.interfaces[0]
        .class("clock")
        .expect("clock class")
        .packets;
    assert!(
        ingress <= now as f64 && ingress > 0.0,
        "scraped {ingress} <= read later {now}"
    );
    prom.wait_for(
        &format!("causeway_shaper_sent_packets_total{sel}"),
        Duration::from_secs(20),
        |v| v >= 20.0,
    );
    // Nothing over a 10 Mbit/s limit at 20 probes a second.
    let dropped = prom.scalar(
        "causeway_shaper_over_limit_packets_total{job=\"agent\",class=\"clock\",outcome=\"dropped\"}",
    );
    assert_eq!(dropped, 0.0);

    // The clock estimate of B as A sees it, against the synthetic truth.
    let peer = "{job=\"agent\",peer=\"peer\",source=\"kernel\"}";
    let bound = prom.wait_for(
        &format!("causeway_clock_error_bound_seconds{peer}"),
        Duration::from_secs(30),
        |v| v > 0.0,
    );
    let offset = prom.scalar(&format!("causeway_clock_offset_seconds{peer}"));
    let truth = true_offset(&clock_a, &clock_b, clock_a.apply(raw_tai_now())) / 1e9;
    // The scraped value is up to a scrape interval (plus a publish tick) old:
    // the drift between the clocks (30 ppm) moves the truth by 30 µs a second.
    let slack = 3.0 * 30e-6;
    assert!(
        (offset - truth).abs() <= bound + slack,
        "offset {offset} s, truth {truth} s, bound {bound} s"
    );
    // PromQL over the counters: the probes' bytes flow.
    let flow = prom.wait_for(
        "sum(rate(causeway_class_bytes_total{job=\"agent\",class=\"clock\"}[10s]))",
        Duration::from_secs(20),
        |v| v > 0.0,
    );
    eprintln!(
        "prometheus: shaper rate {rate} B/s, clock ingress {ingress} packets, {flow:.0} B/s, offset {offset:.6} s (truth {truth:.6} s, bound {bound:.2e} s)"
    );
}
