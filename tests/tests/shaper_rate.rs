//! Achieved rate of a shaped bulk TCP flow on a veth, at several
//! configured rates: HTB's sent bytes (wire length) over a steady-state
//! window must be within ±3% of the configured rate.

mod shaper_common;

use std::time::Duration;

use causeway::shaper::OverAction;
use causeway_tests::netns::VethLink;
use shaper_common::*;

fn classes(rate: u64, over: OverAction, police: bool) -> Vec<ClassSpec> {
    let burst = (rate / 8 / 200).max(64 * 1024);
    let spec = |class, share: u64, prio| ClassSpec {
        class,
        rate_bits: rate / 10 * share,
        ceil_bits: rate,
        prio,
        over,
        burst_bytes: burst,
        police,
    };
    let mut classes = vec![spec(DEFAULT, 1, 3), spec(CONTROL, 1, 0), spec(BULK, 8, 4)];
    for c in &mut classes[..2] {
        if matches!(c.over, OverAction::Demote(_)) {
            c.over = OverAction::Drop;
        }
    }
    classes
}

/// Runs one bulk flow at `rate` bit/s; returns (achieved wire rate, iperf3 goodput).
fn achieved(rate: u64, over: OverAction, police: bool) -> (f64, f64) {
    let link = VethLink::new(60);
    link.a.exec(&["sysctl", "-qw", "net.ipv4.tcp_ecn=1"]);
    let mut shaped = attach(&link.a, &link.a_if);
    configure(&mut shaped, rate, &classes(rate, over, police));
    let _server = Iperf3Server::start(&link.b);
    let client = iperf3_client(&link.a, &link.b_addr, 7);
    let measured = measure_rate(&link, BULK, Duration::from_secs(2), Duration::from_secs(4));
    let out = client.wait_with_output().expect("iperf3 client");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3 JSON");
    let goodput = report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    let counters = shaped.shaper.counters().expect("counters");
    let c = counters[BULK as usize];
    eprintln!(
        "rate {rate} {over:?} police {police}: wire {measured:.0} bit/s ({:+.2}%), goodput {goodput:.0}; bulk sent {} shaped {} marked {} dropped {}",
        (measured / rate as f64 - 1.0) * 100.0,
        c.sent_packets, c.shaped, c.marked, c.dropped
    );
    (measured, goodput)
}

#[test]
fn achieved_rate_is_within_3_percent() {
    if skip_unless_root() {
        return;
    }
    let mut failures = Vec::new();
    for mbit in [10u64, 50, 200, 1000] {
        let rate = mbit * 1_000_000;
        let (wire, _) = achieved(rate, OverAction::EcnMark, true);
        let err = wire / rate as f64 - 1.0;
        if err.abs() > 0.03 {
            failures.push(format!(
                "{mbit} Mbit/s: achieved {:.1} Mbit/s ({:+.2}%)",
                wire / 1e6,
                err * 100.0
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "rates off by more than 3%: {failures:?}"
    );
}
