//! Rule lookup: five per-field bitmaps ANDed, lowest set bit wins.
//!
//! The bitmaps are compiled by userspace (`classifier/compile.rs`); see
//! `bpf_maps::classifier` for the layout. Cost is a fixed number of map
//! lookups whatever the number of rules (one config, three array lookups,
//! the address bitmaps — table walks, see [`addresses`] — and one action
//! lookup); they stop early as soon as the running AND is empty. Shared by
//! XDP ingress and TC egress.
//!
//! A steady flow skips all of that: a per-CPU, direct-mapped cache holds
//! the result (class and verdict) per flow — address pair, protocol, DSCP
//! and ports, every input of the lookup above — tagged with the rule set
//! and the generation it was computed under. Userspace changes a rule set's
//! contents only together with a new generation, and a frame uses a slot
//! only when the slot's (set, generation) equal what the frame read from the
//! config, so a slot is never used after its set was rewritten (a torn
//! config read yields a pair that no later frame reads again). Per-CPU slots
//! are only touched by the program running on that CPU, with bottom halves
//! disabled, so a slot is never read half-written.

use core::ptr::read_volatile;

use bpf_maps::classifier::{
    AddrCacheEntry, ADDR_CACHE_SLOTS, BITMAP_WORDS, CLS_FLAG_NO_ADDR_CACHE, DEFAULT_CLASS,
    MAX_CLASSES, MAX_RULES, NO_PORTS, PORT_SLOTS, PROTO_DSCP_SLOTS, VERDICT_DROP, VERDICT_PASS,
};

use crate::{
    addresses,
    maps::{ADDR_CACHE, CLS_CONFIG, DST_PORT, PROTO_DSCP, RULE_ACTIONS, SRC_PORT, TRIE_DEFAULTS},
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

/// The active rule set, read once per frame, with its `POLICY_*` bits;
/// [`ConfigSnapshot::ABSENT`](addresses::ConfigSnapshot::ABSENT) without a
/// config (never for a loaded object: the array has its one entry).
///
/// Not an `Option`: LLVM spilled the undefined payload of a `None` on one
/// path, and the 6.1 and 6.12 verifiers refuse a read of an uninitialised
/// register even for a spill (`R2 !read_ok`).
#[inline(always)]
pub fn active() -> addresses::ConfigSnapshot {
    let Some(config) = CLS_CONFIG.get(0) else {
        return addresses::ConfigSnapshot::ABSENT;
    };
    // Read exactly once (volatile: the compiler may not re-load them later):
    // the flip of `active_set` is what makes replacement atomic.
    // SAFETY: `config` is a valid map value; the reads are plain loads.
    let mut snapshot = unsafe {
        addresses::ConfigSnapshot {
            present: true,
            set: read_volatile(&config.active_set) & 1,
            generation: read_volatile(&config.generation),
            use_cache: read_volatile(&config.flags) & CLS_FLAG_NO_ADDR_CACHE == 0,
            policy: 0,
            defaults: None,
        }
    };
    snapshot.defaults = TRIE_DEFAULTS.get(snapshot.set);
    if let Some(defaults) = snapshot.defaults {
        // SAFETY: a valid map value; a plain load.
        snapshot.policy = unsafe { read_volatile(&defaults.policy) };
    }
    snapshot
}

/// Classifies `frame` with the active rule set.
#[inline(always)]
pub fn classify(frame: &ParsedFrame) -> Classification {
    let config = active();
    if !config.present {
        return UNMATCHED;
    }
    classify_with(frame, config)
}

/// Classifies `frame` with the rule set of `config`: from the cache when
/// the flow's slot holds its result, otherwise from the maps (then cached).
#[inline(always)]
pub fn classify_with(frame: &ParsedFrame, config: addresses::ConfigSnapshot) -> Classification {
    let (l4, ports) = flow_key(frame);
    let slot = if config.use_cache {
        ADDR_CACHE.get_ptr_mut(slot_index(frame, l4, ports))
    } else {
        None
    };
    let family = u32::from(frame.ip_version);
    if let Some(slot) = slot {
        // SAFETY: a valid per-CPU map value that only this CPU touches, and
        // not re-entrantly (see the module comment).
        let slot = unsafe { &*slot };
        if slot.family == family
            && slot.generation == config.generation
            && slot.set == config.set
            && slot.l4 == l4
            && slot.ports == ports
            && slot.src == frame.src_addr
            && slot.dst == frame.dst_addr
        {
            return Classification {
                class: slot.class,
                verdict: slot.verdict,
            };
        }
    }
    let result = classify_maps(frame, config);
    if let Some(slot) = slot {
        // SAFETY: as above.
        unsafe {
            *slot = AddrCacheEntry {
                generation: config.generation,
                src: frame.src_addr,
                dst: frame.dst_addr,
                family,
                set: config.set,
                l4,
                ports,
                class: result.class,
                verdict: result.verdict,
            };
        }
    }
    result
}

/// The cache key's protocol/DSCP/ports words (see `AddrCacheEntry`).
#[inline(always)]
fn flow_key(frame: &ParsedFrame) -> (u32, u32) {
    let l4 = u32::from(frame.proto) << 16 | u32::from(frame.dscp & 0x3f) << 8;
    if frame.has_ports() {
        (
            l4 | 1,
            u32::from(frame.src_port) << 16 | u32::from(frame.dst_port),
        )
    } else {
        (l4, 0)
    }
}

/// Cache slot of a flow (multiplicative hash of the XORed words).
#[inline(always)]
fn slot_index(frame: &ParsedFrame, l4: u32, ports: u32) -> u32 {
    let mut x = l4 ^ ports.rotate_left(8);
    for i in 0..4 {
        x ^= frame.src_addr[i] ^ frame.dst_addr[i].rotate_left(16);
    }
    x.wrapping_mul(0x9e37_79b1) >> 24 & (ADDR_CACHE_SLOTS - 1)
}

/// Classifies `frame` from the rule maps of `config`'s set.
#[inline(always)]
fn classify_maps(frame: &ParsedFrame, config: addresses::ConfigSnapshot) -> Classification {
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

/// Trailing zeros of a non-zero word (BPF has no ctz, and LLVM's expansion
/// wants a lookup table): the population count of the ones below the lowest
/// set bit, without a branch.
#[inline(always)]
fn trailing_zeros(w: u64) -> u32 {
    let mut x = (w & w.wrapping_neg()).wrapping_sub(1);
    x -= (x >> 1) & 0x5555_5555_5555_5555;
    x = (x & 0x3333_3333_3333_3333) + ((x >> 2) & 0x3333_3333_3333_3333);
    x = (x + (x >> 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    (x.wrapping_mul(0x0101_0101_0101_0101) >> 56) as u32
}
