//! Builds the address table (`bpf_maps::addr_table`) of one rule set from its
//! four LPM tries' entries. Pure: `maps.rs` in the `causeway` crate writes
//! what this produces. [`AddrTable::lookup`] walks the result the way the
//! kernel does, so tests check it against a longest-prefix match.
//!
//! Each trie is built on its own: prefixes are painted in ascending length
//! order, so a longer prefix overwrites the entries of the shorter ones it
//! lies in, and a block created for a longer prefix starts as a copy of the
//! entry it replaces. A trie whose blocks do not fit what is left of the
//! set's pool stays untabled and is walked as an LPM trie by the kernel.

use std::collections::HashMap;

use bpf_maps::{
    addr_table::{
        pool_block, AddrBlock, ADDR_CHILD, BITMAPS_PER_SET, BLOCK_ENTRIES, POOL_BLOCKS_PER_SET,
    },
    classifier::{RuleBitmap, TRIE_DST_V4, TRIE_DST_V6, TRIE_SRC_V4, TRIE_SRC_V6},
};

use super::compile::LpmEntries;

/// The table of one rule set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrTable {
    pub set: u32,
    /// Bit `TRIE_*` set: that trie is in the table.
    pub tabled: u32,
    /// Root block of each trie (`TRIE_*` order); all zero when untabled.
    pub roots: [AddrBlock; 4],
    /// The set's pool blocks, from pool block 0.
    pub pool: Vec<AddrBlock>,
    /// Bitmaps by id, from id 0.
    pub bitmaps: Vec<RuleBitmap>,
}

/// One trie under construction: local blocks (0 is the root) whose child
/// entries hold local indices.
struct Builder {
    blocks: Vec<[u32; BLOCK_ENTRIES]>,
}

impl Builder {
    fn new() -> Self {
        Self {
            blocks: vec![[0; BLOCK_ENTRIES]],
        }
    }

    /// Paints `id` over every address in `addr/len`.
    fn paint(&mut self, addr: &[u8], len: u8, id: u32) {
        let len = usize::from(len);
        let mut block = 0usize;
        let mut level = 0usize;
        while len > 8 * (level + 1) {
            let byte = usize::from(addr[level]);
            let entry = self.blocks[block][byte];
            block = if entry & ADDR_CHILD != 0 {
                (entry & !ADDR_CHILD) as usize
            } else {
                self.blocks.push([entry; BLOCK_ENTRIES]);
                let child = self.blocks.len() - 1;
                self.blocks[block][byte] = ADDR_CHILD | child as u32;
                child
            };
            level += 1;
        }
        let bits = len - 8 * level; // 0..=8 bits of this byte are fixed
        let span = 1usize << (8 - bits);
        let start = usize::from(addr.get(level).copied().unwrap_or(0)) & !(span - 1);
        for byte in start..start + span {
            self.fill(block, byte, id);
        }
    }

    /// Sets entry `byte` of `block` to `id`, through any child blocks below
    /// it (none exist when prefixes come in ascending length; kept correct
    /// for any order).
    fn fill(&mut self, block: usize, byte: usize, id: u32) {
        let entry = self.blocks[block][byte];
        if entry & ADDR_CHILD == 0 {
            self.blocks[block][byte] = id;
            return;
        }
        let child = (entry & !ADDR_CHILD) as usize;
        for b in 0..BLOCK_ENTRIES {
            self.fill(child, b, id);
        }
    }
}

/// Bitmap ids of one set, shared by its four tries.
struct Bitmaps {
    ids: HashMap<RuleBitmap, u32>,
    list: Vec<RuleBitmap>,
}

impl Bitmaps {
    fn id(&mut self, bitmap: &RuleBitmap) -> u32 {
        if let Some(&id) = self.ids.get(bitmap) {
            return id;
        }
        let id = self.list.len() as u32;
        self.list.push(*bitmap);
        self.ids.insert(*bitmap, id);
        id
    }
}

/// Builds the table of set `set` from its tries' LPM entries.
pub fn build(
    set: u32,
    src_v4: &LpmEntries<4>,
    dst_v4: &LpmEntries<4>,
    src_v6: &LpmEntries<16>,
    dst_v6: &LpmEntries<16>,
) -> AddrTable {
    let mut table = AddrTable {
        set,
        tabled: 0,
        roots: [AddrBlock::default(); 4],
        pool: Vec::new(),
        bitmaps: Vec::new(),
    };
    let mut bitmaps = Bitmaps {
        ids: HashMap::new(),
        list: Vec::new(),
    };
    add_trie(&mut table, &mut bitmaps, TRIE_SRC_V4, src_v4);
    add_trie(&mut table, &mut bitmaps, TRIE_DST_V4, dst_v4);
    add_trie(&mut table, &mut bitmaps, TRIE_SRC_V6, src_v6);
    add_trie(&mut table, &mut bitmaps, TRIE_DST_V6, dst_v6);
    table.bitmaps = bitmaps.list;
    table
}

fn add_trie<const N: usize>(
    table: &mut AddrTable,
    bitmaps: &mut Bitmaps,
    trie: usize,
    entries: &LpmEntries<N>,
) {
    let mut sorted: Vec<_> = entries.iter().collect();
    sorted.sort_by_key(|((_, len), _)| *len);
    let mut ids = Vec::with_capacity(sorted.len());
    for (_, bitmap) in &sorted {
        ids.push(bitmaps.id(bitmap));
    }
    // Ids are shared by the set; a trie that would overflow them, like one
    // that would overflow the pool, is left to its LPM trie.
    if bitmaps.list.len() > BITMAPS_PER_SET as usize {
        return;
    }
    let mut builder = Builder::new();
    for (((addr, len), _), id) in sorted.iter().zip(ids) {
        builder.paint(addr, *len, id);
    }
    let (set, offset) = (table.set, table.pool.len() as u32);
    let extra = builder.blocks.len() as u32 - 1;
    if offset + extra > POOL_BLOCKS_PER_SET {
        return;
    }
    let relocate = |entry: u32| {
        if entry & ADDR_CHILD == 0 {
            entry
        } else {
            let local = entry & !ADDR_CHILD;
            ADDR_CHILD | pool_block(set, offset + local - 1)
        }
    };
    let mut blocks = builder.blocks.into_iter().map(|b| AddrBlock {
        entries: b.map(relocate),
    });
    if let Some(root) = blocks.next() {
        table.roots[trie] = root;
    }
    table.pool.extend(blocks);
    table.tabled |= 1 << trie;
}

impl AddrTable {
    /// The bitmap the kernel finds for `addr` (network order, 4 or 16
    /// bytes) in trie `trie`, or `None` when that trie is not tabled (or
    /// the table is malformed).
    pub fn lookup(&self, trie: usize, addr: &[u8]) -> Option<RuleBitmap> {
        if self.tabled & (1 << trie) == 0 {
            return None;
        }
        let mut block = self.roots.get(trie)?;
        for byte in addr {
            let entry = block.entries[usize::from(*byte)];
            if entry & ADDR_CHILD == 0 {
                return self.bitmaps.get(entry as usize).copied();
            }
            let index = (entry & !ADDR_CHILD).checked_sub(pool_block(self.set, 0))?;
            block = self.pool.get(index as usize)?;
        }
        None
    }
}

#[cfg(test)]
#[path = "addr_table_tests.rs"]
mod tests;
