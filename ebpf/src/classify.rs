//! Rule lookup: five per-field bitmaps ANDed, lowest set bit wins.
//!
//! The bitmaps are compiled by userspace (`classifier/compile.rs`); see
//! `bpf_maps::classifier` for the layout. Cost is a fixed number of map
//! lookups whatever the number of rules (one config, three array lookups,
//! the address bitmaps — a cache slot or two LPM lookups, see
//! [`addresses`] — and one action lookup); they stop early as soon as the
//! running AND is empty. Shared by XDP ingress and TC egress.

use core::ptr::read_volatile;

use bpf_maps::classifier::{
    BITMAP_WORDS, CLS_FLAG_NO_ADDR_CACHE, DEFAULT_CLASS, MAX_CLASSES, MAX_RULES, NO_PORTS,
    PORT_SLOTS, PROTO_DSCP_SLOTS, VERDICT_DROP, VERDICT_PASS,
};

use crate::{
    addresses,
    maps::{CLS_CONFIG, DST_PORT, PROTO_DSCP, RULE_ACTIONS, SRC_PORT, TRIE_DEFAULTS},
    parse::ParsedFrame,
};

/// Outcome of classifying one parsed frame.
#[derive(Clone, Copy)]
pub struct Classification {
    /// Traffic class, `< MAX_CLASSES` (`DEFAULT_CLASS` when no rule matched).
    pub class: u32,
    /// `VERDICT_PASS` or `VERDICT_DROP`.
    pub verdict: u32,
}

const UNMATCHED: Classification = Classification {
    class: DEFAULT_CLASS,
    verdict: VERDICT_PASS,
};

/// The active rule set, read once per frame, with its `POLICY_*` bits.
#[inline(always)]
pub fn active() -> Option<addresses::ConfigSnapshot> {
    let config = CLS_CONFIG.get(0)?;
    // Read exactly once (volatile: the compiler may not re-load them later):
    // the flip of `active_set` is what makes replacement atomic.
    // SAFETY: `config` is a valid map value; the reads are plain loads.
    let mut snapshot = unsafe {
        addresses::ConfigSnapshot {
            set: read_volatile(&config.active_set) & 1,
            generation: read_volatile(&config.generation),
            use_cache: read_volatile(&config.flags) & CLS_FLAG_NO_ADDR_CACHE == 0,
            policy: 0,
        }
    };
    if let Some(defaults) = TRIE_DEFAULTS.get(snapshot.set) {
        // SAFETY: a valid map value; a plain load.
        snapshot.policy = unsafe { read_volatile(&defaults.policy) };
    }
    Some(snapshot)
}

/// Classifies `frame` with the active rule set.
#[inline(always)]
pub fn classify(frame: &ParsedFrame) -> Classification {
    match active() {
        Some(config) => classify_with(frame, config),
        None => UNMATCHED,
    }
}

/// Classifies `frame` with the rule set of `config`.
#[inline(always)]
pub fn classify_with(frame: &ParsedFrame, config: addresses::ConfigSnapshot) -> Classification {
    let set = config.set;
    // The array lookups are inlined by the verifier and cheap: do them first,
    // and walk the LPM tries only while some rule is still in the running.
    let proto_dscp =
        set * PROTO_DSCP_SLOTS + u32::from(frame.proto) * 64 + u32::from(frame.dscp & 0x3f);
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
    let mut acc = [0u64; BITMAP_WORDS];
    for (i, a) in acc.iter_mut().enumerate() {
        *a = pd.words[i] & sp.words[i] & dp.words[i];
    }
    if is_empty(&acc) {
        return UNMATCHED;
    }

    if !addresses::and_address_bitmaps(frame, config, &mut acc) {
        return UNMATCHED;
    }

    let Some(rule) = lowest_set_bit(&acc) else {
        return UNMATCHED;
    };
    match RULE_ACTIONS.get(set * MAX_RULES as u32 + rule) {
        Some(action) if action.class < MAX_CLASSES => Classification {
            class: action.class,
            verdict: if action.verdict == VERDICT_DROP {
                VERDICT_DROP
            } else {
                VERDICT_PASS
            },
        },
        _ => UNMATCHED,
    }
}

#[inline(always)]
pub fn is_empty(words: &[u64; BITMAP_WORDS]) -> bool {
    words.iter().fold(0, |any, w| any | w) == 0
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
