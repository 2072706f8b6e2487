//! The address part of classification: the AND of the source and
//! destination bitmaps of a frame. Each comes from the rule set's stride-8
//! table for its trie (`walk`: one array lookup per address byte until a
//! leaf, see `bpf_maps::classifier::AddrNode`), or from the kernel's LPM trie
//! for an IPv6 trie that has no table (it did not fit). A trie that holds
//! only its `/0` entry for the active set (no rule constrains that field for
//! that family) is not looked up at all: its bitmap is read from
//! `CW_TRIE_DFLT`, written by userspace with the rest of the set.
//!
//! Frames of a flow seen before are answered by the classification cache
//! (`classify.rs`) without coming here.

use core::mem::size_of;

use aya_ebpf::maps::{lpm_trie::Key, LpmTrie};
use bpf_maps::classifier::{
    Ipv4LpmData, Ipv6LpmData, RuleBitmap, TrieDefaults, ADDR_BITMAPS_PER_SET, ADDR_POOL_NODES,
    ADDR_SLOT_LEAF, BITMAP_WORDS, LPM_SET_BITS, TRIE_DST_V4, TRIE_DST_V6, TRIE_SRC_V4, TRIE_SRC_V6,
};

use crate::{
    classify::is_empty,
    maps::{ADDR_BITMAPS, ADDR_NODES, DST_V4, DST_V6, SRC_V4, SRC_V6},
    parse::ParsedFrame,
};

/// What a frame read from the classifier config, once.
#[derive(Clone, Copy)]
pub struct ConfigSnapshot {
    /// False: there is no config (then every other field is zero).
    pub present: bool,
    pub set: u32,
    pub generation: u64,
    pub use_cache: bool,
    /// `POLICY_*` bits of the set.
    pub policy: u32,
    /// The set's `CW_TRIE_DFLT` entry.
    pub defaults: Option<&'static TrieDefaults>,
}

impl ConfigSnapshot {
    pub const ABSENT: Self = Self {
        present: false,
        set: 0,
        generation: 0,
        use_cache: false,
        policy: 0,
        defaults: None,
    };
}

/// ANDs the frame's source and destination bitmaps into `acc`; false when
/// nothing is left (or the tries hold nothing for this set yet).
#[inline(always)]
pub fn and_address_bitmaps(
    frame: &ParsedFrame,
    config: ConfigSnapshot,
    acc: &mut [u64; BITMAP_WORDS],
) -> bool {
    let Some(src) = lookup(frame, config, true) else {
        return false;
    };
    and(acc, src);
    if is_empty(acc) {
        return false;
    }
    let Some(dst) = lookup(frame, config, false) else {
        return false;
    };
    and(acc, dst);
    !is_empty(acc)
}

#[inline(always)]
fn and(acc: &mut [u64; BITMAP_WORDS], bitmap: &RuleBitmap) {
    for (a, w) in acc.iter_mut().zip(bitmap.words) {
        *a &= w;
    }
}

/// The source (`src`) or destination bitmap of the frame: from
/// `CW_TRIE_DFLT` when the set's trie for that field and family is trivial,
/// otherwise from its table, or its LPM trie when it has no table.
#[inline(always)]
fn lookup(frame: &ParsedFrame, config: ConfigSnapshot, src: bool) -> Option<&'static RuleBitmap> {
    let set = config.set;
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
    if let Some(defaults) = config.defaults {
        if let Some(bitmap) = trivial_bitmap(defaults, trie) {
            return Some(bitmap);
        }
        if defaults.tables & (1 << trie) != 0 {
            let root = *defaults.roots.get(trie)?;
            let leaf = walk(set, root, addr, if v4 { 4 } else { 16 });
            if leaf >= ADDR_BITMAPS_PER_SET {
                return None;
            }
            return ADDR_BITMAPS.get(set * ADDR_BITMAPS_PER_SET + leaf);
        }
    }
    lookup_lpm(
        set,
        u64::from(addr[0]) | u64::from(addr[1]) << 32,
        u64::from(addr[2]) | u64::from(addr[3]) << 32,
        u32::from(v4) << 1 | u32::from(src),
    )
}

/// The leaf of `addr` in the stride-8 table of `set` rooted at `root`: one
/// node lookup per address byte until a leaf, at most `levels` (4 for IPv4,
/// 16 for IPv6). The bitmap index the leaf holds, or
/// `ADDR_BITMAPS_PER_SET` for a child index past the pool or a walk without
/// a leaf (neither is ever written). Every index is checked by the map
/// lookup itself.
///
/// One small loop, inlined: a BPF-to-BPF call costs a return through the
/// kernel's return thunk (several ns under this host's SRSO mitigation),
/// and unrolled copies (16 levels, four call sites) made the program half
/// again as large and every frame slower, cached ones too. The address is
/// shifted through two registers, first byte lowest (words are as loaded
/// from the wire, little-endian), so no stack slot is indexed at run time.
#[inline(always)]
fn walk(set: u32, root: u32, addr: &[u32; 4], levels: u32) -> u32 {
    let base = set * ADDR_POOL_NODES;
    let mut node = root;
    let mut lo = u64::from(addr[0]) | u64::from(addr[1]) << 32;
    let mut hi = u64::from(addr[2]) | u64::from(addr[3]) << 32;
    let mut level = 0;
    while level < levels && level < 16 {
        if node >= ADDR_POOL_NODES {
            break;
        }
        let Some(n) = ADDR_NODES.get(base + node) else {
            break;
        };
        let slot = n.slots[(lo & 0xff) as usize];
        if slot & ADDR_SLOT_LEAF != 0 {
            return slot & !ADDR_SLOT_LEAF;
        }
        node = slot;
        lo = lo >> 8 | hi << 56;
        hi >>= 8;
        level += 1;
    }
    ADDR_BITMAPS_PER_SET
}

/// The LPM trie's bitmap, for a trie without a table (rare: an IPv6 trie
/// too large for the pool, or a set never written).
///
/// Not inlined: inlined, LLVM merged these trie lookups and the table's
/// bitmap lookup into one call through a map pointer chosen at run time,
/// which the verifier cannot inline (a real `bpf_map_lookup_elem`, ~20 ns
/// here, on every walk).
///
/// The address comes by value (words 0–1 in `lo`, 2–3 in `hi`; `which` is
/// `v4 << 1 | src`): a pointer into the parsed frame made LLVM keep the
/// whole frame in a stack copy, written on every frame before the cache
/// lookup, for this rare call.
#[inline(never)]
fn lookup_lpm(set: u32, lo: u64, hi: u64, which: u32) -> Option<&'static RuleBitmap> {
    let addr = [lo as u32, (lo >> 32) as u32, hi as u32, (hi >> 32) as u32];
    match which {
        3 => lookup_v4(&SRC_V4, set, &addr),
        2 => lookup_v4(&DST_V4, set, &addr),
        1 => lookup_v6(&SRC_V6, set, &addr),
        _ => lookup_v6(&DST_V6, set, &addr),
    }
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
