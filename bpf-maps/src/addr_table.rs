//! The address table: a multibit trie of 8-bit strides, held in two array
//! maps, that answers the same question as an LPM trie of the classifier
//! (the bitmap of the longest prefix holding an address) with one array
//! lookup per address byte that a rule's prefix reaches past, instead of a
//! kernel trie walk. The kernel uses it for the first frame of a new address
//! pair (the per-CPU address cache serves the rest).
//!
//! Layout, per rule set `s` and trie `t` (`TRIE_*`):
//! * block `root_block(s, t)` is the root: its entry `b` is for addresses
//!   whose first byte is `b`;
//! * an entry is either a bitmap id (`entry < ADDR_CHILD`), the bitmap being
//!   [`ADDR_BITMAPS`](MAP_ADDR_BITMAPS)`[bitmap_index(s, id)]`, or
//!   `ADDR_CHILD | block`: look the next address byte up in that block;
//! * the blocks past the roots are split between the sets
//!   ([`pool_block`]), [`POOL_BLOCKS_PER_SET`] each.
//!
//! A trie whose table would not fit the pool is not tabled
//! ([`TrieDefaults::tabled`](crate::classifier::TrieDefaults) bit clear) and
//! the kernel walks its LPM trie as before. Userspace writes the blocks and
//! bitmaps of the inactive set through `mmap` (the maps are
//! `BPF_F_MMAPABLE`) before the flip, like every other map of the set.

use crate::classifier::RULE_SETS;

/// Map names (≤ 15 bytes).
pub const MAP_ADDR_BLOCKS: &str = "CW_ADDR_BLK";
pub const MAP_ADDR_BITMAPS: &str = "CW_ADDR_BMP";

/// Entries of a block: one per value of an address byte.
pub const BLOCK_ENTRIES: usize = 256;
/// Entry flag: the rest of the entry is a block index, not a bitmap id.
pub const ADDR_CHILD: u32 = 1 << 31;
/// Tries per rule set (`TRIE_SRC_V4` .. `TRIE_DST_V6`).
pub const TRIES: u32 = 4;
/// Root blocks: one per (set, trie).
pub const ROOT_BLOCKS: u32 = RULE_SETS * TRIES;
/// Non-root blocks each rule set may use (1 KiB each).
pub const POOL_BLOCKS_PER_SET: u32 = 2048;
/// Entries of the block map.
pub const ADDR_BLOCKS: u32 = ROOT_BLOCKS + RULE_SETS * POOL_BLOCKS_PER_SET;
/// Bitmap ids per rule set: every LPM entry of the four tries (at most
/// `MAX_RULES + 1` each) can have its own.
pub const BITMAPS_PER_SET: u32 = 4 * (crate::classifier::MAX_RULES as u32 + 1) + 4;
/// Entries of the bitmap map.
pub const ADDR_BITMAPS: u32 = RULE_SETS * BITMAPS_PER_SET;

/// One stride of the table.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AddrBlock {
    pub entries: [u32; BLOCK_ENTRIES],
}

impl Default for AddrBlock {
    fn default() -> Self {
        Self {
            entries: [0; BLOCK_ENTRIES],
        }
    }
}

/// Index of the root block of trie `trie` in set `set`.
#[inline(always)]
pub const fn root_block(set: u32, trie: u32) -> u32 {
    set * TRIES + trie
}

/// Index of pool block `n` (`< POOL_BLOCKS_PER_SET`) of set `set`.
#[inline(always)]
pub const fn pool_block(set: u32, n: u32) -> u32 {
    ROOT_BLOCKS + set * POOL_BLOCKS_PER_SET + n
}

/// Index in the bitmap map of bitmap `id` (`< BITMAPS_PER_SET`) of set `set`.
#[inline(always)]
pub const fn bitmap_index(set: u32, id: u32) -> u32 {
    set * BITMAPS_PER_SET + id
}

crate::assert_no_padding!(AddrBlock, [u32; BLOCK_ENTRIES]);
crate::impl_pod!(AddrBlock);
