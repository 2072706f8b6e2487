//! Priority isolation: the p99 RTT of small control-class probes while a
//! bulk-class TCP flow saturates the shaped link must stay within 2× the
//! idle p99. The same measurement with Causeway detached (the same rate
//! limit as one plain HTB class, no classes) is printed beside it.
//!
//! The prober and the echo server run SCHED_FIFO, as in the shaper bench:
//! what is measured is the shaper's isolation, not the CPU scheduler's.
//! With normal threads a busy 2-core machine (a CI run; two spinning
//! loops here) put the loaded p99 at 2.6–5.9× idle with Causeway attached,
//! and 0.86–1.02× with SCHED_FIFO under the same spinning loops.

use causeway_test_support::require_root;
use std::{process::Command, time::Duration};

use causeway::shaper::OverAction;
use causeway_test_support::netns::VethLink;
use causeway_tests::shaper_net::*;

const LINK_BITS: u64 = 100_000_000;
const PROBES: usize = 1500;
const GAP: Duration = Duration::from_micros(2000);

fn classes() -> Vec<ClassSpec> {
    let spec = |class, rate_bits, prio, over| ClassSpec {
        class,
        rate_bits,
        ceil_bits: LINK_BITS,
        prio,
        over,
        burst_bytes: causeway::policy::shaping::default_burst(LINK_BITS),
        police: true,
    };
    vec![
        spec(DEFAULT, LINK_BITS / 10, 3, OverAction::Drop),
        spec(CONTROL, LINK_BITS / 10, 0, OverAction::Drop),
        spec(BULK, LINK_BITS / 10 * 8, 4, OverAction::EcnMark),
    ]
}

/// Rounds of (idle probes, then probes under a bulk flow): pooling rounds
/// that alternate keeps slow changes in the shared machine's load from
/// landing on one side of the comparison.
const ROUNDS: usize = 3;

/// (idle p99, loaded p99) in µs of control probes over `link`.
fn p99_idle_and_loaded(link: &VethLink) -> (f64, f64) {
    let _echo = EchoServer::start(&link.b, &link.b_addr, Sched::Realtime);
    let per_round = PROBES / ROUNDS;
    let (mut idle, mut loaded) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        idle.extend(probe_rtts(
            &link.a,
            &link.b_addr,
            per_round,
            GAP,
            Sched::Realtime,
        ));
        let _server = Iperf3Server::start(&link.b);
        let client = iperf3_client(&link.a, &link.b_addr, 4);
        std::thread::sleep(Duration::from_millis(1500));
        loaded.extend(probe_rtts(
            &link.a,
            &link.b_addr,
            per_round,
            GAP,
            Sched::Realtime,
        ));
        let out = client.wait_with_output().expect("iperf3 client");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3 JSON");
        let goodput = report["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or(0.0);
        assert!(
            goodput > LINK_BITS as f64 * 0.8,
            "the bulk flow did not saturate the link: {goodput:.0} bit/s"
        );
    }
    assert!(
        loaded.len() > PROBES * 9 / 10,
        "{} of {PROBES} probes answered under load",
        loaded.len()
    );
    (quantile(&mut idle, 0.99), quantile(&mut loaded, 0.99))
}

/// A link whose A side negotiates ECN (the bulk class's over-limit
/// action). GSO stays on: a control leaf below its own rate is served by
/// HTB without waiting for its parent's tokens, so bulk super-frames do
/// not delay it, and they keep the CPU cost of the bulk flow low.
fn link(subnet: u8) -> VethLink {
    let link = VethLink::new(subnet);
    link.a.exec(&["sysctl", "-qw", "net.ipv4.tcp_ecn=1"]);
    link
}

#[test]
fn control_p99_under_bulk_load_stays_within_twice_idle() {
    require_root!();
    let (attached_idle, attached_loaded) = {
        let link = link(61);
        let mut shaped = attach(&link.a, &link.a_if);
        configure(&mut shaped, LINK_BITS, &classes());
        let r = p99_idle_and_loaded(&link);
        let c = shaped.shaper.counters().expect("counters");
        eprintln!(
            "control frames sent {}, bulk sent {} marked {}",
            c[CONTROL as usize].sent_packets,
            c[BULK as usize].sent_packets,
            c[BULK as usize].marked
        );
        assert!(
            c[CONTROL as usize].sent_packets >= PROBES as u64,
            "probes were not classified as control"
        );
        r
    };
    let (detached_idle, detached_loaded) = {
        let link = link(62);
        // The same rate limit without Causeway: one HTB class, one queue.
        let rate = format!("{LINK_BITS}bit");
        for args in [
            vec![
                "qdisc", "add", "dev", &link.a_if, "root", "handle", "1:", "htb", "default", "1",
            ],
            vec![
                "class", "add", "dev", &link.a_if, "parent", "1:", "classid", "1:1", "htb", "rate",
                &rate, "ceil", &rate, "quantum", "60000",
            ],
        ] {
            let status = Command::new("tc")
                .args(["-n", link.a.name()])
                .args(&args)
                .status()
                .expect("tc");
            assert!(status.success(), "tc {args:?}");
        }
        p99_idle_and_loaded(&link)
    };
    eprintln!(
        "control-class RTT p99 at {} Mbit/s, µs:",
        LINK_BITS / 1_000_000
    );
    eprintln!(
        "  causeway attached: idle {attached_idle:.0}, bulk-loaded {attached_loaded:.0} ({:.2}x)",
        attached_loaded / attached_idle
    );
    eprintln!(
        "  causeway detached: idle {detached_idle:.0}, bulk-loaded {detached_loaded:.0} ({:.2}x)",
        detached_loaded / detached_idle
    );
    assert!(
        attached_loaded <= 2.0 * attached_idle,
        "loaded p99 {attached_loaded:.0} µs is more than twice the idle p99 {attached_idle:.0} µs"
    );
}
