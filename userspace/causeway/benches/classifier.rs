//! Cost per frame of the XDP classifier, measured by the kernel through
//! BPF_PROG_TEST_RUN with a large repeat count, for policies of 1, 16 and 256
//! rules, relative to `causeway_xdp_pass` (an XDP program that only returns
//! XDP_PASS, built into the same object as the baseline) measured in the same
//! run on the same frame.
//!
//! Run: `cargo bench -p causeway --bench classifier` (as root).
//! `CAUSEWAY_BENCH_REPEAT` overrides the repeat count (default 2,000,000);
//! `CAUSEWAY_BENCH_RULES=256` (a comma-separated list) measures only those
//! policy sizes and leaves out the admission section.

use std::net::Ipv4Addr;

use aya::Ebpf;
use causeway::{
    classifier::{
        Admission, ClassifierMaps, IpPrefix, PortRange, Rule, RuleSet, UnclassifiedAction, Verdict,
    },
    ebpf_object::EBPF_OBJECT,
};
use causeway_test_support::{
    bpf::{self, XDP_CLASSIFIER, XDP_PASS as XDP_BASELINE},
    frames::*,
    root_or_skip,
};

/// Measurement rounds per (policy, frame); the median is reported.
const ROUNDS: usize = 7;

/// `n` rules: `n - 1` per-peer-network training rules that the frames do not
/// match, then the rule the peer frame matches (the lowest priority).
fn policy(n: usize) -> RuleSet {
    let mut rules = Vec::new();
    for i in 0..n.saturating_sub(1) {
        let v6 = i % 4 == 3;
        let src = if v6 {
            IpPrefix::new(format!("fd00:{:x}::", 0x100 + i).parse().expect("v6"), 32)
        } else {
            IpPrefix::new(
                Ipv4Addr::new(10, 100 + (i / 256) as u8, (i % 256) as u8, 0).into(),
                24,
            )
        };
        let port = 30_000 + i as u16;
        rules.push(Rule {
            priority: i as u32,
            src: Some(src.expect("prefix")),
            dst: None,
            proto: Some(if i % 2 == 0 { 17 } else { 6 }),
            src_ports: None,
            dst_ports: Some(PortRange::new(port, port + (i % 8) as u16).expect("range")),
            dscp: if i % 5 == 0 {
                Some(causeway::classifier::DscpSet::one(10))
            } else {
                None
            },
            class: (1 + i % 14) as u8,
            verdict: if i % 3 == 0 {
                Verdict::Drop
            } else {
                Verdict::Pass
            },
        });
    }
    if n > 0 {
        rules.push(Rule {
            priority: 10_000,
            src: Some(IpPrefix::new("10.1.0.0".parse().expect("v4"), 16).expect("prefix")),
            dst: None,
            proto: Some(17),
            src_ports: None,
            dst_ports: Some(PortRange::new(29_500, 29_599).expect("range")),
            dscp: None,
            class: 2,
            verdict: Verdict::Pass,
        });
    }
    RuleSet::new(rules).expect("valid benchmark policy")
}

fn frames() -> Vec<(&'static str, Vec<u8>)> {
    let peer = V4::new([10, 1, 2, 3], [10, 2, 0, 1], 17);
    let other = V4::new([192, 0, 2, 7], [10, 2, 0, 1], 17);
    let v6 = V6::new("fd00:1::1", "fd00:2::1", 17);
    vec![
        (
            "IPv4 UDP, matches last rule",
            cat(&[&eth(&[], ETH_IPV4), &ipv4(peer, &udp(40_000, 29_501, 1024))]),
        ),
        (
            "IPv4 UDP, matches no rule",
            cat(&[
                &eth(&[], ETH_IPV4),
                &ipv4(other, &udp(40_000, 29_501, 1024)),
            ]),
        ),
        (
            "IPv6 UDP in 802.1Q",
            cat(&[
                &eth(&[TPID_8021Q], ETH_IPV6),
                &ipv6(v6, &udp(40_000, 29_501, 1024)),
            ]),
        ),
    ]
}

fn median(mut xs: Vec<u128>) -> u128 {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

fn main() {
    if !root_or_skip("benches/classifier") {
        return;
    }
    let repeat = causeway_test_support::harness::bench_repeat(2_000_000);
    let ebpf = bpf::load(EBPF_OBJECT, &[XDP_CLASSIFIER, XDP_BASELINE], &[]);
    let mut maps = ClassifierMaps::from_ebpf(&ebpf).expect("classifier maps");
    for name in [XDP_CLASSIFIER, XDP_BASELINE] {
        let info = bpf::xdp(&ebpf, name).info().expect("program info");
        println!(
            "{name}: {} instructions after verification/rewrite, {} processed by the verifier, {} JIT bytes",
            info.size_translated().unwrap_or(0) / 8,
            info.verified_instruction_count().map_or("?".into(), |n| n.to_string()),
            info.size_jitted()
        );
    }
    println!(
        "XDP classifier cost per frame (BPF_PROG_TEST_RUN, repeat {repeat}, median of {ROUNDS} rounds)"
    );
    println!("cache on: a steady flow (the per-CPU classification cache hits); cache off: every frame is classified from the maps, both addresses looked up in the stride-8 tables (tries that hold only /0 are not looked up)");
    println!(
        "{:>6}  {:<5}  {:<30} {:>12} {:>14} {:>7}",
        "rules", "cache", "frame", "baseline ns", "classifier ns", "ratio"
    );
    let only: Option<Vec<usize>> = std::env::var("CAUSEWAY_BENCH_RULES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect());
    let sizes = only.clone().unwrap_or_else(|| vec![1, 16, 256]);
    for n in sizes {
        maps.apply(&policy(n))
            .expect("applying the benchmark policy");
        for cache in [true, false] {
            maps.set_address_cache(cache)
                .expect("setting the cache flag");
            for (name, frame) in frames() {
                let (b, c) = measure(&ebpf, &frame, repeat);
                let ratio = c as f64 / b.max(1) as f64;
                let cache = if cache { "on" } else { "off" };
                println!("{n:>6}  {cache:<5}  {name:<30} {b:>12} {c:>14} {ratio:>6.2}x");
            }
        }
    }
    maps.set_address_cache(true)
        .expect("setting the cache flag");
    if only.is_none() {
        bench_admission(&ebpf, &mut maps, repeat);
    }
}

/// `n` admitted prefixes: 10.1.0.0/16 (the peer frame's) and `n - 1` /24s
/// elsewhere (a quarter of them IPv6 /48s); protected: the training ports.
fn admission(n: usize) -> Admission {
    let mut prefixes = vec![IpPrefix::new("10.1.0.0".parse().expect("v4"), 16).expect("prefix")];
    for i in 0..n.saturating_sub(1) {
        let p = if i % 4 == 3 {
            IpPrefix::new(format!("fd10:{:x}::", i).parse().expect("v6"), 32)
        } else {
            IpPrefix::new(
                Ipv4Addr::new(172, 16 + (i / 65_536) as u8, (i / 256 % 256) as u8, 0).into(),
                24,
            )
        };
        prefixes.push(p.expect("prefix"));
    }
    Admission::new(
        prefixes,
        vec![PortRange::new(29_500, 29_599).expect("range")],
    )
    .expect("admission within the map limits")
}

/// The per-frame cost of admission and of the unclassified action, with the
/// 16-rule policy and the address cache on.
fn bench_admission(ebpf: &Ebpf, maps: &mut ClassifierMaps, repeat: u32) {
    println!("admission (16 rules, cache on; \"outsider\" frames are dropped by admission)");
    let setups: [(&str, Option<usize>, UnclassifiedAction); 4] = [
        ("off", None, UnclassifiedAction::Pass),
        ("unclassified=drop", None, UnclassifiedAction::Drop),
        ("10 prefixes", Some(10), UnclassifiedAction::Pass),
        ("10000 prefixes", Some(10_000), UnclassifiedAction::Pass),
    ];
    for (label, prefixes, unclassified) in setups {
        let rules = policy(16)
            .with_unclassified(unclassified)
            .with_admission(prefixes.map(admission));
        maps.apply(&rules).expect("applying the admission policy");
        for (name, frame) in frames() {
            let (b, c) = measure(ebpf, &frame, repeat);
            let ratio = c as f64 / b.max(1) as f64;
            println!("{label:>18}  {name:<30} {b:>12} {c:>14} {ratio:>6.2}x");
        }
    }
}

/// Median per-frame ns of the baseline and of the classifier, interleaved.
fn measure(ebpf: &Ebpf, frame: &[u8], repeat: u32) -> (u128, u128) {
    let mut base = Vec::new();
    let mut cls = Vec::new();
    for _ in 0..ROUNDS {
        base.push(
            bpf::run_xdp(ebpf, XDP_BASELINE, frame, repeat)
                .duration
                .as_nanos(),
        );
        cls.push(
            bpf::run_xdp(ebpf, XDP_CLASSIFIER, frame, repeat)
                .duration
                .as_nanos(),
        );
    }
    (median(base), median(cls))
}
