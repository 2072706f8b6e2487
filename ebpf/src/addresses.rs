//! The address part of classification: the AND of the source and
//! destination LPM bitmaps of a frame, through a per-CPU direct-mapped cache.
//! On a miss, a trie that holds only its `/0` entry for the active set (no
//! rule constrains that field for that family) is not walked: its bitmap is
//! read from `CW_TRIE_DFLT`, written by userspace with the rest of the set.
//!
//! A cache slot holds the ANDed bitmap for one address pair, tagged with the
//! rule set and the generation it was computed under. Userspace changes a
//! rule set's contents only together with a new generation, and a frame uses
//! a slot only when the slot's (set, generation) equal what the frame read
//! from the config, so a slot is never used after its set was rewritten
//! (a torn config read yields a pair that no later frame reads again).
//! Per-CPU slots are only touched by the program running on that CPU, with
//! bottom halves disabled, so a slot is never read half-written.

use core::mem::size_of;

use aya_ebpf::maps::{lpm_trie::Key, LpmTrie};
use bpf_maps::classifier::{
    AddrCacheEntry, Ipv4LpmData, Ipv6LpmData, RuleBitmap, TrieDefaults, ADDR_BITMAPS_PER_SET,
    ADDR_CACHE_SLOTS, ADDR_POOL_NODES, ADDR_SLOT_LEAF, BITMAP_WORDS, LPM_SET_BITS, TRIE_DST_V4,
    TRIE_DST_V6, TRIE_SRC_V4, TRIE_SRC_V6,
};

use crate::{
    classify::is_empty,
    maps::{ADDR_BITMAPS, ADDR_CACHE, ADDR_NODES, DST_V4, DST_V6, SRC_V4, SRC_V6, TRIE_DEFAULTS},
    parse::ParsedFrame,
};

/// What a frame read from the classifier config, once.
#[derive(Clone, Copy)]
pub struct ConfigSnapshot {
    pub set: u32,
    pub generation: u64,
    pub use_cache: bool,
    /// `POLICY_*` bits of the set.
    pub policy: u32,
}

/// ANDs the frame's source and destination bitmaps into `acc`; false when
/// nothing is left (or the tries hold nothing for this set yet).
#[inline(always)]
pub fn and_address_bitmaps(
    frame: &ParsedFrame,
    config: ConfigSnapshot,
    acc: &mut [u64; BITMAP_WORDS],
) -> bool {
    if !config.use_cache {
        let Some(src) = lookup(frame, config.set, true) else {
            return false;
        };
        and(acc, src);
        if is_empty(acc) {
            return false;
        }
        let Some(dst) = lookup(frame, config.set, false) else {
            return false;
        };
        and(acc, dst);
        return !is_empty(acc);
    }
    let Some(slot) = ADDR_CACHE.get_ptr_mut(slot_index(frame)) else {
        return false;
    };
    // SAFETY: a valid per-CPU map value that only this CPU touches, and not
    // re-entrantly (see the module comment).
    let slot = unsafe { &mut *slot };
    let family = u32::from(frame.ip_version);
    let hit = slot.family == family
        && slot.generation == config.generation
        && slot.set == config.set
        && slot.src == frame.src_addr
        && slot.dst == frame.dst_addr;
    if !hit {
        let (Some(src), Some(dst)) = (
            lookup(frame, config.set, true),
            lookup(frame, config.set, false),
        ) else {
            return false;
        };
        let mut both = RuleBitmap::default();
        for ((b, s), d) in both.words.iter_mut().zip(src.words).zip(dst.words) {
            *b = s & d;
        }
        *slot = AddrCacheEntry {
            generation: config.generation,
            src: frame.src_addr,
            dst: frame.dst_addr,
            family,
            set: config.set,
            bitmap: both,
        };
    }
    and(acc, &slot.bitmap);
    !is_empty(acc)
}

#[inline(always)]
fn and(acc: &mut [u64; BITMAP_WORDS], bitmap: &RuleBitmap) {
    for (a, w) in acc.iter_mut().zip(bitmap.words) {
        *a &= w;
    }
}

/// Cache slot of an address pair (multiplicative hash of the XORed words).
#[inline(always)]
fn slot_index(frame: &ParsedFrame) -> u32 {
    let mut x = 0u32;
    for i in 0..4 {
        x ^= frame.src_addr[i] ^ frame.dst_addr[i].rotate_left(16);
    }
    x.wrapping_mul(0x9e37_79b1) >> 24 & (ADDR_CACHE_SLOTS - 1)
}

/// The source (`src`) or destination LPM bitmap of the frame; without a
/// trie walk when the set's trie for that field and family is trivial.
#[inline(always)]
fn lookup(frame: &ParsedFrame, set: u32, src: bool) -> Option<&'static RuleBitmap> {
    let addr = if src {
        &frame.src_addr
    } else {
        &frame.dst_addr
    };
    let v4 = frame.ip_version == 4;
    let trie = match (v4, src) {
        (true, true) => TRIE_SRC_V4,
        (true, false) => TRIE_DST_V4,
        (false, true) => TRIE_SRC_V6,
        (false, false) => TRIE_DST_V6,
    };
    if let Some(defaults) = TRIE_DEFAULTS.get(set) {
        if let Some(bitmap) = trivial_bitmap(defaults, trie) {
            return Some(bitmap);
        }
        if defaults.tables & (1 << trie) != 0 {
            let root = *defaults.roots.get(trie)?;
            return walk(set, root, addr, if v4 { 1 } else { 4 });
        }
    }
    match (v4, src) {
        (true, true) => lookup_v4(&SRC_V4, set, addr),
        (true, false) => lookup_v4(&DST_V4, set, addr),
        (false, true) => lookup_v6(&SRC_V6, set, addr),
        (false, false) => lookup_v6(&DST_V6, set, addr),
    }
}

/// The bitmap of `addr` (its first `words` words) in the stride-8 table of
/// `set` rooted at `root`: one node lookup per address byte until a leaf
/// (at most 4 for IPv4, 16 for IPv6), then the leaf's bitmap. `None` for a
/// child index past the pool or a walk without a leaf (neither is ever
/// written). Every index is checked by the map lookup itself.
///
/// Not inlined: one copy of the (unrolled) walk serves the four call sites
/// (inlined copies made the program half again as large and every frame
/// slower, cached ones too), and its lookups stay apart from the LPM
/// lookups of the callers: LLVM merged an inlined bitmap lookup with them
/// into one call through a map pointer chosen at run time, which the
/// verifier cannot inline (a real `bpf_map_lookup_elem`, ~20 ns here).
#[inline(never)]
fn walk(set: u32, root: u32, addr: &[u32; 4], words: u32) -> Option<&'static RuleBitmap> {
    let base = set * ADDR_POOL_NODES;
    let mut node = root;
    for (w, word) in addr.iter().enumerate() {
        if w as u32 >= words {
            break;
        }
        let mut word = *word;
        for _ in 0..4 {
            if node >= ADDR_POOL_NODES {
                return None;
            }
            let n = ADDR_NODES.get(base + node)?;
            let slot = n.slots[(word & 0xff) as usize];
            if slot & ADDR_SLOT_LEAF != 0 {
                let leaf = slot & !ADDR_SLOT_LEAF;
                if leaf >= ADDR_BITMAPS_PER_SET {
                    return None;
                }
                return ADDR_BITMAPS.get(set * ADDR_BITMAPS_PER_SET + leaf);
            }
            node = slot;
            word >>= 8;
        }
    }
    None
}

#[inline(always)]
fn trivial_bitmap(defaults: &'static TrieDefaults, trie: usize) -> Option<&'static RuleBitmap> {
    if defaults.trivial & (1 << trie) == 0 {
        return None;
    }
    defaults.bitmaps.get(trie)
}

/// An LPM key laid out exactly like `Key<Ipv4LpmData>` (which is packed, so
/// the compiler would build it byte by byte), but word-aligned.
#[repr(C, align(4))]
pub struct AlignedKeyV4 {
    prefix_len: u32,
    set: u32,
    addr: u32,
}

/// Same for `Key<Ipv6LpmData>`.
#[repr(C, align(4))]
pub struct AlignedKeyV6 {
    prefix_len: u32,
    set: u32,
    addr: [u32; 4],
}

const _: () = assert!(size_of::<AlignedKeyV4>() == size_of::<Key<Ipv4LpmData>>());
const _: () = assert!(size_of::<AlignedKeyV6>() == size_of::<Key<Ipv6LpmData>>());

#[inline(always)]
pub fn lookup_v4<'a, V>(
    trie: &'a LpmTrie<Ipv4LpmData, V>,
    set: u32,
    addr: &[u32; 4],
) -> Option<&'a V> {
    let key = AlignedKeyV4 {
        prefix_len: LPM_SET_BITS + 32,
        set,
        addr: addr[0],
    };
    // SAFETY: `Key<Ipv4LpmData>` is packed (alignment 1), has the same size
    // (asserted above) and the same field order; every byte is initialised.
    let key: &Key<Ipv4LpmData> = unsafe { &*(&key as *const AlignedKeyV4).cast() };
    trie.get(key)
}

#[inline(always)]
pub fn lookup_v6<'a, V>(
    trie: &'a LpmTrie<Ipv6LpmData, V>,
    set: u32,
    addr: &[u32; 4],
) -> Option<&'a V> {
    let key = AlignedKeyV6 {
        prefix_len: LPM_SET_BITS + 128,
        set,
        addr: *addr,
    };
    // SAFETY: as in `lookup_v4`.
    let key: &Key<Ipv6LpmData> = unsafe { &*(&key as *const AlignedKeyV6).cast() };
    trie.get(key)
}
