//! EDT pacing (`pacing = "edt"`) against the kernel's HTB at the same
//! rate: two namespaces joined by a veth, `causeway --netns A attach
//! --policy` with one paced class for iperf3's port (the controller puts
//! `fq` at the root), one TCP stream and eight at 20 and 100 Mbit/s (TCG
//! drives little more than 200). Each cell must deliver, in frame bytes
//! (the root qdisc's sent bytes over 2 s after the first), at least
//! min(0.95 × the configured rate, 0.97 × HTB's rate measured the same way
//! on the same link): 0.95× wherever HTB reaches 0.97 of that, HTB's rate
//! less 3 % where the loaded guest cannot drive the rate. Being below HTB
//! by more than the noise while above 0.95× is reported (the fact line),
//! not failed.
//! A cell below its floor is measured again, up to three times in all
//! (TCG on a shared machine).
//! The development host's kernel has no `fq`, so this runs in the VM stage.
//!
//! `CAUSEWAY_EDT_BENCH=<runs>` (forwarded to the guest by `cargo xtask
//! vm-test`) turns it into the benchmark of docs/BENCHMARKS.md: every cell
//! `runs` times for EDT, HTB and `tbf`, printed as `CW-FACT edt-bench`
//! lines, without the assertions.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use causeway_test_support::{netns::VethLink, require_root};
use causeway_tests::causeway_cli::Attachment;
use causeway_tests::shaper_net::{install_tbf, root_qdisc_bytes, root_qdisc_kind, tc_a as tc};

use super::fact;

const PORT: u16 = 5201;
const OMIT_S: u64 = 1;
const WINDOW_S: u64 = 2;
const FLOOR: f64 = 0.95;
/// Measurement noise allowed against HTB on a shared machine.
const REF_SLACK: f64 = 0.97;
const RATES_MBIT: [u64; 2] = [20, 100];
/// Measurements of a cell before it counts as below its floor. Under TCG
/// at host load ~5, single 100 Mbit/s cells fell to 93.5 (EDT) and 96.2
/// (HTB) twice in a row once; quiet runs give 98.8–100.6.
const TRIES: u32 = 3;
const STREAMS: [u32; 2] = [1, 8];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shaper {
    Edt,
    Htb,
    Tbf,
}

impl Shaper {
    fn name(self) -> &'static str {
        match self {
            Shaper::Edt => "edt",
            Shaper::Htb => "htb",
            Shaper::Tbf => "tbf",
        }
    }
}

fn policy(mbit: u64) -> String {
    format!(
        r#"
[shaping]
link_rate = "10gbit"

[[class]]
id = 0
name = "default"

[[class]]
id = 5
name = "bulk"
shaping = {{ rate = "{mbit}mbit", pacing = "edt" }}

[[rule]]
priority = 20
protocol = "tcp"
dst_port = {PORT}
class = "bulk"
"#
    )
}

/// The kernel's HTB alone: one class at the rate that takes everything,
/// with HTB's burst of 10 ms at the rate (at least ten frames), as
/// Causeway's own hierarchy sizes it.
fn install_htb(link: &VethLink, rate: u64) {
    let burst = (rate / 8 / 100).max(15_140).to_string();
    let r = format!("{rate}bit");
    let dev = link.a_if.as_str();
    tc(
        link,
        &[
            "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10",
        ],
    );
    let class = [
        "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", &r, "ceil",
        &r, "burst", &burst, "cburst", &burst,
    ];
    tc(link, &class);
}

struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (up to 10 s) until iperf3 listens in B: under TCG a fixed
/// pause was sometimes too short and the client found no server.
fn wait_for_listener(link: &VethLink) {
    let port = format!("sport = :{PORT}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let out = link.b.exec(&["ss", "-Hltn", &port]);
        if out.status.success() && !out.stdout.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("  iperf3 -s not listening after 10 s");
}

/// Runs one cell, a second time if iperf3 failed (a client that found
/// no server, seen under TCG); returns the rate in frame bytes, bit/s.
fn cell(shaper: Shaper, mbit: u64, streams: u32) -> f64 {
    match try_cell(shaper, mbit, streams) {
        Some(rate) => rate,
        None => try_cell(shaper, mbit, streams).unwrap_or(0.0),
    }
}

/// One run of a cell; `None` when iperf3 failed.
fn try_cell(shaper: Shaper, mbit: u64, streams: u32) -> Option<f64> {
    let rate = mbit * 1_000_000;
    let link = VethLink::new(81);
    let mut _attached = None;
    match shaper {
        Shaper::Edt => {
            let file = std::env::temp_dir()
                .join(format!("causeway-edt-{}-{mbit}.toml", std::process::id()));
            std::fs::write(&file, policy(mbit)).expect("write policy");
            let path = file.to_str().expect("utf-8 path");
            _attached = Some(Attachment::new(
                link.a.name(),
                &link.a_if,
                &["--policy", path],
            ));
            let _ = std::fs::remove_file(&file);
            assert_eq!(root_qdisc_kind(&link), "fq", "attach installs fq");
        }
        Shaper::Htb => install_htb(&link, rate),
        Shaper::Tbf => install_tbf(&link, rate),
    }
    let _server = Server(
        Command::new("ip")
            .args(["netns", "exec", link.b.name(), "iperf3", "-s", "-1"])
            .args(["-p", &PORT.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start iperf3 -s"),
    );
    wait_for_listener(&link);
    let client = Command::new("ip")
        .args(["netns", "exec", link.a.name(), "iperf3", "-c", &link.b_addr])
        .args(["-p", &PORT.to_string(), "-P", &streams.to_string()])
        .args(["-t", &(OMIT_S + WINDOW_S + 1).to_string()])
        .args(["--connect-timeout", "5000"])
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
        eprintln!("  {}: iperf3 -c failed ({status})", shaper.name());
        return None;
    }
    Some((b1 - b0) as f64 * 8.0 / (t1 - t0).as_secs_f64())
}

/// The load average, as `uptime` shows it.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn bench(runs: u32) {
    for mbit in RATES_MBIT {
        for streams in STREAMS {
            for shaper in [Shaper::Edt, Shaper::Htb, Shaper::Tbf] {
                let got: Vec<String> = (0..runs)
                    .map(|_| format!("{:.1}", cell(shaper, mbit, streams) / 1e6))
                    .collect();
                fact(
                    "edt-bench",
                    format!(
                        "{mbit}mbit x{streams} {} runs={} load={}",
                        shaper.name(),
                        got.join(","),
                        load()
                    ),
                );
            }
        }
    }
}

/// Measures a cell up to [`TRIES`] times until it reaches `floor`;
/// returns the best rate.
fn best_of(shaper: Shaper, mbit: u64, streams: u32, floor: f64) -> f64 {
    let mut best = 0.0f64;
    for _ in 0..TRIES {
        best = best.max(cell(shaper, mbit, streams));
        if best >= floor {
            break;
        }
    }
    best
}

#[test]
#[ignore = "needs sch_fq (not in the host kernel): runs in the VM stage, cargo xtask vm-test"]
fn edt_pacing_keeps_tcp_at_its_rate_and_no_worse_than_htb() {
    require_root!();
    if let Some(runs) = std::env::var("CAUSEWAY_EDT_BENCH")
        .ok()
        .and_then(|r| r.parse().ok())
    {
        return bench(runs);
    }
    let mut failures = Vec::new();
    for mbit in RATES_MBIT {
        for streams in STREAMS {
            let rate = (mbit * 1_000_000) as f64;
            let htb = best_of(Shaper::Htb, mbit, streams, FLOOR * rate);
            let floor = (FLOOR * rate).min(REF_SLACK * htb);
            let edt = best_of(Shaper::Edt, mbit, streams, floor);
            let row = format!(
                "{mbit}mbit x{streams}: edt {:.1} htb {:.1} floor {:.1} load {}",
                edt / 1e6,
                htb / 1e6,
                floor / 1e6,
                load()
            );
            fact("edt-vs-htb", &row);
            if edt < floor {
                failures.push(row);
            }
        }
    }
    assert!(failures.is_empty(), "cells below the floor: {failures:#?}");
}
