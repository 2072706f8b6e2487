//! Rule lookup: five per-field bitmaps ANDed, lowest set bit wins.
//!
//! The bitmaps are compiled by userspace (`classifier/compile.rs`); see
//! `bpf_maps::classifier` for the layout. Cost is a fixed number of map
//! lookups whatever the number of rules; the lookups stop early as soon as the
//! running AND is empty. Shared by XDP ingress and TC egress.

use aya_ebpf::maps::lpm_trie::Key;
use bpf_maps::classifier::{
    Ipv4LpmData, Ipv6LpmData, RuleBitmap, BITMAP_WORDS, DEFAULT_CLASS, MAX_CLASSES, MAX_RULES, NO_PORTS,
    PORT_SLOTS, PROTO_DSCP_SLOTS, VERDICT_DROP, VERDICT_PASS,
};

use crate::{
    maps::{CLS_CONFIG, DST_PORT, DST_V4, DST_V6, PROTO_DSCP, RULE_ACTIONS, SRC_PORT, SRC_V4, SRC_V6},
    parse::ParsedFrame,
};

/// `Classification::rule` when no rule matched.
pub const NO_RULE: u32 = u32::MAX;

/// Outcome of classifying one parsed frame.
#[derive(Clone, Copy)]
pub struct Classification {
    /// Traffic class, `< MAX_CLASSES` (`DEFAULT_CLASS` when no rule matched).
    pub class: u32,
    /// `VERDICT_PASS` or `VERDICT_DROP`.
    pub verdict: u32,
    /// Index of the winning rule in the active set, or [`NO_RULE`].
    pub rule: u32,
}

const UNMATCHED: Classification = Classification { class: DEFAULT_CLASS, verdict: VERDICT_PASS, rule: NO_RULE };

/// Classifies `frame` with the active rule set.
#[inline(always)]
pub fn classify(frame: &ParsedFrame) -> Classification {
    let set = match CLS_CONFIG.get(0) {
        Some(config) => config.active_set & 1,
        None => return UNMATCHED,
    };
    let (src, dst) = if frame.ip_version == 4 {
        (lookup_v4(&SRC_V4, set, &frame.src_addr), lookup_v4(&DST_V4, set, &frame.dst_addr))
    } else {
        (lookup_v6(&SRC_V6, set, &frame.src_addr), lookup_v6(&DST_V6, set, &frame.dst_addr))
    };
    let (Some(src), Some(dst)) = (src, dst) else {
        return UNMATCHED;
    };
    let mut acc = [0u64; BITMAP_WORDS];
    let mut any = 0u64;
    for i in 0..BITMAP_WORDS {
        acc[i] = src.words[i] & dst.words[i];
        any |= acc[i];
    }
    if any == 0 {
        return UNMATCHED;
    }

    let proto_dscp = set * PROTO_DSCP_SLOTS + u32::from(frame.proto) * 64 + u32::from(frame.dscp & 0x3f);
    let (sport, dport) = if frame.has_ports() {
        (u32::from(frame.src_port), u32::from(frame.dst_port))
    } else {
        (NO_PORTS, NO_PORTS)
    };
    let (Some(pd), Some(sp), Some(dp)) = (
        PROTO_DSCP.get(proto_dscp),
        SRC_PORT.get(set * PORT_SLOTS + sport),
        DST_PORT.get(set * PORT_SLOTS + dport),
    ) else {
        return UNMATCHED;
    };
    for i in 0..BITMAP_WORDS {
        acc[i] &= pd.words[i] & sp.words[i] & dp.words[i];
    }

    let Some(rule) = lowest_set_bit(&acc) else {
        return UNMATCHED;
    };
    match RULE_ACTIONS.get(set * MAX_RULES as u32 + rule) {
        Some(action) if action.class < MAX_CLASSES => Classification {
            class: action.class,
            verdict: if action.verdict == VERDICT_DROP { VERDICT_DROP } else { VERDICT_PASS },
            rule,
        },
        _ => UNMATCHED,
    }
}

#[inline(always)]
fn lookup_v4<'a>(
    trie: &'a aya_ebpf::maps::LpmTrie<Ipv4LpmData, RuleBitmap>,
    set: u32,
    addr: &[u8; 16],
) -> Option<&'a RuleBitmap> {
    let key = Key::new(8 + 32, Ipv4LpmData { set: set as u8, addr: [addr[0], addr[1], addr[2], addr[3]] });
    trie.get(&key)
}

#[inline(always)]
fn lookup_v6<'a>(
    trie: &'a aya_ebpf::maps::LpmTrie<Ipv6LpmData, RuleBitmap>,
    set: u32,
    addr: &[u8; 16],
) -> Option<&'a RuleBitmap> {
    let key = Key::new(8 + 128, Ipv6LpmData { set: set as u8, addr: *addr });
    trie.get(&key)
}

/// Index of the lowest set bit of the bitmap (the highest-priority rule).
#[inline(always)]
fn lowest_set_bit(words: &[u64; BITMAP_WORDS]) -> Option<u32> {
    for (i, &w) in words.iter().enumerate() {
        if w != 0 {
            return Some(i as u32 * 64 + trailing_zeros(w));
        }
    }
    None
}

/// Trailing zeros of a non-zero word by binary search (BPF has no ctz).
#[inline(always)]
fn trailing_zeros(mut w: u64) -> u32 {
    let mut n = 0;
    if w & 0xffff_ffff == 0 {
        n += 32;
        w >>= 32;
    }
    if w & 0xffff == 0 {
        n += 16;
        w >>= 16;
    }
    if w & 0xff == 0 {
        n += 8;
        w >>= 8;
    }
    if w & 0xf == 0 {
        n += 4;
        w >>= 4;
    }
    if w & 0x3 == 0 {
        n += 2;
        w >>= 2;
    }
    if w & 0x1 == 0 {
        n += 1;
    }
    n
}
