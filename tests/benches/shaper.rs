//! The egress shaper's benchmarks (as root):
//!
//! 1. cost per frame of `causeway_tc_egress` through BPF_PROG_TEST_RUN,
//!    as a ratio to `causeway_tc_pass` (a TC program that only returns
//!    TC_ACT_OK, in the same object) measured in the same run on the same
//!    frame, on each path (classify only; bucket conforms; bucket over the
//!    limit with ECN marking; DSCP rewrite);
//! 2. shaping accuracy: a bulk TCP flow through a veth shaped at 10, 50, 200
//!    and 1000 Mbit/s, with the program policing (ECN) and without (HTB
//!    only), delivered wire rate vs configured;
//! 3. isolation: p99 RTT of control-class probes, idle and under a
//!    saturating bulk flow, with Causeway attached and detached (the same
//!    rate as one plain HTB class).
//!
//! Run: `cargo bench -p causeway-tests --bench shaper`. `CAUSEWAY_BENCH_REPEAT`
//! overrides the TestRun repeat count (default 1,000,000);
//! `CAUSEWAY_BENCH_ONLY=cost|accuracy|isolation` runs one part.

mod shaper_traffic;

use aya::Ebpf;
use causeway::{
    classifier::{ClassifierMaps, PortRange, Rule, RuleSet, Verdict},
    shaper::{
        bucket::MAX_RATE_BITS, htb::leaf_classid, BucketParams, ClassShaping, OverAction,
        ShaperMaps, ShapingTable,
    },
};
use causeway_test_support::{
    bpf::{self, SkbCtx, TC_EGRESS, TC_PASS, TC_STEER},
    frames::*,
    root_or_skip,
};

const ROUNDS: usize = 7;

fn median(mut xs: Vec<u128>) -> u128 {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

fn main() {
    if !root_or_skip("benches/shaper") {
        return;
    }
    let only = std::env::var("CAUSEWAY_BENCH_ONLY").ok();
    let part = |name: &str| only.as_deref().is_none_or(|o| o == name);
    if part("cost") {
        cost();
    }
    if part("accuracy") {
        shaper_traffic::accuracy();
    }
    if part("isolation") {
        shaper_traffic::isolation();
    }
}

/// An IPv4 UDP frame to port 7007 (the control rule), ECT(0).
fn frame() -> Vec<u8> {
    let ip = V4 {
        frag: DONT_FRAG,
        ..V4::new([10, 1, 0, 1], [10, 1, 0, 2], 17).with_tos(0x02)
    };
    cat(&[
        &eth(&[], ETH_IPV4),
        &ipv4(ip, &udp_with(5000, 7007, &[0xab; 1000], 0)),
    ])
}

/// 16 rules; the frame matches the last one.
fn rules() -> RuleSet {
    let rule = |priority: u32, port: u16, class| Rule {
        priority,
        src: None,
        dst: None,
        proto: Some(17),
        src_ports: None,
        dst_ports: Some(PortRange::new(port, port).expect("port")),
        dscp: None,
        class,
        verdict: Verdict::Pass,
    };
    let mut rules: Vec<Rule> = (0..15)
        .map(|i| rule(i, 20_000 + i as u16, 1 + (i % 10) as u8))
        .collect();
    rules.push(rule(100, 7007, 3));
    RuleSet::new(rules).expect("valid rules")
}

fn run(ebpf: &Ebpf, name: &str, frame: &[u8], repeat: u32) -> u128 {
    bpf::run_tc(ebpf, name, frame, &SkbCtx::default(), repeat)
        .0
        .duration
        .as_nanos()
}

fn cost() {
    let repeat = causeway_test_support::harness::bench_repeat(1_000_000);
    let ebpf = bpf::load(
        causeway::ebpf_object::EBPF_OBJECT,
        &[],
        &[TC_EGRESS, TC_PASS, TC_STEER],
    );
    ClassifierMaps::from_ebpf(&ebpf)
        .expect("classifier maps")
        .apply(&rules())
        .expect("rules");
    let mut maps = ShaperMaps::from_ebpf(&ebpf).expect("shaper maps");
    let frame = frame();
    let fast = BucketParams::new(MAX_RATE_BITS, 1 << 30, 1514).expect("bucket");
    let entry = |bucket, over, dscp| ClassShaping {
        bucket,
        over,
        dscp,
        priority: Some(leaf_classid(3)),
    };
    type Setup = Box<dyn Fn(&mut ShaperMaps)>;
    let paths: Vec<(&str, Setup)> = vec![
        (
            "classify + count (no shaping)",
            Box::new(|m: &mut ShaperMaps| {
                m.apply(&ShapingTable::default())
                    .map(|_| ())
                    .expect("apply")
            }),
        ),
        (
            "bucket conforms, priority",
            Box::new(move |m: &mut ShaperMaps| {
                let t = ShapingTable::new([(3, entry(Some(fast), OverAction::Drop, None))])
                    .expect("table");
                m.apply(&t).expect("apply");
            }),
        ),
        (
            "bucket over limit, ECN CE",
            Box::new(move |m: &mut ShaperMaps| {
                let t = ShapingTable::new([(3, entry(Some(fast), OverAction::EcnMark, None))])
                    .expect("table");
                m.apply(&t).expect("apply");
                m.set_bucket_tat(3, u64::MAX / 2).expect("bucket");
            }),
        ),
        (
            "bucket conforms, DSCP rewrite",
            Box::new(move |m: &mut ShaperMaps| {
                let t = ShapingTable::new([(3, entry(Some(fast), OverAction::Drop, Some(46)))])
                    .expect("table");
                m.apply(&t).expect("apply");
                m.set_bucket_tat(3, 0).expect("bucket");
            }),
        ),
    ];
    println!("TC egress shaper cost per frame (BPF_PROG_TEST_RUN, 1042-byte IPv4 UDP frame, 16 rules, repeat {repeat}, median of {ROUNDS} rounds)");
    println!(
        "{:<34} {:>12} {:>14} {:>7}",
        "path", "pass ns", "shaper ns", "ratio"
    );
    for (name, setup) in &paths {
        setup(&mut maps);
        let (mut base, mut shaper) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            base.push(run(&ebpf, TC_PASS, &frame, repeat));
            shaper.push(run(&ebpf, TC_EGRESS, &frame, repeat));
        }
        let (b, s) = (median(base), median(shaper));
        println!(
            "{name:<34} {b:>12} {s:>14} {:>6.2}x",
            s as f64 / b.max(1) as f64
        );
    }
    println!("(with repeat, the kernel reruns one skb: a rewrite writes the frame once, later runs find it done)");
    steer_cost(&ebpf, &frame, repeat);
}

/// The path-steering program (TC ingress) on the same frame: a flow not in
/// the table, and one that is (mark set), with 10,000 other flows listed.
fn steer_cost(ebpf: &Ebpf, frame: &[u8], repeat: u32) {
    use bpf_maps::paths::FlowKey;
    let mut maps = causeway::paths::PathMaps::from_ebpf(ebpf).expect("path maps");
    maps.set_path(1, 0x1001, true).expect("path");
    for i in 0..10_000u32 {
        let [a, b, c, d] = i.to_be_bytes();
        let key = FlowKey::v4([10, a, b, c], [10, 9, 9, d], 6, 40_000, 5201);
        maps.route(&key, 1).expect("route");
    }
    // The frame's own flow (see `frame`): 10.1.0.1:5000 → 10.1.0.2:7007, UDP.
    let own = FlowKey::v4([10, 1, 0, 1], [10, 1, 0, 2], 17, 5000, 7007);
    println!();
    println!("TC ingress path steering cost per frame (same frame, 10,000 flows listed)");
    println!(
        "{:<34} {:>12} {:>14} {:>7}",
        "path", "pass ns", "steer ns", "ratio"
    );
    for (name, listed) in [("flow not listed", false), ("flow listed, mark set", true)] {
        if listed {
            maps.route(&own, 1).expect("route");
        }
        let (mut base, mut steer) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            base.push(run(ebpf, TC_PASS, frame, repeat));
            steer.push(run(ebpf, TC_STEER, frame, repeat));
        }
        let (b, s) = (median(base), median(steer));
        println!(
            "{name:<34} {b:>12} {s:>14} {:>6.2}x",
            s as f64 / b.max(1) as f64
        );
    }
}
