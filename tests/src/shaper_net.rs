//! Shared by the `shaper_*` tests and the shaper benchmark: a veth link
//! whose A side runs the TC egress program (loaded and attached by this
//! process through aya, TCX) with Causeway's HTB hierarchy, plus traffic
//! tools (iperf3, a UDP echo-based RTT probe). Everything is torn down on
//! drop.

use std::{
    net::UdpSocket,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use aya::{programs::tc::TcAttachType, Ebpf};
use causeway::{
    classifier::{ClassifierMaps, PortRange, Rule, RuleSet, Verdict},
    shaper::{
        htb::{leaf_classid, Htb, HtbLeaf, HtbPlan, RootQdisc},
        BucketParams, ClassShaping, OverAction, ShaperMaps, ShapingTable,
    },
};
use causeway_test_support::{
    bpf::{self, TC_EGRESS},
    netns::{Netns, VethLink},
};

pub const DEFAULT: u8 = 0;
pub const CONTROL: u8 = 3;
pub const BULK: u8 = 5;
/// iperf3 server port (TCP and UDP): the bulk class.
pub const BULK_PORT: u16 = 5201;
/// UDP echo port: the control class.
pub const CONTROL_PORT: u16 = 7007;
const FRAME: u64 = 1514;

/// How the threads of the RTT prober and the echo server are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sched {
    /// The default policy.
    Normal,
    /// SCHED_FIFO (see [`make_realtime`]).
    Realtime,
}

impl Sched {
    fn apply(self) {
        if self == Sched::Realtime {
            make_realtime();
        }
    }
}

/// The rules every shaper test uses: iperf3 → bulk, echo → control.
pub fn rules() -> RuleSet {
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
    RuleSet::new(vec![
        rule(10, 17, CONTROL_PORT, CONTROL),
        rule(20, 6, BULK_PORT, BULK),
        rule(21, 17, BULK_PORT, BULK),
    ])
    .expect("valid rules")
}

/// The A side of a link, shaped by Causeway.
pub struct Shaped {
    pub ebpf: Ebpf,
    pub shaper: ShaperMaps,
    pub classifier: ClassifierMaps,
    pub htb: Htb,
}

impl Drop for Shaped {
    fn drop(&mut self) {
        // The TCX link goes with `ebpf`; the qdisc must be removed by hand.
        let _ = self.htb.remove();
    }
}

/// Loads the object and attaches [`TC_EGRESS`] to `iface` in `ns`.
pub fn attach(ns: &Netns, iface: &str) -> Shaped {
    let enter_ns = ns.enterer();
    let iface_owned = iface.to_string();
    // Attach from a thread inside the namespace (interface names resolve
    // there); the link keeps working after the thread is gone.
    let ebpf = std::thread::spawn(move || {
        enter_ns();
        let mut ebpf = bpf::load(causeway::ebpf_object::EBPF_OBJECT, &[], &[TC_EGRESS]);
        // Without TCX (before 6.6) aya attaches through a clsact qdisc,
        // which must exist; it goes with the test's namespace.
        let tcx = aya::util::KernelVersion::current()
            .is_ok_and(|v| v >= aya::util::KernelVersion::new(6, 6, 0));
        if !tcx {
            aya::programs::tc::qdisc_add_clsact(&iface_owned).expect("add clsact");
        }
        bpf::tc_mut(&mut ebpf, TC_EGRESS)
            .attach(&iface_owned, TcAttachType::Egress)
            .expect("attach TC egress");
        ebpf
    })
    .join()
    .expect("attach thread");
    let mut classifier = ClassifierMaps::from_ebpf(&ebpf).expect("classifier maps");
    classifier.apply(&rules()).expect("apply rules");
    let shaper = ShaperMaps::from_ebpf(&ebpf).expect("shaper maps");
    Shaped {
        ebpf,
        shaper,
        classifier,
        htb: Htb::new(iface, Some(ns.name())),
    }
}

/// Class settings of a test: (class, rate, ceil, prio, over-limit action).
pub struct ClassSpec {
    pub class: u8,
    pub rate_bits: u64,
    pub ceil_bits: u64,
    pub prio: u8,
    pub over: OverAction,
    pub burst_bytes: u64,
    /// Whether the TC program's token bucket polices the class.
    pub police: bool,
}

/// Installs HTB and the shaping table for `classes` (class 0 included).
pub fn configure(shaped: &mut Shaped, link_bits: u64, classes: &[ClassSpec]) {
    let plan = HtbPlan {
        link_bits,
        leaves: classes
            .iter()
            .map(|c| HtbLeaf {
                class: c.class,
                rate_bits: c.rate_bits,
                ceil_bits: c.ceil_bits,
                prio: c.prio,
                burst_bytes: c.burst_bytes,
            })
            .collect(),
        root: RootQdisc::Htb,
    };
    shaped.htb.install(&plan).expect("install HTB");
    let table = ShapingTable::new(classes.iter().map(|c| {
        let bucket = BucketParams::new(c.ceil_bits, c.burst_bytes, FRAME).expect("bucket");
        (
            c.class,
            ClassShaping {
                bucket: c.police.then_some(bucket),
                over: c.over,
                dscp: None,
                priority: Some(leaf_classid(c.class)),
            },
        )
    }))
    .expect("shaping table");
    shaped.shaper.apply(&table).expect("apply shaping");
}

/// Bytes HTB has sent from the leaf of `class` (wire length, as HTB
/// charges it), from `tc -s class show`.
pub fn htb_sent_bytes(ns: &Netns, iface: &str, class: u8) -> u64 {
    let out = Command::new("tc")
        .args(["-n", ns.name(), "-s", "class", "show", "dev", iface])
        .output()
        .expect("tc -s class show");
    let text = String::from_utf8_lossy(&out.stdout);
    let id = format!("class htb ca:{:x} ", 0x10 + u16::from(class));
    let block = text.split("\nclass ").map(|b| {
        if b.starts_with("class ") {
            b.to_string()
        } else {
            format!("class {b}")
        }
    });
    for b in block {
        if b.starts_with(&id) {
            let sent = b.split("Sent ").nth(1).expect("Sent field");
            return sent
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("byte count");
        }
    }
    panic!("no HTB class {id} in:\n{text}");
}

/// A running iperf3 server in `ns`, killed on drop.
pub struct Iperf3Server(Child);

impl Iperf3Server {
    pub fn start(ns: &Netns) -> Self {
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns.name(),
                "iperf3",
                "-s",
                "-p",
                &BULK_PORT.to_string(),
                "-1",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start iperf3 -s");
        std::thread::sleep(Duration::from_millis(300));
        Self(child)
    }
}

impl Drop for Iperf3Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts an iperf3 TCP client in `ns` to `server` for `secs` seconds.
pub fn iperf3_client(ns: &Netns, server: &str, secs: u32) -> Child {
    iperf3_client_omitting(ns, server, secs, 0)
}

/// Like [`iperf3_client`], after `omit` seconds not counted in the report
/// (`iperf3 -O`).
pub fn iperf3_client_omitting(ns: &Netns, server: &str, secs: u32, omit: u32) -> Child {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "iperf3",
            "-c",
            server,
            "-p",
            &BULK_PORT.to_string(),
        ])
        .args(["-t", &secs.to_string(), "-O", &omit.to_string(), "-J"])
        .args(["--connect-timeout", "3000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start iperf3 -c")
}

/// Samples HTB's sent bytes of `class` over `window` after `warmup`;
/// returns the rate in bit/s.
pub fn measure_rate(link: &VethLink, class: u8, warmup: Duration, window: Duration) -> f64 {
    std::thread::sleep(warmup);
    let (b0, t0) = (htb_sent_bytes(&link.a, &link.a_if, class), Instant::now());
    std::thread::sleep(window);
    let (b1, t1) = (htb_sent_bytes(&link.a, &link.a_if, class), Instant::now());
    (b1 - b0) as f64 * 8.0 / (t1 - t0).as_secs_f64()
}

/// A UDP echo server on `CONTROL_PORT` in `ns`, running on a thread that
/// entered the namespace, scheduled as `sched`; stops when dropped (its
/// socket times out).
pub struct EchoServer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EchoServer {
    pub fn start(ns: &Netns, addr: &str, sched: Sched) -> Self {
        let enter_ns = ns.enterer();
        let bind = format!("{addr}:{CONTROL_PORT}");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            enter_ns();
            sched.apply();
            let sock = UdpSocket::bind(&bind).expect("bind echo");
            sock.set_read_timeout(Some(Duration::from_millis(100)))
                .expect("timeout");
            ready_tx.send(()).expect("ready");
            let mut buf = [0u8; 2048];
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let _ = sock.send_to(&buf[..n], from);
                }
            }
        });
        ready_rx.recv().expect("echo server ready");
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends `count` probes from `ns` to the echo server, one every `gap`,
/// from a thread scheduled as `sched`, and returns the RTTs of those
/// answered, in µs.
pub fn probe_rtts(ns: &Netns, server: &str, count: usize, gap: Duration, sched: Sched) -> Vec<f64> {
    let enter_ns = ns.enterer();
    let target = format!("{server}:{CONTROL_PORT}");
    std::thread::spawn(move || {
        enter_ns();
        sched.apply();
        let sock = UdpSocket::bind("0.0.0.0:0").expect("bind probe");
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
        let mut rtts = Vec::with_capacity(count);
        let mut buf = [0u8; 128];
        for seq in 0..count as u64 {
            let sent = Instant::now();
            sock.send_to(&seq.to_be_bytes(), &target)
                .expect("send probe");
            // Skip stale answers to earlier probes.
            while let Ok((n, _)) = sock.recv_from(&mut buf) {
                if n == 8 && buf[..8] == seq.to_be_bytes() {
                    rtts.push(sent.elapsed().as_secs_f64() * 1e6);
                    break;
                }
            }
            std::thread::sleep(gap);
        }
        rtts
    })
    .join()
    .expect("probe thread")
}

/// Puts the calling thread in SCHED_FIFO, so that RTT probes measure the
/// network path (queues, qdisc), not how long a shared 2-core machine
/// takes to schedule the prober and the echo server next to iperf3.
pub fn make_realtime() {
    let tid = nix::unistd::gettid().to_string();
    let status = Command::new("chrt")
        .args(["-f", "-p", "50", &tid])
        .status()
        .expect("run chrt");
    assert!(status.success(), "chrt -f -p 50 {tid} failed");
}

/// The `q`-quantile of `samples` (sorted in place).
pub fn quantile(samples: &mut [f64], q: f64) -> f64 {
    assert!(!samples.is_empty(), "no samples");
    samples.sort_by(|a, b| a.total_cmp(b));
    let idx = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[idx]
}

/// `tc -n <A side> ARGS` on `link`; panics with tc's stderr on failure.
pub fn tc_a(link: &VethLink, args: &[&str]) {
    let out = Command::new("tc")
        .args(["-n", link.a.name()])
        .args(args)
        .output()
        .expect("run tc");
    assert!(
        out.status.success(),
        "tc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The A side's root qdisc, as `tc -s -j qdisc show` reports it.
pub fn root_qdisc(link: &VethLink) -> serde_json::Value {
    let out = Command::new("tc")
        .args(["-n", link.a.name(), "-s", "-j", "qdisc", "show", "dev"])
        .arg(&link.a_if)
        .output()
        .expect("tc -s qdisc show");
    let qdiscs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("tc JSON");
    qdiscs
        .as_array()
        .and_then(|q| q.iter().find(|q| q["root"].as_bool() == Some(true)))
        .cloned()
        .unwrap_or_else(|| panic!("no root qdisc in {qdiscs}"))
}

/// Bytes the A side's root qdisc (Causeway's HTB or fq, or `tbf`) has sent,
/// at the length it charges: GSO frames with every segment's headers.
pub fn root_qdisc_bytes(link: &VethLink) -> u64 {
    let q = root_qdisc(link);
    q["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no byte count in {q}"))
}

/// The A side's root qdisc's kind (`htb`, `fq`, `tbf`...).
pub fn root_qdisc_kind(link: &VethLink) -> String {
    root_qdisc(link)["kind"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `tbf` at `rate` (bit/s) as the root qdisc of the A side: a burst of
/// 10 ms at the rate (at least ten frames) and 20 ms of queue.
pub fn install_tbf(link: &VethLink, rate: u64) {
    let burst = (rate / 8 / 100).max(15_140).to_string();
    let r = format!("{rate}bit");
    let dev = link.a_if.as_str();
    tc_a(
        link,
        &[
            "qdisc", "add", "dev", dev, "root", "tbf", "rate", &r, "burst", &burst, "latency",
            "20ms",
        ],
    );
}
