use std::net::IpAddr;

use bpf_maps::classifier::{
    NO_PORTS, TRIE_DST_V4, TRIE_DST_V6, TRIE_SRC_V4, TRIE_SRC_V6, VERDICT_DROP,
};
use proptest::prelude::*;

use super::*;
use crate::classifier::DscpSet;

fn rule(priority: u32) -> Rule {
    Rule::any(priority, 1, Verdict::Pass)
}

fn prefix(s: &str) -> IpPrefix {
    let (addr, len) = s.split_once('/').expect("addr/len");
    IpPrefix::new(addr.parse().expect("address"), len.parse().expect("length")).expect("prefix")
}

/// What the kernel does with the compiled maps: longest-prefix match in each
/// trie, AND of the five bitmaps, lowest set bit.
fn kernel_lookup(
    c: &CompiledRuleSet,
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    dscp: u8,
    ports: Option<(u16, u16)>,
) -> Option<usize> {
    fn lpm<const N: usize>(entries: &LpmEntries<N>, addr: [u8; N]) -> RuleBitmap {
        super::longest_prefix(entries, addr).expect("default entry always matches")
    }
    let (s, d) = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => (lpm(&c.src_v4, s.octets()), lpm(&c.dst_v4, d.octets())),
        (IpAddr::V6(s), IpAddr::V6(d)) => (lpm(&c.src_v6, s.octets()), lpm(&c.dst_v6, d.octets())),
        _ => unreachable!("one family per frame"),
    };
    // The stride-8 tables the kernel walks instead give the same bitmaps.
    let (ts, td, sa, da) = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => (
            TRIE_SRC_V4,
            TRIE_DST_V4,
            s.octets().to_vec(),
            d.octets().to_vec(),
        ),
        (IpAddr::V6(s), IpAddr::V6(d)) => (
            TRIE_SRC_V6,
            TRIE_DST_V6,
            s.octets().to_vec(),
            d.octets().to_vec(),
        ),
        _ => unreachable!("one family per frame"),
    };
    assert_eq!(c.trie_defaults.tables, c.addr_tables.tables);
    assert_eq!(c.addr_tables.lookup(ts, &sa), Some(s), "source table");
    assert_eq!(c.addr_tables.lookup(td, &da), Some(d), "destination table");
    let (sp, dp) = ports.map_or((NO_PORTS as usize, NO_PORTS as usize), |(s, d)| {
        (usize::from(s), usize::from(d))
    });
    let pd = c.proto_dscp[usize::from(proto) * 64 + usize::from(dscp)];
    let words: Vec<u64> = (0..4)
        .map(|i| {
            s.words[i]
                & d.words[i]
                & pd.words[i]
                & c.src_ports[sp].words[i]
                & c.dst_ports[dp].words[i]
        })
        .collect();
    words
        .iter()
        .enumerate()
        .find(|(_, w)| **w != 0)
        .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
}

/// The specification: the first rule in priority order that matches.
fn first_match(
    rules: &RuleSet,
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    dscp: u8,
    ports: Option<(u16, u16)>,
) -> Option<usize> {
    rules.rules().iter().position(|r| {
        r.src.is_none_or(|p| p.contains(src))
            && r.dst.is_none_or(|p| p.contains(dst))
            && r.proto.is_none_or(|p| p == proto)
            && r.dscp.is_none_or(|d| d.contains(dscp))
            && match ports {
                None => r.src_ports.is_none() && r.dst_ports.is_none(),
                Some((s, d)) => {
                    r.src_ports.is_none_or(|p| p.contains(s))
                        && r.dst_ports.is_none_or(|p| p.contains(d))
                }
            }
    })
}

#[test]
fn empty_rule_set_has_default_entries_only() {
    let c = compile(&RuleSet::default(), 1);
    assert_eq!(c.set, 1);
    assert_eq!(c.rule_count, 0);
    assert_eq!(c.src_v4.len(), 1);
    assert_eq!(c.dst_v6.len(), 1);
    assert!(c.src_v4.values().all(|b| *b == RuleBitmap::default()));
    assert!(c.proto_dscp.iter().all(|b| *b == RuleBitmap::default()));
    assert_eq!(c.src_ports.len(), PORT_SLOTS as usize);
    assert_eq!(c.actions.len(), MAX_RULES);
    assert_eq!(
        c.trie_defaults.trivial, 0b1111,
        "every trie holds only its /0 entry"
    );
}

#[test]
fn nested_prefixes_inherit_shorter_rules() {
    let mut narrow = rule(1);
    narrow.src = Some(prefix("10.1.0.0/16"));
    let mut wide = rule(2);
    wide.src = Some(prefix("10.0.0.0/8"));
    let any = rule(3);
    let set = RuleSet::new(vec![narrow, wide, any]).unwrap();
    let c = compile(&set, 0);
    let entry = |a: [u8; 4], len| c.src_v4[&(a, len)];
    let narrow_bm = entry([10, 1, 0, 0], 16);
    assert!(bit(&narrow_bm, 0) && bit(&narrow_bm, 1) && bit(&narrow_bm, 2));
    let wide_bm = entry([10, 0, 0, 0], 8);
    assert!(!bit(&wide_bm, 0) && bit(&wide_bm, 1) && bit(&wide_bm, 2));
    let default_bm = entry([0; 4], 0);
    assert!(!bit(&default_bm, 0) && !bit(&default_bm, 1) && bit(&default_bm, 2));
    // Only the v4 source trie needs walking; the others' /0 bitmap is in the defaults.
    assert_eq!(
        c.trie_defaults.trivial,
        (1 << TRIE_DST_V4) | (1 << TRIE_SRC_V6) | (1 << TRIE_DST_V6)
    );
    assert_eq!(
        c.trie_defaults.bitmaps[TRIE_SRC_V6],
        c.src_v6[&([0; 16], 0)]
    );
    assert_eq!(c.trie_defaults.bitmaps[TRIE_SRC_V4], default_bm);
    // v6 tries hold only the family-free rules.
    let v6_default = c.src_v6[&([0; 16], 0)];
    assert!(!bit(&v6_default, 0) && !bit(&v6_default, 1) && bit(&v6_default, 2));
}

#[test]
fn family_is_fixed_by_the_other_prefix() {
    let mut r = rule(1);
    r.dst = Some(prefix("fd00::/16"));
    let c = compile(&RuleSet::new(vec![r]).unwrap(), 0);
    assert!(
        !bit(&c.src_v4[&([0; 4], 0)], 0),
        "a v6-only rule must not be in the v4 source trie"
    );
    assert!(bit(&c.src_v6[&([0; 16], 0)], 0));
}

#[test]
fn ports_and_no_ports_slot() {
    let mut with_ports = rule(1);
    with_ports.proto = Some(17);
    with_ports.dst_ports = Some(PortRange::new(5000, 5010).unwrap());
    let mut drop_all = rule(2);
    drop_all.verdict = Verdict::Drop;
    drop_all.class = 7;
    let c = compile(&RuleSet::new(vec![with_ports, drop_all]).unwrap(), 0);
    assert!(bit(&c.dst_ports[5000], 0) && bit(&c.dst_ports[5010], 0));
    assert!(!bit(&c.dst_ports[4999], 0) && !bit(&c.dst_ports[5011], 0));
    assert!(
        bit(&c.src_ports[1234], 0),
        "no source range: every source port"
    );
    assert!(
        !bit(&c.src_ports[NO_PORTS as usize], 0),
        "a port rule never matches frames without ports"
    );
    assert!(!bit(&c.dst_ports[NO_PORTS as usize], 0));
    assert!(bit(&c.dst_ports[NO_PORTS as usize], 1));
    assert!(bit(&c.proto_dscp[17 * 64 + 5], 0) && !bit(&c.proto_dscp[6 * 64 + 5], 0));
    assert_eq!(
        c.actions[1],
        RuleAction {
            class: 7,
            verdict: VERDICT_DROP
        }
    );
}

fn arb_prefix(v4: bool) -> impl Strategy<Value = IpPrefix> {
    // Few distinct networks so that random addresses often fall inside.
    (0u8..4, 0u8..4, 0u8..=40).prop_map(move |(a, b, len)| {
        if v4 {
            let len = len.min(32);
            let raw = u32::from_be_bytes([10, a, b, 0]);
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpPrefix::new(IpAddr::V4((raw & mask).into()), len).unwrap()
        } else {
            let len = len * 3;
            let raw = u128::from_be_bytes([0xfd, 0, a, b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpPrefix::new(IpAddr::V6((raw & mask).into()), len).unwrap()
        }
    })
}

fn arb_rule() -> impl Strategy<Value = Rule> {
    let ports = prop::option::of(
        (0u16..8, 0u16..8).prop_map(|(a, b)| PortRange::new(a.min(b), a.max(b)).unwrap()),
    );
    (
        any::<bool>(),
        prop::option::of(arb_prefix(true)),
        prop::option::of(arb_prefix(true)),
        prop::option::of(prop::sample::select(vec![6u8, 17, 1])),
        ports.clone(),
        ports,
        prop::option::of(prop::collection::vec(0u8..3, 1..3)),
        0u8..16,
        any::<bool>(),
    )
        .prop_map(|(v6, src, dst, proto, sp, dp, dscp, class, drop)| {
            let to_v6 = |p: IpPrefix| {
                if !v6 {
                    return p;
                }
                let IpAddr::V4(a) = p.addr() else {
                    unreachable!()
                };
                let o = a.octets();
                let raw =
                    u128::from_be_bytes([0xfd, 0, o[1], o[2], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
                let len = p.len().min(32);
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                IpPrefix::new(IpAddr::V6((raw & mask).into()), len).unwrap()
            };
            let proto = if sp.is_some() || dp.is_some() {
                proto.filter(|p| *p != 1)
            } else {
                proto
            };
            Rule {
                priority: 0,
                src: src.map(to_v6),
                dst: dst.map(to_v6),
                proto,
                src_ports: sp,
                dst_ports: dp,
                dscp: dscp.map(|d| DscpSet::new(&d).unwrap()),
                class,
                verdict: if drop { Verdict::Drop } else { Verdict::Pass },
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn bitmaps_agree_with_first_match(
        rules in prop::collection::vec(arb_rule(), 0..40),
        frames in prop::collection::vec((any::<bool>(), 0u8..4, 0u8..4, 0u8..4, 0u8..4, prop::sample::select(vec![6u8, 17, 1, 50]), 0u8..3, prop::option::of((0u16..9, 0u16..9))), 64),
    ) {
        let rules: Vec<Rule> = rules.into_iter().enumerate().map(|(i, mut r)| { r.priority = 100 - i as u32; r }).collect();
        let set = RuleSet::new(rules).unwrap();
        let compiled = compile(&set, 0);
        for (v6, a, b, c, d, proto, dscp, ports) in frames {
            let (src, dst): (IpAddr, IpAddr) = if v6 {
                (IpAddr::V6(u128::from_be_bytes([0xfd, 0, a, b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]).into()),
                 IpAddr::V6(u128::from_be_bytes([0xfd, 0, c, d, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]).into()))
            } else {
                (IpAddr::V4([10, a, b, 9].into()), IpAddr::V4([10, c, d, 1].into()))
            };
            let ports = if matches!(proto, 6 | 17) { ports } else { None };
            prop_assert_eq!(
                kernel_lookup(&compiled, src, dst, proto, dscp, ports),
                first_match(&set, src, dst, proto, dscp, ports)
            );
        }
    }
}
