//! The shaper benchmark's network part: namespaces joined by a veth pair,
//! the TC program attached on the A side with Causeway's HTB, iperf3 bulk
//! traffic and UDP RTT probes. Everything is removed on drop.

use std::{
    fs::File,
    net::UdpSocket,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use aya::{
    programs::{tc::TcAttachType, SchedClassifier},
    Ebpf,
};
use causeway::{
    classifier::{ClassifierMaps, PortRange, Rule, RuleSet, Verdict},
    policy::shaping::default_burst,
    shaper::{
        htb::{leaf_classid, Htb, HtbLeaf, HtbPlan},
        BucketParams, ClassShaping, OverAction, ShaperMaps, ShapingTable,
    },
};
use nix::sched::{setns, CloneFlags};

const BULK: u8 = 5;
const CONTROL: u8 = 3;
const BULK_PORT: &str = "5201";
const CONTROL_PORT: u16 = 7007;
/// Wire bytes per payload byte of full-sized TCP segments with timestamps.
const WIRE_PER_PAYLOAD: f64 = 1514.0 / 1448.0;

fn sh(args: &[&str]) {
    let status = Command::new(args[0])
        .args(&args[1..])
        .status()
        .expect("run a command");
    assert!(status.success(), "{args:?} failed");
}

/// Two namespaces and a veth pair 10.78.<n>.1 (A) – 10.78.<n>.2 (B).
struct Pair {
    a: String,
    b: String,
}

impl Pair {
    fn new(n: u8) -> Self {
        let pid = std::process::id();
        let pair = Self {
            a: format!("cwbA{pid}x{n}"),
            b: format!("cwbB{pid}x{n}"),
        };
        sh(&["ip", "netns", "add", &pair.a]);
        sh(&["ip", "netns", "add", &pair.b]);
        sh(&[
            "ip", "link", "add", "bva", "netns", &pair.a, "type", "veth", "peer", "name", "bvb",
            "netns", &pair.b,
        ]);
        for (ns, dev, addr) in [(&pair.a, "bva", 1), (&pair.b, "bvb", 2)] {
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("10.78.{n}.{addr}/24"),
                "dev",
                dev,
            ]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        sh(&[
            "ip",
            "netns",
            "exec",
            &pair.a,
            "sysctl",
            "-qw",
            "net.ipv4.tcp_ecn=1",
        ]);
        pair
    }

    fn server_addr(&self) -> String {
        let n = self.a.rsplit('x').next().unwrap_or("0");
        format!("10.78.{n}.2")
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn enter(ns: &str) {
    let file = File::open(format!("/run/netns/{ns}")).expect("open netns");
    setns(file, CloneFlags::CLONE_NEWNET).expect("setns");
}

/// Causeway on A's veth: TC program, rules, HTB and table. Detached on drop.
struct Shaped {
    _ebpf: Ebpf,
    htb: Htb,
}

impl Drop for Shaped {
    fn drop(&mut self) {
        let _ = self.htb.remove();
    }
}

fn attach(pair: &Pair, link_bits: u64, police: bool) -> Shaped {
    let ns = pair.a.clone();
    let ebpf = std::thread::spawn(move || {
        enter(&ns);
        let mut ebpf = Ebpf::load(causeway::ebpf_object::EBPF_OBJECT).expect("load object");
        let prog: &mut SchedClassifier = ebpf
            .program_mut("causeway_tc_egress")
            .expect("program")
            .try_into()
            .expect("classifier");
        prog.load().expect("load");
        prog.attach("bva", TcAttachType::Egress).expect("attach");
        ebpf
    })
    .join()
    .expect("attach thread");
    let rule = |priority, proto, port: u16, class| Rule {
        priority,
        src: None,
        dst: None,
        proto: Some(proto),
        src_ports: None,
        dst_ports: Some(PortRange::new(port, port).expect("port")),
        dscp: None,
        class,
        verdict: Verdict::Pass,
    };
    let rules = RuleSet::new(vec![
        rule(10, 17, CONTROL_PORT, CONTROL),
        rule(20, 6, 5201, BULK),
    ])
    .expect("rules");
    ClassifierMaps::from_ebpf(&ebpf)
        .expect("classifier")
        .apply(&rules)
        .expect("apply rules");
    let leaf = |class, share: u64, prio| HtbLeaf {
        class,
        rate_bits: link_bits / 10 * share,
        ceil_bits: link_bits,
        prio,
        burst_bytes: default_burst(link_bits),
    };
    let plan = HtbPlan {
        link_bits,
        leaves: vec![leaf(0, 1, 3), leaf(CONTROL, 1, 0), leaf(BULK, 8, 4)],
    };
    let htb = Htb::new("bva", Some(&pair.a));
    htb.install(&plan).expect("install HTB");
    let table = ShapingTable::new(plan.leaves.iter().map(|l| {
        let bucket = BucketParams::new(l.ceil_bits, l.burst_bytes, 1514).expect("bucket");
        let over = if l.class == BULK {
            OverAction::EcnMark
        } else {
            OverAction::Drop
        };
        (
            l.class,
            ClassShaping {
                bucket: police.then_some(bucket),
                over,
                dscp: None,
                priority: Some(leaf_classid(l.class)),
            },
        )
    }))
    .expect("table");
    ShaperMaps::from_ebpf(&ebpf)
        .expect("shaper maps")
        .apply(&table)
        .expect("apply table");
    Shaped { _ebpf: ebpf, htb }
}

fn plain_htb(pair: &Pair, link_bits: u64) {
    let rate = format!("{link_bits}bit");
    sh(&[
        "tc", "-n", &pair.a, "qdisc", "add", "dev", "bva", "root", "handle", "1:", "htb",
        "default", "1",
    ]);
    sh(&[
        "tc", "-n", &pair.a, "class", "add", "dev", "bva", "parent", "1:", "classid", "1:1", "htb",
        "rate", &rate,
    ]);
}

/// A bulk TCP run from A to B; the server is killed when this is dropped.
struct Run {
    server: Child,
    client: Child,
    deadline: Instant,
}

impl Drop for Run {
    fn drop(&mut self) {
        for child in [&mut self.client, &mut self.server] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn iperf3(pair: &Pair, secs: u32, omit: u32) -> Run {
    let server = Command::new("ip")
        .args([
            "netns", "exec", &pair.b, "iperf3", "-s", "-1", "-p", BULK_PORT,
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("iperf3 -s");
    std::thread::sleep(Duration::from_millis(500));
    let client = Command::new("ip")
        .args([
            "netns",
            "exec",
            &pair.a,
            "iperf3",
            "-c",
            &pair.server_addr(),
            "-p",
            BULK_PORT,
            "-J",
        ])
        .args([
            "-t",
            &secs.to_string(),
            "-O",
            &omit.to_string(),
            "--connect-timeout",
            "3000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("iperf3 -c");
    let deadline = Instant::now() + Duration::from_secs(u64::from(secs + omit) + 15);
    Run {
        server,
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
            let pair = Pair::new(10 + i as u8 * 3 + u8::from(police));
            let _shaped = attach(&pair, rate, police);
            let r = delivered(iperf3(&pair, 5, 2));
            cells.push(format!(
                "{:.1} ({:+.2}%)",
                r / 1e6,
                (r / rate as f64 - 1.0) * 100.0
            ));
        }
        let pair = Pair::new(12 + i as u8 * 3);
        plain_htb(&pair, rate);
        let r = delivered(iperf3(&pair, 5, 2));
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

fn probe(pair: &Pair, count: usize) -> Vec<f64> {
    let (ns, target) = (
        pair.a.clone(),
        format!("{}:{CONTROL_PORT}", pair.server_addr()),
    );
    std::thread::spawn(move || {
        enter(&ns);
        realtime();
        let sock = UdpSocket::bind("0.0.0.0:0").expect("bind");
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
        let mut rtts = Vec::new();
        let mut buf = [0u8; 64];
        for seq in 0..count as u64 {
            let sent = Instant::now();
            sock.send_to(&seq.to_be_bytes(), &target).expect("send");
            while let Ok((n, _)) = sock.recv_from(&mut buf) {
                if n == 8 && buf[..8] == seq.to_be_bytes() {
                    rtts.push(sent.elapsed().as_secs_f64() * 1e6);
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        rtts
    })
    .join()
    .expect("probe thread")
}

fn realtime() {
    let tid = nix::unistd::gettid().to_string();
    sh(&["chrt", "-f", "-p", "50", &tid]);
}

fn echo(pair: &Pair) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (flag, ns, bind) = (
        stop.clone(),
        pair.b.clone(),
        format!("{}:{CONTROL_PORT}", pair.server_addr()),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        enter(&ns);
        realtime();
        let sock = UdpSocket::bind(&bind).expect("bind echo");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        tx.send(()).expect("ready");
        let mut buf = [0u8; 64];
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                let _ = sock.send_to(&buf[..n], from);
            }
        }
    });
    rx.recv().expect("echo ready");
    stop
}

fn p99(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[((xs.len() as f64 - 1.0) * 0.99).round() as usize]
}

/// (idle p99, loaded p99) over three alternating rounds.
fn idle_and_loaded(pair: &Pair) -> (f64, f64) {
    let stop = echo(pair);
    let (mut idle, mut loaded) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        idle.extend(probe(pair, 500));
        let run = iperf3(pair, 4, 0);
        std::thread::sleep(Duration::from_millis(1500));
        loaded.extend(probe(pair, 500));
        let _ = delivered(run);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    (p99(idle), p99(loaded))
}

pub fn isolation() {
    let link_bits = 100_000_000;
    println!("\nIsolation: control-class UDP RTT p99 (µs), idle vs one saturating bulk TCP flow, link shaped at 100 Mbit/s");
    println!(
        "{:<34} {:>10} {:>12} {:>8}",
        "", "idle p99", "loaded p99", "ratio"
    );
    let pair = Pair::new(40);
    let shaped = attach(&pair, link_bits, true);
    let (i, l) = idle_and_loaded(&pair);
    println!(
        "{:<34} {i:>10.0} {l:>12.0} {:>7.2}x",
        "Causeway attached",
        l / i
    );
    drop(shaped);
    drop(pair);
    let pair = Pair::new(41);
    plain_htb(&pair, link_bits);
    let (i, l) = idle_and_loaded(&pair);
    println!(
        "{:<34} {i:>10.0} {l:>12.0} {:>7.2}x",
        "detached (one plain HTB class)",
        l / i
    );
}
