//! The XDP classifier run on crafted frames through BPF_PROG_TEST_RUN: each
//! frame's verdict, class and per-CPU counters are checked (and the pure
//! reference model must agree with every expectation).

use bpf_maps::{
    classifier::DEFAULT_CLASS,
    counters::{IngressCounters, UNCLASSIFIED_SLOT},
};
use causeway::classifier::{
    reference::{self, Outcome},
    DscpSet, IpPrefix, PortRange, Rule, RuleSet, Verdict,
};
use causeway_test_support::{frames::*, require_root};

use crate::classifier_harness::{rule, Harness};

const XDP_PASS: u32 = 2;
const XDP_DROP: u32 = 1;

fn net(s: &str) -> Option<IpPrefix> {
    let (addr, len) = s.split_once('/').expect("addr/len");
    Some(
        IpPrefix::new(addr.parse().expect("address"), len.parse().expect("length"))
            .expect("prefix"),
    )
}

fn ports(lo: u16, hi: u16) -> Option<PortRange> {
    Some(PortRange::new(lo, hi).expect("port range"))
}

/// Training traffic from the peer domain, admission drop for everyone else,
/// control, a v6 domain pair, EF, ICMP, a blocked network, RoCE over v6.
fn policy() -> RuleSet {
    use Verdict::{Drop, Pass};
    RuleSet::new(vec![
        Rule {
            src: net("10.1.0.0/16"),
            proto: Some(17),
            dst_ports: ports(29500, 29599),
            ..rule(10, 2, Pass)
        },
        Rule {
            proto: Some(17),
            dst_ports: ports(29500, 29599),
            ..rule(20, 15, Drop)
        },
        Rule {
            proto: Some(6),
            dst_ports: ports(22, 22),
            ..rule(30, 3, Pass)
        },
        Rule {
            src: net("fd00:1::/32"),
            dst: net("fd00:2::/32"),
            ..rule(40, 4, Pass)
        },
        Rule {
            dscp: Some(DscpSet::one(46)),
            ..rule(50, 5, Pass)
        },
        Rule {
            proto: Some(1),
            ..rule(60, 7, Pass)
        },
        Rule {
            dst: net("10.9.0.0/16"),
            ..rule(70, 8, Drop)
        },
        Rule {
            src: net("fd00::/16"),
            proto: Some(17),
            src_ports: ports(4791, 4791),
            ..rule(80, 9, Pass)
        },
    ])
    .expect("valid policy")
}

mod cases;

use cases::{cases, v4_udp, Expect, LOCAL, PEER};

fn reference_expectation(rules: &RuleSet, frame: &[u8]) -> Expect {
    match reference::evaluate(rules, frame) {
        Outcome::Unclassified(_) => Expect::Unclassified,
        Outcome::Classified {
            class,
            verdict: Verdict::Pass,
            ..
        } => Expect::Pass(u32::from(class)),
        Outcome::Classified {
            class,
            verdict: Verdict::Drop,
            ..
        } => Expect::Drop(u32::from(class)),
        other => panic!("this policy neither drops unclassified frames nor admits: {other:?}"),
    }
}

#[test]
fn crafted_frames_are_classified_and_counted() {
    require_root!("crafted_frames_are_classified_and_counted");
    let mut h = Harness::load();
    let rules = policy();
    h.maps.apply(&rules).expect("applying the policy");
    let cases = cases();
    assert!(cases.len() >= 30, "only {} frames", cases.len());
    let mut failures = Vec::new();
    for (name, frame, expect) in &cases {
        let before = h.counters();
        let action = h.run(frame);
        let after = h.counters();
        let (slot, want_action, dropped) = match *expect {
            Expect::Unclassified => (UNCLASSIFIED_SLOT, XDP_PASS, 0),
            Expect::Pass(class) => (class, XDP_PASS, 0),
            Expect::Drop(class) => (class, XDP_DROP, 1),
        };
        let mut want = before.clone();
        let s = &mut want[slot as usize];
        *s = IngressCounters {
            packets: s.packets + 1,
            bytes: s.bytes + frame.len() as u64,
            drops: s.drops + dropped,
        };
        if action != want_action {
            failures.push(format!("{name}: action {action}, want {want_action}"));
        }
        if after != want {
            failures.push(format!(
                "{name}: counters moved wrongly (want slot {slot} +1 frame, +{} bytes)",
                frame.len()
            ));
        }
        let reference = reference_expectation(&rules, frame);
        if reference != *expect {
            failures.push(format!(
                "{name}: reference model says {reference:?}, test expects {expect:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} frames wrong:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn object_declares_every_shared_map() {
    require_root!("object_declares_every_shared_map");
    // Maps only: no program is verified (under TCG each XDP verification
    // takes tens of seconds).
    let ebpf = causeway_test_support::bpf::load(causeway::ebpf_object::EBPF_OBJECT, &[], &[]);
    use bpf_maps::{
        classifier::*,
        counters::MAP_INGRESS_COUNTERS,
        paths::{MAP_PATH_COUNT, MAP_PATH_FLOWS, MAP_PATH_TABLE},
    };
    for name in [
        MAP_CLASSIFIER_CONFIG,
        MAP_SRC_V4,
        MAP_DST_V4,
        MAP_SRC_V6,
        MAP_DST_V6,
        MAP_PROTO_DSCP,
        MAP_SRC_PORT,
        MAP_DST_PORT,
        MAP_RULE_ACTIONS,
        MAP_ADDR_CACHE,
        MAP_TRIE_DEFAULTS,
        MAP_ADDR_NODES,
        MAP_ADDR_BITMAPS,
        MAP_INGRESS_COUNTERS,
        MAP_PATH_FLOWS,
        MAP_PATH_TABLE,
        MAP_PATH_COUNT,
    ] {
        assert!(
            ebpf.map(name).is_some(),
            "map {name} missing from the object"
        );
    }
}

mod apply;
