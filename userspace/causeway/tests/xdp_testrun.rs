//! The XDP classifier run on crafted frames through BPF_PROG_TEST_RUN: each
//! frame's verdict, class and per-CPU counters are checked (and the pure
//! reference model must agree with every expectation).

mod common;

use bpf_maps::{
    classifier::DEFAULT_CLASS,
    counters::{IngressCounters, UNCLASSIFIED_SLOT},
};
use causeway::classifier::{
    reference::{self, Outcome},
    IpPrefix, PortRange, Rule, RuleSet, Verdict,
};
use common::{frames::*, root_or_skip, Harness};

const XDP_PASS: u32 = 2;
const XDP_DROP: u32 = 1;

fn rule(priority: u32, class: u8, verdict: Verdict) -> Rule {
    Rule {
        priority,
        src: None,
        dst: None,
        proto: None,
        src_ports: None,
        dst_ports: None,
        dscp: None,
        class,
        verdict,
    }
}

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
            dscp: Some(46),
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

#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    Unclassified,
    Pass(u32),
    Drop(u32),
}

const PEER: [u8; 4] = [10, 1, 2, 3];
const OUTSIDER: [u8; 4] = [192, 0, 2, 7];
const LOCAL: [u8; 4] = [10, 2, 0, 1];

fn v4_udp(tags: &[u16], h: V4, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    cat(&[&eth(tags, ETH_IPV4), &ipv4(h, &udp(sport, dport, payload))])
}

fn v6_frame(tags: &[u16], h: V6, payload: &[u8]) -> Vec<u8> {
    cat(&[&eth(tags, ETH_IPV6), &ipv6(h, payload)])
}

fn cases() -> Vec<(&'static str, Vec<u8>, Expect)> {
    use Expect::*;
    let udp4 = V4::new(PEER, LOCAL, 17);
    let out4 = V4::new(OUTSIDER, LOCAL, 17);
    let roce = |next| V6::new("fd00:3::1", "fd00:4::1", next);
    let pair = |next| V6::new("fd00:1::1", "fd00:2::1", next);
    let full = v4_udp(&[], udp4, 40000, 29501, 32);
    let truncate = |f: &Vec<u8>, n: usize| f[..n].to_vec();
    let mut bad_version = full.clone();
    bad_version[14] = 0x55;
    let mut ihl4 = full.clone();
    ihl4[14] = 0x44;
    let mut ihl15 = v4_udp(&[], udp4, 1, 29501, 0);
    ihl15[14] = 0x4f;
    let mut long_total = full.clone();
    long_total[16..18].copy_from_slice(&200u16.to_be_bytes());
    let mut short_total = full.clone();
    short_total[16..18].copy_from_slice(&19u16.to_be_bytes());
    let v6_udp = v6_frame(&[], roce(17), &udp(4791, 4791, 16));
    let mut v6_long_payload = v6_udp.clone();
    v6_long_payload[18..20].copy_from_slice(&500u16.to_be_bytes());
    let seven_dstopts: Vec<u8> = (0..7).flat_map(|_| ext(60, 60, 0)).collect();
    let first_frag4 = V4 {
        frag: 0x2000,
        ..out4
    };
    let later_frag4 = V4 { frag: 185, ..out4 };

    vec![
        ("ARP", arp(), Unclassified),
        ("LLDP", pad(eth(&[], ETH_LLDP), 60), Unclassified),
        (
            "Ethernet header only, IPv4 type",
            eth(&[], ETH_IPV4),
            Unclassified,
        ),
        (
            "VLAN tag cut",
            truncate(&v4_udp(&[TPID_8021Q], udp4, 1, 29501, 0), 16),
            Unclassified,
        ),
        (
            "QinQ inner tag cut",
            truncate(&v4_udp(&[TPID_8021AD, TPID_8021Q], udp4, 1, 29501, 0), 20),
            Unclassified,
        ),
        (
            "IPv4 fixed header cut",
            truncate(&full, 14 + 19),
            Unclassified,
        ),
        ("IPv4 version 5", bad_version, Unclassified),
        ("IPv4 IHL 4", ihl4, Unclassified),
        ("IPv4 IHL 15 beyond frame", ihl15, Unclassified),
        ("IPv4 total length beyond frame", long_total, Unclassified),
        ("IPv4 total length below IHL", short_total, Unclassified),
        (
            "three VLAN tags",
            v4_udp(&[TPID_8021Q; 3], udp4, 1, 29501, 0),
            Unclassified,
        ),
        (
            "802.1ad inside 802.1Q",
            v4_udp(&[TPID_8021Q, TPID_8021AD], udp4, 1, 29501, 0),
            Unclassified,
        ),
        (
            "IPv6 fixed header cut",
            truncate(&v6_udp, 14 + 39),
            Unclassified,
        ),
        (
            "IPv6 payload length beyond frame",
            v6_long_payload,
            Unclassified,
        ),
        ("peer UDP to training port", full.clone(), Pass(2)),
        (
            "outsider UDP to training port",
            v4_udp(&[], out4, 40000, 29501, 32),
            Drop(15),
        ),
        (
            "outsider in 802.1Q",
            v4_udp(&[TPID_8021Q], out4, 1, 29599, 0),
            Drop(15),
        ),
        (
            "peer in QinQ",
            v4_udp(&[TPID_8021AD, TPID_8021Q], udp4, 1, 29500, 0),
            Pass(2),
        ),
        (
            "peer in 802.1Q over 802.1Q",
            v4_udp(&[TPID_8021Q, TPID_8021Q], udp4, 1, 29500, 0),
            Pass(2),
        ),
        (
            "peer with 12 bytes of IPv4 options",
            v4_udp(
                &[],
                V4 {
                    options: 12,
                    ..udp4
                },
                1,
                29550,
                4,
            ),
            Pass(2),
        ),
        (
            "peer with 40 bytes of IPv4 options",
            v4_udp(
                &[],
                V4 {
                    options: 40,
                    ..udp4
                },
                1,
                29550,
                4,
            ),
            Pass(2),
        ),
        (
            "outsider first fragment",
            v4_udp(&[], first_frag4, 1, 29501, 64),
            Drop(15),
        ),
        (
            "outsider later fragment: no ports",
            v4_udp(&[], later_frag4, 1, 29501, 64),
            Pass(DEFAULT_CLASS),
        ),
        (
            "later fragment to blocked net",
            v4_udp(
                &[],
                V4 {
                    dst: [10, 9, 1, 1].into(),
                    ..later_frag4
                },
                1,
                1,
                8,
            ),
            Drop(8),
        ),
        (
            "IPv4 datagram cut inside UDP header",
            truncate(&v4_udp(&[], out4, 1, 29501, 0), 14 + 20 + 7),
            Unclassified,
        ),
        (
            "UDP header cut: no ports",
            cat(&[&eth(&[], ETH_IPV4), &ipv4(out4, &udp(1, 29501, 0)[..7])]),
            Pass(DEFAULT_CLASS),
        ),
        (
            "TCP to 22",
            cat(&[
                &eth(&[], ETH_IPV4),
                &ipv4(V4::new(OUTSIDER, LOCAL, 6), &tcp(50000, 22, 0)),
            ]),
            Pass(3),
        ),
        (
            "TCP header 19 bytes",
            cat(&[
                &eth(&[], ETH_IPV4),
                &ipv4(V4::new(OUTSIDER, LOCAL, 6), &tcp(50000, 22, 0)[..19]),
            ]),
            Pass(DEFAULT_CLASS),
        ),
        (
            "ICMP",
            pad(
                cat(&[
                    &eth(&[], ETH_IPV4),
                    &ipv4(V4::new(OUTSIDER, LOCAL, 1), &[8, 0, 0, 0, 0, 1, 0, 1]),
                ]),
                60,
            ),
            Pass(7),
        ),
        (
            "EF DSCP",
            v4_udp(
                &[],
                V4 {
                    dscp: 46,
                    ..V4::new(OUTSIDER, LOCAL, 17)
                },
                123,
                123,
                8,
            ),
            Pass(5),
        ),
        (
            "minimum-size frame, padded",
            pad(v4_udp(&[], udp4, 1, 29501, 0), 60),
            Pass(2),
        ),
        (
            "jumbo 9000 B frame",
            v4_udp(&[], udp4, 1, 29501, 9000 - 14 - 20 - 8),
            Pass(2),
        ),
        (
            "outsider jumbo 9000 B frame",
            v4_udp(&[], out4, 1, 29501, 9000 - 14 - 20 - 8),
            Drop(15),
        ),
        (
            "IPv6 domain pair",
            v6_frame(&[], pair(17), &udp(1, 2, 8)),
            Pass(4),
        ),
        (
            "IPv6 in QinQ",
            v6_frame(&[TPID_8021AD, TPID_8021Q], pair(59), &[]),
            Pass(4),
        ),
        ("IPv6 UDP 4791", v6_udp.clone(), Pass(9)),
        (
            "IPv6 hop-by-hop",
            v6_frame(&[], roce(0), &cat(&[&ext(0, 17, 0), &udp(4791, 1, 0)])),
            Pass(9),
        ),
        (
            "IPv6 routing",
            v6_frame(&[], roce(43), &cat(&[&ext(43, 17, 2), &udp(4791, 1, 0)])),
            Pass(9),
        ),
        (
            "IPv6 destination options",
            v6_frame(&[], roce(60), &cat(&[&ext(60, 17, 1), &udp(4791, 1, 0)])),
            Pass(9),
        ),
        (
            "IPv6 AH",
            v6_frame(&[], roce(51), &cat(&[&ext(51, 17, 4), &udp(4791, 1, 0)])),
            Pass(9),
        ),
        (
            "IPv6 all five",
            v6_frame(
                &[],
                roce(0),
                &cat(&[
                    &ext(0, 43, 0),
                    &ext(43, 44, 0),
                    &frag6(51, 0, true),
                    &ext(51, 60, 4),
                    &ext(60, 17, 0),
                    &udp(4791, 1, 0),
                ]),
            ),
            Pass(9),
        ),
        (
            "IPv6 first fragment",
            v6_frame(
                &[],
                roce(44),
                &cat(&[&frag6(17, 0, true), &udp(4791, 1, 0)]),
            ),
            Pass(9),
        ),
        (
            "IPv6 later fragment: no ports",
            v6_frame(
                &[],
                roce(44),
                &cat(&[&frag6(17, 100, false), &udp(4791, 1, 0)]),
            ),
            Pass(DEFAULT_CLASS),
        ),
        (
            "IPv6 seven extension headers: address-only",
            v6_frame(&[], pair(60), &cat(&[&seven_dstopts, &udp(4791, 1, 0)])),
            Pass(4),
        ),
        (
            "IPv6 seven extension headers, RoCE",
            v6_frame(&[], roce(60), &cat(&[&seven_dstopts, &udp(4791, 1, 0)])),
            Pass(DEFAULT_CLASS),
        ),
        (
            "IPv6 extension header beyond payload",
            v6_frame(&[], roce(60), &[17, 3, 0, 0, 0, 0, 0, 0]),
            Pass(DEFAULT_CLASS),
        ),
        (
            "IPv6 UDP header cut",
            v6_frame(&[], roce(17), &udp(4791, 1, 0)[..6]),
            Pass(DEFAULT_CLASS),
        ),
    ]
}

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
    }
}

#[test]
fn crafted_frames_are_classified_and_counted() {
    if !root_or_skip("crafted_frames_are_classified_and_counted") {
        return;
    }
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
    if !root_or_skip("object_declares_every_shared_map") {
        return;
    }
    let h = Harness::load();
    use bpf_maps::{classifier::*, counters::MAP_INGRESS_COUNTERS};
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
        MAP_INGRESS_COUNTERS,
    ] {
        assert!(
            h.ebpf.map(name).is_some(),
            "map {name} missing from the object"
        );
    }
}

#[path = "xdp_testrun/apply.rs"]
mod apply;
