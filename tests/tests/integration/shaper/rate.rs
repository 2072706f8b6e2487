//! Achieved rate of a shaped bulk TCP flow on a veth, at several
//! configured rates: the rate delivered to the receiver, counted at the
//! wire (iperf3's received payload rate × 1514/1448: full-sized segments
//! with TCP timestamps carry 1448 payload bytes in 1514-byte frames, the
//! length HTB and the program charge), must be within ±3% of the
//! configured rate. HTB's own count of what it sent is printed beside it.
//! The flow runs with ECN, the bulk class's over-limit action.

use causeway_test_support::require_root;
use std::time::Duration;

use causeway::shaper::OverAction;
use causeway_test_support::netns::VethLink;
use causeway_tests::shaper_net::*;

fn classes(rate: u64, over: OverAction, police: bool) -> Vec<ClassSpec> {
    let burst = causeway::policy::shaping::default_burst(rate);
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

/// Wire bytes per payload byte of full-sized TCP segments.
const WIRE_PER_PAYLOAD: f64 = 1514.0 / 1448.0;

/// Runs one bulk flow at `rate` bit/s; returns (wire rate delivered to the
/// receiver, HTB's sent rate).
fn achieved(rate: u64, over: OverAction, police: bool) -> (f64, f64) {
    let link = VethLink::new(60);
    link.a.exec(&["sysctl", "-qw", "net.ipv4.tcp_ecn=1"]);
    let mut shaped = attach(&link.a, &link.a_if);
    configure(&mut shaped, rate, &classes(rate, over, police));
    let _server = Iperf3Server::start(&link.b);
    // 2 s omitted (slow start, queue build-up), then 5 s measured.
    let client = iperf3_client_omitting(&link.a, &link.b_addr, 5, 2);
    let measured = measure_rate(&link, BULK, Duration::from_secs(2), Duration::from_secs(4));
    let out = client.wait_with_output().expect("iperf3 client");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3 JSON");
    let goodput = report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    let counters = shaped.shaper.counters().expect("counters");
    let c = counters[BULK as usize];
    let delivered = goodput * WIRE_PER_PAYLOAD;
    eprintln!(
        "rate {rate} {over:?} police {police}: delivered {delivered:.0} bit/s ({:+.2}%), HTB sent {measured:.0} bit/s ({:+.2}%); bulk sent {} shaped {} marked {} dropped {}",
        (delivered / rate as f64 - 1.0) * 100.0,
        (measured / rate as f64 - 1.0) * 100.0,
        c.sent_packets, c.shaped, c.marked, c.dropped
    );
    (delivered, measured)
}

/// Wire rate one TCP flow reaches through a plain HTB class at `rate` on
/// a veth pair, without Causeway: what the kernel's shaper alone achieves
/// on this machine right now.
fn plain_htb(rate: u64) -> f64 {
    let link = VethLink::new(64);
    let r = format!("{rate}bit");
    for args in [
        vec![
            "qdisc", "add", "dev", &link.a_if, "root", "handle", "1:", "htb", "default", "1",
        ],
        vec![
            "class", "add", "dev", &link.a_if, "parent", "1:", "classid", "1:1", "htb", "rate", &r,
            "ceil", &r,
        ],
    ] {
        let status = std::process::Command::new("tc")
            .args(["-n", link.a.name()])
            .args(&args)
            .status()
            .expect("tc");
        assert!(status.success(), "tc {args:?}");
    }
    let _server = Iperf3Server::start(&link.b);
    let out = iperf3_client_omitting(&link.a, &link.b_addr, 5, 2)
        .wait_with_output()
        .expect("iperf3 -c");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3 JSON");
    report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0)
        * WIRE_PER_PAYLOAD
}

#[test]
fn achieved_rate_is_within_3_percent() {
    require_root!();
    let mut failures = Vec::new();
    for mbit in [10u64, 50, 200, 1000] {
        let rate = mbit * 1_000_000;
        let (wire, _) = achieved(rate, OverAction::EcnMark, true);
        let err = wire / rate as f64 - 1.0;
        if err.abs() > 0.03 {
            // A miss is retried once (the machine is shared); if it stays,
            // and the kernel's HTB alone cannot carry the rate here either,
            // it is reported as beyond this machine, not as a failure.
            let (again, _) = achieved(rate, OverAction::EcnMark, true);
            if (again / rate as f64 - 1.0).abs() <= 0.03 {
                continue;
            }
            let plain = plain_htb(rate);
            if (plain / rate as f64 - 1.0).abs() > 0.03 {
                eprintln!(
                    "{mbit} Mbit/s: not reachable on this machine now: plain HTB without Causeway {:.1} Mbit/s, Causeway {:.1} then {:.1} Mbit/s",
                    plain / 1e6,
                    wire / 1e6,
                    again / 1e6
                );
                continue;
            }
            failures.push(format!(
                "{mbit} Mbit/s: achieved {:.1} then {:.1} Mbit/s ({:+.2}%), plain HTB {:.1} Mbit/s",
                wire / 1e6,
                again / 1e6,
                err * 100.0,
                plain / 1e6
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "rates off by more than 3%: {failures:?}"
    );
}
