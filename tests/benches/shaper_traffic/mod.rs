//! The shaper benchmark's network part: namespaces joined by a veth pair,
//! the TC program attached on the A side with Causeway's HTB (or a plain
//! HTB class instead), iperf3 bulk traffic and UDP RTT probes, all from
//! `causeway_tests::shaper_net`. Everything is removed on drop.

use std::{
    process::Child,
    time::{Duration, Instant},
};

use causeway::{policy::shaping::default_burst, shaper::OverAction};
use causeway_test_support::netns::VethLink;
use causeway_tests::shaper_net::{
    attach, configure, iperf3_client_omitting, probe_rtts, quantile, ClassSpec, EchoServer,
    Iperf3Server, Sched, Shaped, BULK, CONTROL, DEFAULT,
};

/// Wire bytes per payload byte of full-sized TCP segments with timestamps.
const WIRE_PER_PAYLOAD: f64 = 1514.0 / 1448.0;

/// A veth link (10.77.<n>.1 – 10.77.<n>.2) whose A side negotiates ECN.
fn ecn_link(n: u8) -> VethLink {
    let link = VethLink::new(n);
    link.a.exec(&["sysctl", "-qw", "net.ipv4.tcp_ecn=1"]);
    link
}

/// Causeway on A's veth: TC program, rules, HTB (default 10%, control 10%,
/// bulk 80% of `link_bits`, each up to the link) and the shaping table,
/// with the program's token buckets policing when `police`.
fn shape(link: &VethLink, link_bits: u64, police: bool) -> Shaped {
    let mut shaped = attach(&link.a, &link.a_if);
    let spec = |class, share: u64, prio, over| ClassSpec {
        class,
        rate_bits: link_bits / 10 * share,
        ceil_bits: link_bits,
        prio,
        over,
        burst_bytes: default_burst(link_bits),
        police,
    };
    configure(
        &mut shaped,
        link_bits,
        &[
            spec(DEFAULT, 1, 3, OverAction::Drop),
            spec(CONTROL, 1, 0, OverAction::Drop),
            spec(BULK, 8, 4, OverAction::EcnMark),
        ],
    );
    shaped
}

/// One plain HTB class at `link_bits` on A's veth, no Causeway.
fn plain_htb(link: &VethLink, link_bits: u64) {
    let rate = format!("{link_bits}bit");
    let tc = |args: &[&str]| {
        let mut all = vec!["-n", link.a.name()];
        all.extend_from_slice(args);
        causeway_test_support::netns::run("tc", &all);
    };
    tc(&[
        "qdisc", "add", "dev", &link.a_if, "root", "handle", "1:", "htb", "default", "1",
    ]);
    tc(&[
        "class", "add", "dev", &link.a_if, "parent", "1:", "classid", "1:1", "htb", "rate", &rate,
    ]);
}

/// A bulk TCP run from A to B; both ends are killed when this is dropped.
struct Run {
    _server: Iperf3Server,
    client: Child,
    deadline: Instant,
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.client.kill();
        let _ = self.client.wait();
    }
}

fn iperf3(link: &VethLink, secs: u32, omit: u32) -> Run {
    let server = Iperf3Server::start(&link.b);
    let client = iperf3_client_omitting(&link.a, &link.b_addr, secs, omit);
    let deadline = Instant::now() + Duration::from_secs(u64::from(secs + omit) + 15);
    Run {
        _server: server,
        client,
        deadline,
    }
}

/// Delivered wire rate of the run, bit/s (0 when it failed or hung).
fn delivered(mut run: Run) -> f64 {
    while run.client.try_wait().ok().flatten().is_none() {
        if Instant::now() > run.deadline {
            return 0.0;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut stdout = Vec::new();
    if let Some(mut out) = run.client.stdout.take() {
        let _ = std::io::Read::read_to_end(&mut out, &mut stdout);
    }
    let report: serde_json::Value = serde_json::from_slice(&stdout).unwrap_or_default();
    report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0)
        * WIRE_PER_PAYLOAD
}

pub fn accuracy() {
    println!("\nShaping accuracy: one TCP flow (ECN) through a veth, delivered wire rate vs configured (5 s after 2 s omitted)");
    println!(
        "{:>10} {:>24} {:>24} {:>22}",
        "configured", "Causeway (program+HTB)", "Causeway (HTB only)", "plain HTB, no Causeway"
    );
    for (i, mbit) in [10u64, 50, 200, 1000].into_iter().enumerate() {
        let rate = mbit * 1_000_000;
        let mut cells = Vec::new();
        for police in [true, false] {
            let link = ecn_link(10 + i as u8 * 3 + u8::from(police));
            let _shaped = shape(&link, rate, police);
            let r = delivered(iperf3(&link, 5, 2));
            cells.push(format!(
                "{:.1} ({:+.2}%)",
                r / 1e6,
                (r / rate as f64 - 1.0) * 100.0
            ));
        }
        let link = ecn_link(12 + i as u8 * 3);
        plain_htb(&link, rate);
        let r = delivered(iperf3(&link, 5, 2));
        cells.push(format!(
            "{:.1} ({:+.2}%)",
            r / 1e6,
            (r / rate as f64 - 1.0) * 100.0
        ));
        println!(
            "{:>5} Mbit {:>24} {:>24} {:>22}",
            mbit, cells[0], cells[1], cells[2]
        );
    }
}

/// (idle p99, loaded p99) of control probes in µs, over three
/// alternating rounds.
fn idle_and_loaded(link: &VethLink) -> (f64, f64) {
    let _echo = EchoServer::start(&link.b, &link.b_addr, Sched::Realtime);
    let probe = || {
        probe_rtts(
            &link.a,
            &link.b_addr,
            500,
            Duration::from_millis(2),
            Sched::Realtime,
        )
    };
    let (mut idle, mut loaded) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        idle.extend(probe());
        let run = iperf3(link, 4, 0);
        std::thread::sleep(Duration::from_millis(1500));
        loaded.extend(probe());
        let _ = delivered(run);
    }
    (quantile(&mut idle, 0.99), quantile(&mut loaded, 0.99))
}

pub fn isolation() {
    let link_bits = 100_000_000;
    println!("\nIsolation: control-class UDP RTT p99 (µs), idle vs one saturating bulk TCP flow, link shaped at 100 Mbit/s");
    println!(
        "{:<34} {:>10} {:>12} {:>8}",
        "", "idle p99", "loaded p99", "ratio"
    );
    let veth = ecn_link(40);
    let shaped = shape(&veth, link_bits, true);
    let (i, l) = idle_and_loaded(&veth);
    println!(
        "{:<34} {i:>10.0} {l:>12.0} {:>7.2}x",
        "Causeway attached",
        l / i
    );
    drop(shaped);
    drop(veth);
    let veth = ecn_link(41);
    plain_htb(&veth, link_bits);
    let (i, l) = idle_and_loaded(&veth);
    println!(
        "{:<34} {i:>10.0} {l:>12.0} {:>7.2}x",
        "detached (one plain HTB class)",
        l / i
    );
}
