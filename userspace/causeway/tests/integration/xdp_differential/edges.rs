//! Frames at the edges of the XDP parser's fast path (`parse_common` in
//! `ebpf/src/parse.rs`: Ethernet, at most one 802.1Q tag, IPv4 with IHL 5
//! and no fragment bits or IPv6 without extension headers, TCP or UDP, the
//! datagram inside the frame) and of its fallback to the general parser:
//! every base frame cut at every length, every IP length field value around
//! the L4 header and the frame's end, other IHL and version nibbles,
//! fragments, extension headers, 802.1ad and double tags, padding past the
//! datagram. The rule sets below classify by ports, DSCP, protocol and both
//! addresses, so a field misread on either path shows as another class.

use causeway::classifier::{
    Admission, DscpSet, IpPrefix, PortRange, Rule, RuleSet, UnclassifiedAction, Verdict,
};
use causeway_test_support::frames::*;

const TAGS: &[&[u16]] = &[
    &[],
    &[TPID_8021Q],
    &[TPID_8021AD],
    &[TPID_8021AD, TPID_8021Q],
    &[TPID_8021Q, TPID_8021Q],
];

/// The L4 bytes of `proto`: a TCP or UDP header (ports that the rules
/// below look at) with `payload` bytes, or `payload` bytes of something else.
fn l4(proto: u8, payload: usize) -> Vec<u8> {
    match proto {
        17 => udp(40_000, 29_501, payload),
        6 => tcp(40_001, 29_502, payload),
        _ => (0..payload.max(8)).map(|i| i as u8).collect(),
    }
}

/// Base frames: every tag stack, IPv4 and IPv6, TCP/UDP/other, with and
/// without IPv4 options, fragment bits and IPv6 extension headers; the
/// first element is where the L3 header starts.
fn base_frames(payload: usize) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    for tags in TAGS {
        let l3 = 14 + 4 * tags.len();
        for (src, dst) in [
            ([10, 1, 2, 3], [10, 2, 0, 1]),
            ([192, 0, 2, 7], [10, 9, 9, 9]),
        ] {
            for proto in [17u8, 6, 1] {
                for options in [0usize, 4] {
                    for frag in [0u16, 0x4000, 0x8000, 0x2000, 0x0003, 0x2001] {
                        let h = V4 {
                            frag,
                            options,
                            ..V4::new(src, dst, proto).with_tos(if frag == 0 { 40 } else { 0 })
                        };
                        out.push((
                            l3,
                            cat(&[&eth(tags, ETH_IPV4), &ipv4(h, &l4(proto, payload))]),
                        ));
                    }
                }
            }
        }
        for (src, dst) in [("fd00:1::1", "fd00:2::1"), ("2001:db8::1", "fd00:1:2::3")] {
            let v6 = |next: u8, body: &[u8]| {
                let h = V6::new(src, dst, next).with_traffic_class(40);
                cat(&[&eth(tags, ETH_IPV6), &ipv6(h, body)])
            };
            for proto in [17u8, 6, 58] {
                out.push((l3, v6(proto, &l4(proto, payload))));
            }
            out.push((l3, v6(0, &cat(&[&ext(0, 17, 0), &l4(17, payload)]))));
            out.push((l3, v6(60, &cat(&[&ext(60, 6, 1), &l4(6, payload)]))));
            out.push((l3, v6(44, &cat(&[&frag6(17, 0, true), &l4(17, payload)]))));
            out.push((l3, v6(44, &cat(&[&frag6(17, 3, false), &l4(17, payload)]))));
        }
    }
    out
}

/// Every frame of the test: the base frames cut at every length (from the
/// 14 bytes BPF_PROG_TEST_RUN accepts), with their IP length field set
/// around each boundary, with other version/IHL nibbles, padded, and long.
pub fn frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (l3, frame) in base_frames(0) {
        for cut in 14..frame.len() {
            out.push(frame[..cut].to_vec());
        }
        let v4 = frame[l3] >> 4 == 4;
        let len_at = l3 + if v4 { 2 } else { 4 };
        let actual = (frame.len() - l3 - if v4 { 0 } else { 40 }) as u16;
        for value in [
            0u16,
            7,
            8,
            19,
            20,
            27,
            28,
            39,
            40,
            47,
            48,
            actual.saturating_sub(1),
            actual,
            actual + 1,
            actual + 20,
            0xffff,
        ] {
            let mut f = frame.clone();
            f[len_at..len_at + 2].copy_from_slice(&value.to_be_bytes());
            out.push(f.clone());
            out.push(pad(f, 90));
        }
        for first in [0x44u8, 0x46, 0x4f, 0x45, 0x55, 0x65, 0x60, 0x6f, 0x35] {
            let mut f = frame.clone();
            f[l3] = first;
            out.push(f);
        }
        out.push(pad(frame.clone(), 60));
        out.push(pad(frame, 128));
    }
    for (_, frame) in base_frames(1024) {
        out.push(frame);
    }
    out
}

fn rule(priority: u32, class: u8) -> Rule {
    crate::classifier_harness::rule(priority, class, Verdict::Pass)
}

fn prefix(addr: &str, len: u8) -> IpPrefix {
    IpPrefix::new(addr.parse().expect("address"), len).expect("prefix")
}

fn range(lo: u16, hi: u16) -> PortRange {
    PortRange::new(lo, hi).expect("range")
}

/// Rules on every field the fast path reads, each with its own class.
fn rules() -> Vec<Rule> {
    vec![
        Rule {
            src: Some(prefix("10.1.0.0", 16)),
            dst: Some(prefix("10.2.0.0", 16)),
            proto: Some(17),
            dst_ports: Some(range(29_501, 29_501)),
            dscp: Some(DscpSet::one(10)),
            ..rule(10, 1)
        },
        Rule {
            proto: Some(17),
            src_ports: Some(range(40_000, 40_000)),
            ..rule(20, 2)
        },
        Rule {
            proto: Some(6),
            src_ports: Some(range(40_001, 40_001)),
            dst_ports: Some(range(29_502, 29_502)),
            verdict: Verdict::Drop,
            ..rule(30, 3)
        },
        Rule {
            src: Some(prefix("fd00:1::", 32)),
            dst: Some(prefix("fd00:2::1", 128)),
            dscp: Some(DscpSet::one(10)),
            ..rule(40, 4)
        },
        Rule {
            dst: Some(prefix("fd00:1:2::3", 128)),
            proto: Some(6),
            ..rule(50, 5)
        },
        Rule {
            dst: Some(prefix("10.9.9.9", 32)),
            ..rule(60, 6)
        },
        Rule {
            proto: Some(17),
            ..rule(70, 7)
        },
        Rule {
            dscp: Some(DscpSet::one(10)),
            ..rule(80, 8)
        },
    ]
}

/// The rule sets: plain, `unclassified = "drop"`, and with admission.
pub fn rule_sets() -> Vec<RuleSet> {
    let plain = RuleSet::new(rules()).expect("valid rules");
    let admission = Admission::new(
        vec![prefix("10.1.0.0", 16), prefix("fd00:1::", 32)],
        vec![range(29_500, 29_599)],
    )
    .expect("admission");
    vec![
        plain.clone(),
        plain.clone().with_unclassified(UnclassifiedAction::Drop),
        plain.with_admission(Some(admission)),
    ]
}
