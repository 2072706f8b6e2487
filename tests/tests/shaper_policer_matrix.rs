//! A long TCP flow through a class shaped by Causeway keeps its rate under
//! every over-limit action: `drop`, `ecn` and `demote`, with offloads
//! (TSO/GSO/GRO) on and off, at 20, 200 and 800 Mbit/s, with one stream and
//! eight. Each cell must deliver at least 0.95× the configured rate in
//! frame bytes, and no less than the kernel's `tbf` at the same rate on the
//! same link (which also tells the highest rate this machine can drive
//! now: where `tbf` cannot reach 0.95×, the floor is `tbf`'s rate).
//!
//! The class is set up as `causeway attach --policy` does it: the TC
//! program's bucket at the ceiling with the policy's default burst, in
//! front of Causeway's HTB. Each cell runs iperf3 for 3 s (1 s omitted)
//! on a fresh veth pair; the whole matrix takes about 3 minutes.
//! `CAUSEWAY_MATRIX_CELLS=<substring>` runs only the cells whose name
//! contains it (e.g. `drop/tso-on/200`).

use std::process::{Command, Stdio};

use causeway::{policy::shaping::default_burst, shaper::OverAction};
use causeway_tests::{netns::VethLink, shaper_net::*};

/// Frame bytes per payload byte of full-sized segments (1448 payload bytes
/// with TCP timestamps in 1514-byte frames): what HTB and the program charge.
const WIRE_PER_PAYLOAD: f64 = 1514.0 / 1448.0;
const SECS: u32 = 3;
const OMIT: u32 = 1;
/// Fraction of the configured rate every cell must deliver.
const FLOOR: f64 = 0.95;
/// Measurement noise allowed against `tbf` on a shared 2-core machine.
const TBF_SLACK: f64 = 0.97;
const RATES_MBIT: [u64; 3] = [20, 200, 800];
const STREAMS: [u32; 2] = [1, 8];

#[derive(Clone, Copy, Debug)]
enum Shaper {
    Causeway(OverAction),
    Tbf,
}

impl Shaper {
    fn name(self) -> &'static str {
        match self {
            Shaper::Causeway(OverAction::Drop) => "drop",
            Shaper::Causeway(OverAction::EcnMark) => "ecn",
            Shaper::Causeway(OverAction::Demote(_)) => "demote",
            Shaper::Tbf => "tbf",
        }
    }
}

/// Turns TSO, GSO and GRO on or off on both ends of the link.
fn set_offloads(link: &VethLink, on: bool) {
    let v = if on { "on" } else { "off" };
    for (ns, dev) in [(&link.a, &link.a_if), (&link.b, &link.b_if)] {
        ns.exec(&["ethtool", "-K", dev, "tso", v, "gso", v, "gro", v]);
    }
}

/// The classes of one cell: the bulk class (iperf3's port) at `rate` with
/// the over-limit action under test, and the default class, which takes
/// demoted frames.
fn classes(rate: u64, over: OverAction) -> Vec<ClassSpec> {
    let burst = default_burst(rate)
        * std::env::var("XB")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(1);
    vec![
        ClassSpec {
            class: DEFAULT,
            rate_bits: rate / 10,
            ceil_bits: rate,
            prio: 4,
            over: OverAction::Drop,
            burst_bytes: burst,
            police: false,
        },
        ClassSpec {
            class: BULK,
            rate_bits: rate / 10 * 9,
            ceil_bits: rate,
            prio: 4,
            over,
            burst_bytes: burst,
            police: true,
        },
    ]
}

/// `tbf` at `rate` as the root qdisc of the A side: a burst of 10 ms at the
/// rate (at least ten frames) and 20 ms of queue.
fn install_tbf(link: &VethLink, rate: u64) {
    let burst = (rate / 8 / 100).max(15_140).to_string();
    let r = format!("{rate}bit");
    let args = [
        "-n",
        link.a.name(),
        "qdisc",
        "add",
        "dev",
        &link.a_if,
        "root",
        "tbf",
        "rate",
        &r,
        "burst",
        &burst,
        "latency",
        "20ms",
    ];
    let status = Command::new("tc").args(args).status().expect("run tc");
    assert!(status.success(), "tc {args:?}");
}

/// Runs one cell; returns the delivered rate in frame bytes, bit/s.
fn cell(shaper: Shaper, offloads: bool, rate: u64, streams: u32) -> f64 {
    let link = VethLink::new(71);
    set_offloads(&link, offloads);
    if matches!(shaper, Shaper::Causeway(OverAction::EcnMark)) {
        link.a.exec(&["sysctl", "-qw", "net.ipv4.tcp_ecn=1"]);
    }
    let mut shaped = None;
    match shaper {
        Shaper::Causeway(over) => {
            let mut s = attach(&link.a, &link.a_if);
            configure(&mut s, rate, &classes(rate, over));
            shaped = Some(s);
        }
        Shaper::Tbf => install_tbf(&link, rate),
    }
    let _server = Iperf3Server::start(&link.b);
    let out = Command::new("ip")
        .args(["netns", "exec", link.a.name(), "iperf3", "-c", &link.b_addr])
        .args(["-p", &BULK_PORT.to_string(), "-P", &streams.to_string()])
        .args(["-t", &SECS.to_string(), "-O", &OMIT.to_string(), "-J"])
        .args(["--connect-timeout", "3000"])
        .stderr(Stdio::null())
        .output()
        .expect("run iperf3 -c");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3 JSON");
    let goodput = report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    if let Some(s) = &shaped {
        let c = s.shaper.counters().expect("counters")[usize::from(BULK)];
        eprintln!(
            "  bulk: sent {} shaped {} dropped {} marked {} demoted {}",
            c.sent_packets, c.shaped, c.dropped, c.marked, c.demoted
        );
    }
    goodput * WIRE_PER_PAYLOAD
}

#[test]
fn every_over_limit_action_keeps_a_tcp_flow_at_its_rate() {
    if skip_unless_root() {
        return;
    }
    let only = std::env::var("CAUSEWAY_MATRIX_CELLS").unwrap_or_default();
    let actions = [
        Shaper::Causeway(OverAction::Drop),
        Shaper::Causeway(OverAction::EcnMark),
        Shaper::Causeway(OverAction::Demote(DEFAULT)),
    ];
    let mut failures = Vec::new();
    let mut table = String::new();
    for offloads in [true, false] {
        let tso = if offloads { "tso-on" } else { "tso-off" };
        for mbit in RATES_MBIT {
            for streams in STREAMS {
                let key = |s: Shaper| format!("{}/{tso}/{mbit}/{streams}", s.name());
                if !only.is_empty()
                    && ![Shaper::Tbf]
                        .iter()
                        .chain(&actions)
                        .any(|s| key(*s).contains(&only))
                {
                    continue;
                }
                let rate = mbit * 1_000_000;
                let tbf = cell(Shaper::Tbf, offloads, rate, streams);
                let floor = (FLOOR * rate as f64).min(TBF_SLACK * tbf);
                let mut row = format!("{tso} {mbit:>3} Mbit/s x{streams}: tbf {:6.1}", tbf / 1e6);
                for action in actions {
                    if !only.is_empty() && !key(action).contains(&only) {
                        continue;
                    }
                    let got = cell(action, offloads, rate, streams);
                    row += &format!("  {} {:6.1}", action.name(), got / 1e6);
                    if got < floor {
                        failures.push(format!(
                            "{}: {:.1} Mbit/s < floor {:.1} (tbf {:.1})",
                            key(action),
                            got / 1e6,
                            floor / 1e6,
                            tbf / 1e6
                        ));
                    }
                }
                eprintln!("{row}");
                table += &row;
                table.push('\n');
            }
        }
    }
    eprintln!("{table}");
    assert!(failures.is_empty(), "cells below the floor: {failures:#?}");
}
