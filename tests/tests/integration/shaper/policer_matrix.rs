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
//! front of Causeway's HTB. Each cell runs iperf3 for 4 s on a fresh veth
//! pair and measures the root qdisc's sent bytes (frame bytes, GSO frames
//! with every segment's headers) over 2 s after the first; the whole
//! matrix (48 cells with `tbf`) takes about 4 minutes.
//! A cell below its floor is measured once more (2 cores shared with other
//! work: single runs at 800 Mbit/s fall short for `tbf` too) and fails
//! only if it stays below. `CAUSEWAY_MATRIX_CELLS=<substring>` runs only the cells whose name
//! contains it (e.g. `drop/tso-on/200`).

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use causeway::{policy::shaping::default_burst, shaper::OverAction};
use causeway_test_support::{netns::VethLink, require_root};
use causeway_tests::shaper_net::*;

/// Seconds of the flow before the measured window (slow start), and the
/// window: bytes the root qdisc sent in it, at the length it charges.
const OMIT_S: u64 = 1;
const WINDOW_S: u64 = 2;
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

/// Runs one cell; returns the rate the link sent in frame bytes, bit/s.
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
    let client = Command::new("ip")
        .args(["netns", "exec", link.a.name(), "iperf3", "-c", &link.b_addr])
        .args(["-p", &BULK_PORT.to_string(), "-P", &streams.to_string()])
        .args(["-t", &(OMIT_S + WINDOW_S + 1).to_string()])
        .args(["--connect-timeout", "3000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run iperf3 -c");
    std::thread::sleep(Duration::from_secs(OMIT_S));
    let (b0, t0) = (root_qdisc_bytes(&link), Instant::now());
    std::thread::sleep(Duration::from_secs(WINDOW_S));
    let (b1, t1) = (root_qdisc_bytes(&link), Instant::now());
    let status = client.wait_with_output().expect("iperf3 -c").status;
    if !status.success() {
        // Counted as nothing sent: the cell is measured again.
        eprintln!("  {}: iperf3 -c failed ({status})", shaper.name());
        return 0.0;
    }
    if let Some(s) = &shaped {
        let c = s.shaper.counters().expect("counters")[usize::from(BULK)];
        eprintln!(
            "  {}: bulk sent {} shaped {} dropped {} marked {} demoted {}",
            shaper.name(),
            c.sent_packets,
            c.shaped,
            c.dropped,
            c.marked,
            c.demoted
        );
    }
    (b1 - b0) as f64 * 8.0 / (t1 - t0).as_secs_f64()
}

#[test]
fn every_over_limit_action_keeps_a_tcp_flow_at_its_rate() {
    require_root!();
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
                let mut tbf = cell(Shaper::Tbf, offloads, rate, streams);
                if tbf < FLOOR * rate as f64 {
                    // Re-measured like a miss, so that a bad run does not
                    // lower the floor.
                    tbf = tbf.max(cell(Shaper::Tbf, offloads, rate, streams));
                }
                let floor = (FLOOR * rate as f64).min(TBF_SLACK * tbf);
                let mut row = format!("{tso} {mbit:>3} Mbit/s x{streams}: tbf {:6.1}", tbf / 1e6);
                for action in actions {
                    if !only.is_empty() && !key(action).contains(&only) {
                        continue;
                    }
                    let mut got = cell(action, offloads, rate, streams);
                    if got < floor {
                        // A miss is measured once more (the machine is shared);
                        // the cell fails only if it stays below.
                        got = got.max(cell(action, offloads, rate, streams));
                    }
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
