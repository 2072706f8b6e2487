//! Compiles a [`RuleSet`] into the exact contents of the classifier maps for
//! one rule-set index (see `bpf_maps::classifier` for the layout). Pure: no
//! map is touched here; `maps.rs` writes what this produces.
//!
//! Bit `i` of every bitmap stands for rule `i` in priority order. For each
//! field, the bitmap found for a frame's value has bit `i` set when rule `i`
//! accepts that value:
//! * prefixes: one LPM entry per distinct prefix of the field's rules, plus a
//!   default entry (`/0`); an entry's bitmap holds every rule whose prefix
//!   contains the entry's prefix, and every rule without a prefix on that
//!   field. A rule whose other prefix fixes the address family appears only in
//!   the tries of that family.
//!   The same entries are also compiled into stride-8 tables
//!   (`addr_table`), which the kernel walks instead of the LPM tries.
//! * (protocol, DSCP): rules whose protocol and DSCP accept the pair.
//! * ports: rules whose range holds the port, plus rules without a range on
//!   that side; the `NO_PORTS` slot holds only rules without any port range.
//! * admission: one entry (value 1) per admitted prefix in the family's
//!   admission trie, no `/0` default; the protected-port bitmap; and the
//!   `POLICY_*` bits in the set's `TrieDefaults::policy`.

use std::{collections::BTreeMap, net::IpAddr};

use bpf_maps::classifier::{
    RuleAction, RuleBitmap, TrieDefaults, ADMISSION_PORT_WORDS, MAX_RULES, NO_PORTS,
    POLICY_ADMISSION, POLICY_UNCLASSIFIED_DROP, PORT_SLOTS, PROTO_DSCP_SLOTS, RULE_SETS,
    TRIE_DST_V4, TRIE_DST_V6, TRIE_SRC_V4, TRIE_SRC_V6, VERDICT_DROP, VERDICT_PASS,
};

use super::{
    addr_table::AddrTables,
    admission::{Admission, UnclassifiedAction},
    rule::{IpPrefix, PortRange, Rule, RuleSet, Verdict},
};

/// LPM entries of one trie for one rule set: (address, prefix length in
/// bits of the address, without the set byte) → value (a rule bitmap, or
/// `1` in the admission tries).
pub type LpmEntries<const N: usize, V = RuleBitmap> = BTreeMap<([u8; N], u8), V>;

/// Everything one rule set puts into the maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledRuleSet {
    /// Rule-set index (`0..RULE_SETS`) the contents are keyed with.
    pub set: u32,
    pub rule_count: u32,
    pub src_v4: LpmEntries<4>,
    pub dst_v4: LpmEntries<4>,
    pub src_v6: LpmEntries<16>,
    pub dst_v6: LpmEntries<16>,
    /// `PROTO_DSCP_SLOTS` bitmaps, indexed `proto * 64 + dscp`.
    pub proto_dscp: Vec<RuleBitmap>,
    /// `PORT_SLOTS` bitmaps, indexed by port or `NO_PORTS`.
    pub src_ports: Vec<RuleBitmap>,
    pub dst_ports: Vec<RuleBitmap>,
    /// `MAX_RULES` actions; slots past `rule_count` are zero.
    pub actions: Vec<RuleAction>,
    /// Which tries hold only their `/0` entry, and its bitmap; the
    /// `POLICY_*` bits; which tries have a stride-8 table, and its root.
    pub trie_defaults: TrieDefaults,
    /// The stride-8 tables of the four tries (`addr_table`), derived from
    /// the LPM entries above.
    pub addr_tables: AddrTables,
    /// Admitted source prefixes (value 1), per family.
    pub admission_v4: LpmEntries<4, u32>,
    pub admission_v6: LpmEntries<16, u32>,
    /// `ADMISSION_PORT_WORDS` words: the protected-port bitmap.
    pub admission_ports: Vec<u32>,
}

/// Sets bit `rule` of `bitmap`.
pub fn set_bit(bitmap: &mut RuleBitmap, rule: usize) {
    bitmap.words[rule / 64] |= 1u64 << (rule % 64);
}

/// Whether bit `rule` of `bitmap` is set.
pub fn bit(bitmap: &RuleBitmap, rule: usize) -> bool {
    bitmap.words[rule / 64] & (1u64 << (rule % 64)) != 0
}

/// Compiles `rules` for rule-set index `set`.
///
/// # Panics
/// When `set >= RULE_SETS` (a caller bug, not an input error).
pub fn compile(set_rules: &RuleSet, set: u32) -> CompiledRuleSet {
    assert!(set < RULE_SETS, "rule-set index {set} out of range");
    let rules = set_rules.rules();
    debug_assert!(rules.len() <= MAX_RULES);
    let src_v4 = lpm_entries(rules, |r| r.src, Family::V4);
    let dst_v4 = lpm_entries(rules, |r| r.dst, Family::V4);
    let src_v6 = lpm_entries(rules, |r| r.src, Family::V6);
    let dst_v6 = lpm_entries(rules, |r| r.dst, Family::V6);
    let mut trie_defaults = TrieDefaults::default();
    note_default(&mut trie_defaults, TRIE_SRC_V4, &src_v4);
    note_default(&mut trie_defaults, TRIE_DST_V4, &dst_v4);
    note_default(&mut trie_defaults, TRIE_SRC_V6, &src_v6);
    note_default(&mut trie_defaults, TRIE_DST_V6, &dst_v6);
    trie_defaults.policy = policy_bits(set_rules);
    let addr_tables = AddrTables::build(&src_v4, &dst_v4, &src_v6, &dst_v6);
    trie_defaults.tables = addr_tables.tables;
    trie_defaults.roots = addr_tables.roots;
    let (admission_v4, admission_v6, admission_ports) = admission_entries(set_rules.admission());
    CompiledRuleSet {
        set,
        rule_count: rules.len() as u32,
        src_v4,
        dst_v4,
        src_v6,
        dst_v6,
        proto_dscp: proto_dscp_bitmaps(rules),
        src_ports: port_bitmaps(rules, |r| r.src_ports),
        dst_ports: port_bitmaps(rules, |r| r.dst_ports),
        actions: actions(rules),
        trie_defaults,
        addr_tables,
        admission_v4,
        admission_v6,
        admission_ports,
    }
}

fn policy_bits(rules: &RuleSet) -> u32 {
    let mut bits = 0;
    if rules.unclassified() == UnclassifiedAction::Drop {
        bits |= POLICY_UNCLASSIFIED_DROP;
    }
    if rules.admission().is_some() {
        bits |= POLICY_ADMISSION;
    }
    bits
}

type AdmissionEntries = (LpmEntries<4, u32>, LpmEntries<16, u32>, Vec<u32>);

fn admission_entries(admission: Option<&Admission>) -> AdmissionEntries {
    let mut v4 = LpmEntries::new();
    let mut v6 = LpmEntries::new();
    let mut ports = vec![0u32; ADMISSION_PORT_WORDS as usize];
    let Some(admission) = admission else {
        return (v4, v6, ports);
    };
    for prefix in admission.prefixes() {
        match prefix.addr() {
            IpAddr::V4(a) => v4.insert((a.octets(), prefix.len()), 1),
            IpAddr::V6(a) => v6.insert((a.octets(), prefix.len()), 1),
        };
    }
    for range in admission.ports() {
        for port in range.lo()..=range.hi() {
            ports[usize::from(port / 32)] |= 1 << (port % 32);
        }
    }
    (v4, v6, ports)
}

/// Records the `/0` bitmap of trie `index`, and whether it is all there is.
fn note_default<const N: usize>(
    defaults: &mut TrieDefaults,
    index: usize,
    entries: &LpmEntries<N>,
) {
    defaults.bitmaps[index] = entries.get(&([0; N], 0)).copied().unwrap_or_default();
    if entries.len() == 1 {
        defaults.trivial |= 1 << index;
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

/// The address family a rule is confined to by its prefixes, if any.
fn rule_family(rule: &Rule) -> Option<Family> {
    rule.src
        .or(rule.dst)
        .map(|p| if p.is_ipv4() { Family::V4 } else { Family::V6 })
}

/// Address bytes of `addr` when it is of the trie's width `N`.
fn addr_bytes<const N: usize>(addr: IpAddr) -> Option<[u8; N]> {
    match addr {
        IpAddr::V4(a) => a.octets().as_slice().try_into().ok(),
        IpAddr::V6(a) => a.octets().as_slice().try_into().ok(),
    }
}

fn lpm_entries<const N: usize>(
    rules: &[Rule],
    field: impl Fn(&Rule) -> Option<IpPrefix>,
    family: Family,
) -> LpmEntries<N> {
    let in_family = |p: &IpPrefix| p.is_ipv4() == (family == Family::V4);
    let unspecified: IpAddr = if family == Family::V4 {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let mut prefixes: Vec<IpPrefix> =
        vec![IpPrefix::new(unspecified, 0).expect("/0 is a valid prefix")];
    prefixes.extend(rules.iter().filter_map(&field).filter(in_family));

    let mut entries = LpmEntries::new();
    for prefix in prefixes {
        let Some(addr) = addr_bytes::<N>(prefix.addr()) else {
            continue;
        };
        let mut bitmap = RuleBitmap::default();
        for (i, rule) in rules.iter().enumerate() {
            if rule_family(rule).is_some_and(|f| f != family) {
                continue;
            }
            let accepts = match field(rule) {
                None => true,
                Some(r) => r.len() <= prefix.len() && r.contains(prefix.addr()),
            };
            if accepts {
                set_bit(&mut bitmap, i);
            }
        }
        entries.insert((addr, prefix.len()), bitmap);
    }
    entries
}

fn proto_dscp_bitmaps(rules: &[Rule]) -> Vec<RuleBitmap> {
    let mut out = vec![RuleBitmap::default(); PROTO_DSCP_SLOTS as usize];
    for (i, rule) in rules.iter().enumerate() {
        let protos = rule.proto.map_or(0..=255u8, |p| p..=p);
        for proto in protos {
            for dscp in (0..=63u8).filter(|d| rule.dscp.is_none_or(|set| set.contains(*d))) {
                set_bit(&mut out[usize::from(proto) * 64 + usize::from(dscp)], i);
            }
        }
    }
    out
}

fn port_bitmaps(rules: &[Rule], field: impl Fn(&Rule) -> Option<PortRange>) -> Vec<RuleBitmap> {
    // Rules without a range on this side hold every port; ranged rules are
    // toggled on at `lo` and off at `hi + 1`, then one sweep accumulates.
    let mut always = RuleBitmap::default();
    let mut toggles = vec![RuleBitmap::default(); PORT_SLOTS as usize];
    let mut out = vec![RuleBitmap::default(); PORT_SLOTS as usize];
    for (i, rule) in rules.iter().enumerate() {
        match field(rule) {
            None => set_bit(&mut always, i),
            Some(range) => {
                set_bit(&mut toggles[usize::from(range.lo())], i);
                if let Some(end) = range.hi().checked_add(1) {
                    set_bit(&mut toggles[usize::from(end)], i);
                }
            }
        }
        if rule.src_ports.is_none() && rule.dst_ports.is_none() {
            set_bit(&mut out[NO_PORTS as usize], i);
        }
    }
    let mut ranged = RuleBitmap::default();
    for port in 0..=usize::from(u16::MAX) {
        for w in 0..ranged.words.len() {
            ranged.words[w] ^= toggles[port].words[w];
            out[port].words[w] = ranged.words[w] | always.words[w];
        }
    }
    out
}

fn actions(rules: &[Rule]) -> Vec<RuleAction> {
    let mut out = vec![RuleAction::default(); MAX_RULES];
    for (slot, rule) in out.iter_mut().zip(rules) {
        *slot = RuleAction {
            class: u32::from(rule.class),
            verdict: match rule.verdict {
                Verdict::Pass => VERDICT_PASS,
                Verdict::Drop => VERDICT_DROP,
            },
        };
    }
    out
}

/// The specification of an LPM lookup, for tests: the bitmap of the longest
/// prefix of `entries` that holds `addr`.
#[cfg(test)]
pub(crate) fn longest_prefix<const N: usize>(
    entries: &LpmEntries<N>,
    addr: [u8; N],
) -> Option<RuleBitmap> {
    let value = |a: [u8; N]| a.iter().fold(0u128, |acc, b| (acc << 8) | u128::from(*b));
    let bits = (N * 8) as u32;
    let target = value(addr);
    entries
        .iter()
        .filter(|((a, len), _)| {
            let shift = bits - u32::from(*len);
            *len == 0 || (value(*a) >> shift) == (target >> shift)
        })
        .max_by_key(|((_, len), _)| *len)
        .map(|(_, b)| *b)
}

#[cfg(test)]
#[path = "compile_tests.rs"]
mod tests;
