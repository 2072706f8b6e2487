//! Random rule sets and random, mutated frames for the differential test.
//! Values are drawn from small pools so that frames often hit rule prefixes
//! and port ranges, with some fully random values mixed in.

use std::net::{Ipv4Addr, Ipv6Addr};

use causeway::classifier::{
    Admission, DscpSet, IpPrefix, PortRange, Rule, RuleSet, UnclassifiedAction, Verdict,
};
use rand::{rngs::StdRng, seq::SliceRandom, Rng};

use causeway_test_support::frames::*;

const V4_NETS: &[(&str, u8)] = &[
    ("0.0.0.0", 0),
    ("10.0.0.0", 8),
    ("10.1.0.0", 16),
    ("10.1.2.0", 24),
    ("10.1.2.128", 25),
    ("10.1.2.3", 32),
    ("10.2.0.0", 16),
    ("192.0.2.0", 24),
];
const V4_ADDRS: &[[u8; 4]] = &[
    [10, 1, 2, 3],
    [10, 1, 2, 200],
    [10, 1, 7, 7],
    [10, 2, 3, 4],
    [192, 0, 2, 9],
    [10, 9, 9, 9],
];
const V6_NETS: &[(&str, u8)] = &[
    ("::", 0),
    ("fd00::", 8),
    ("fd00:1::", 32),
    ("fd00:1:2::", 48),
    ("fd00:1:2::3", 128),
    ("fd00:2::", 32),
    ("2001:db8::", 32),
];
const V6_ADDRS: &[&str] = &[
    "fd00:1:2::3",
    "fd00:1:2::99",
    "fd00:1:7::1",
    "fd00:2::5",
    "2001:db8::1",
    "fd99::1",
];
const PORTS: &[u16] = &[0, 1, 22, 53, 123, 4791, 29500, 29501, 29599, 29600, 65535];
const PROTOS: &[u8] = &[6, 17, 1, 50, 58, 0, 59];
const DSCPS: &[u8] = &[0, 10, 46, 63];
const RULE_COUNTS: &[usize] = &[0, 1, 3, 8, 16, 40, 100, 256];

fn pick<T: Copy>(rng: &mut StdRng, pool: &[T]) -> T {
    *pool.choose(rng).expect("non-empty pool")
}

fn port(rng: &mut StdRng) -> u16 {
    if rng.gen_bool(0.8) {
        pick(rng, PORTS)
    } else {
        rng.gen()
    }
}

fn prefix(rng: &mut StdRng, v6: bool) -> IpPrefix {
    let (addr, len) = pick(rng, if v6 { V6_NETS } else { V4_NETS });
    IpPrefix::new(addr.parse().expect("pool address"), len).expect("pool prefix")
}

/// How often a rule set's rules carry each prefix: sets that never use one
/// field leave its tries trivial (only the `/0` entry), which the kernel
/// handles without a trie walk; mixed sets exercise the walk.
#[derive(Clone, Copy)]
struct PrefixUse {
    src: f64,
    dst: f64,
    v6: f64,
}

fn prefix_use(rng: &mut StdRng) -> PrefixUse {
    PrefixUse {
        src: pick(rng, &[0.0, 0.5, 0.5, 1.0]),
        dst: pick(rng, &[0.0, 0.4, 0.4, 1.0]),
        v6: pick(rng, &[0.0, 0.4, 0.4, 1.0]),
    }
}

/// One rule; the caller fixes the priority.
fn rule(rng: &mut StdRng, uses: PrefixUse) -> Rule {
    let v6 = rng.gen_bool(uses.v6);
    let src = rng.gen_bool(uses.src).then(|| prefix(rng, v6));
    let dst = rng.gen_bool(uses.dst).then(|| prefix(rng, v6));
    let ports = |rng: &mut StdRng| {
        let (a, b) = (port(rng), port(rng));
        PortRange::new(a.min(b), a.max(b)).expect("ordered range")
    };
    let src_ports = rng.gen_bool(0.2).then(|| ports(rng));
    let dst_ports = rng.gen_bool(0.4).then(|| ports(rng));
    let proto = if src_ports.is_some() || dst_ports.is_some() {
        [None, Some(6), Some(17)][rng.gen_range(0..3)]
    } else {
        rng.gen_bool(0.5).then(|| {
            if rng.gen_bool(0.8) {
                pick(rng, PROTOS)
            } else {
                rng.gen()
            }
        })
    };
    Rule {
        priority: 0,
        src,
        dst,
        proto,
        src_ports,
        dst_ports,
        dscp: rng.gen_bool(0.2).then(|| {
            let values: Vec<u8> = (0..rng.gen_range(1..=3))
                .map(|_| {
                    if rng.gen_bool(0.7) {
                        pick(rng, DSCPS)
                    } else {
                        rng.gen_range(0..64)
                    }
                })
                .collect();
            DscpSet::new(&values).expect("values below 64")
        }),
        class: rng.gen_range(0..16),
        verdict: if rng.gen_bool(0.3) {
            Verdict::Drop
        } else {
            Verdict::Pass
        },
    }
}

/// A random valid rule set; every eighth one is empty or maximal.
pub fn rule_set(rng: &mut StdRng, index: usize) -> RuleSet {
    let count = match index % 8 {
        0 => 0,
        4 => 256,
        _ => pick(rng, RULE_COUNTS),
    };
    let mut priorities: Vec<u32> = (0..count as u32).map(|p| p * 10).collect();
    priorities.shuffle(rng);
    let uses = prefix_use(rng);
    let rules = priorities
        .into_iter()
        .map(|priority| Rule {
            priority,
            ..rule(rng, uses)
        })
        .collect();
    let unclassified = if rng.gen_bool(0.5) {
        UnclassifiedAction::Drop
    } else {
        UnclassifiedAction::Pass
    };
    RuleSet::new(rules)
        .expect("generated rules are valid")
        .with_unclassified(unclassified)
        .with_admission(rng.gen_bool(0.5).then(|| admission(rng)))
}

/// Admitted prefixes drawn from the address pools, and protected ports.
fn admission(rng: &mut StdRng) -> Admission {
    let mut prefixes = Vec::new();
    for _ in 0..rng.gen_range(0..6) {
        let v6 = rng.gen_bool(0.4);
        let p = prefix(rng, v6);
        // A /0 admits a whole family: rarely.
        if !p.is_empty() || rng.gen_bool(0.2) {
            prefixes.push(p);
        }
    }
    let ports = (0..rng.gen_range(1..4))
        .map(|_| {
            let (a, b) = (port(rng), port(rng));
            PortRange::new(a.min(b), a.max(b)).expect("ordered range")
        })
        .collect();
    Admission::new(prefixes, ports).expect("few prefixes, some ports")
}

fn v4_addr(rng: &mut StdRng) -> Ipv4Addr {
    if rng.gen_bool(0.85) {
        pick(rng, V4_ADDRS).into()
    } else {
        Ipv4Addr::from(rng.gen::<u32>())
    }
}

fn v6_addr(rng: &mut StdRng) -> Ipv6Addr {
    if rng.gen_bool(0.85) {
        pick(rng, V6_ADDRS).parse().expect("pool address")
    } else {
        Ipv6Addr::from(rng.gen::<u128>())
    }
}

/// L4 bytes for `proto` (a full TCP/UDP header or a few random bytes).
fn l4(rng: &mut StdRng, proto: u8) -> Vec<u8> {
    let payload = if rng.gen_bool(0.05) {
        rng.gen_range(1000..3000)
    } else {
        rng.gen_range(0..64)
    };
    match proto {
        17 => udp(port(rng), port(rng), payload),
        6 => tcp(port(rng), port(rng), payload),
        _ => (0..payload).map(|_| rng.gen()).collect(),
    }
}

fn random_proto(rng: &mut StdRng) -> u8 {
    match rng.gen_range(0..10) {
        0..=3 => 17,
        4..=6 => 6,
        7 | 8 => pick(rng, PROTOS),
        _ => rng.gen(),
    }
}

/// A random IPv6 extension-header chain ending in `upper`; returns the first
/// Next Header value and the chain's bytes.
fn ext_chain(rng: &mut StdRng, upper: u8) -> (u8, Vec<u8>) {
    let n = if rng.gen_bool(0.5) {
        0
    } else {
        rng.gen_range(1..=8)
    };
    let kinds: Vec<u8> = (0..n).map(|_| pick(rng, &[0u8, 43, 44, 51, 60])).collect();
    let mut bytes = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        let next = kinds.get(i + 1).copied().unwrap_or(upper);
        bytes.extend(match kind {
            44 => frag6(
                next,
                if rng.gen_bool(0.6) {
                    0
                } else {
                    rng.gen_range(1..8192)
                },
                rng.gen(),
            ),
            51 => ext(51, next, rng.gen_range(1..6)),
            k => ext(*k, next, rng.gen_range(0..3)),
        });
    }
    (kinds.first().copied().unwrap_or(upper), bytes)
}

fn tags(rng: &mut StdRng) -> Vec<u16> {
    match rng.gen_range(0..10) {
        0..=5 => vec![],
        6 => vec![TPID_8021Q],
        7 => vec![TPID_8021AD, TPID_8021Q],
        8 => vec![TPID_8021Q, TPID_8021Q],
        _ => (0..rng.gen_range(1..4))
            .map(|_| pick(rng, &[TPID_8021Q, TPID_8021AD]))
            .collect(),
    }
}

fn base_frame(rng: &mut StdRng) -> Vec<u8> {
    let tags = tags(rng);
    let proto = random_proto(rng);
    let body = l4(rng, proto);
    let frame = match rng.gen_range(0..20) {
        0 => {
            let any: u16 = rng.gen();
            cat(&[
                &eth(&tags, pick(rng, &[ETH_ARP, ETH_LLDP, 0x8847, any])),
                &body,
            ])
        }
        1..=11 => {
            let frag = match rng.gen_range(0..6) {
                0 => 0x2000,
                1 => rng.gen_range(1..0x2000) | if rng.gen() { 0x2000 } else { 0 },
                2 => 0x4000,
                _ => 0,
            };
            let h = V4 {
                src: v4_addr(rng),
                dst: v4_addr(rng),
                proto,
                dscp: if rng.gen() {
                    pick(rng, DSCPS)
                } else {
                    rng.gen_range(0..64)
                },
                ecn: 0,
                frag,
                options: if rng.gen_bool(0.2) {
                    4 * rng.gen_range(1..=10)
                } else {
                    0
                },
            };
            cat(&[&eth(&tags, ETH_IPV4), &ipv4(h, &body)])
        }
        _ => {
            let (first, chain) = ext_chain(rng, proto);
            let h = V6 {
                src: v6_addr(rng),
                dst: v6_addr(rng),
                next: first,
                dscp: rng.gen_range(0..64),
                ecn: 0,
                flow: 0xabcde,
            };
            cat(&[&eth(&tags, ETH_IPV6), &ipv6(h, &cat(&[&chain, &body]))])
        }
    };
    if rng.gen_bool(0.3) {
        pad(frame, 60)
    } else {
        frame
    }
}

/// A random frame, mutated half of the time: truncated (never below the 14
/// bytes BPF_PROG_TEST_RUN accepts), bytes flipped in the headers, a VLAN
/// tag inserted, or an IP length field rewritten.
pub fn frame(rng: &mut StdRng) -> Vec<u8> {
    let mut f = base_frame(rng);
    let mutations = if rng.gen_bool(0.5) {
        0
    } else {
        rng.gen_range(1..=3)
    };
    for _ in 0..mutations {
        match rng.gen_range(0..5) {
            0 if f.len() > 14 => {
                let cut = rng.gen_range(14..f.len().min(120));
                f.truncate(cut);
            }
            1 => {
                let at = rng.gen_range(12..f.len().clamp(13, 100));
                f[at] ^= 1 << rng.gen_range(0..8);
            }
            2 => {
                let tpid = pick(rng, &[TPID_8021Q, TPID_8021AD]);
                let mut tag = tpid.to_be_bytes().to_vec();
                tag.extend_from_slice(&[0, 7]);
                f.splice(12..12, tag);
            }
            3 if f.len() > 60 => {
                // An IPv4 total length or IPv6 payload length, wherever the
                // L3 header starts after 0–2 tags.
                let at = pick(rng, &[16usize, 18, 20, 22, 24, 26]);
                let value: u16 = if rng.gen() {
                    rng.gen()
                } else {
                    rng.gen_range(0..f.len() as u16)
                };
                f[at..at + 2].copy_from_slice(&value.to_be_bytes());
            }
            _ => {
                let at = rng.gen_range(0..f.len());
                f[at] = rng.gen();
            }
        }
    }
    if f.len() < 14 {
        f.resize(14, 0);
    }
    f
}
