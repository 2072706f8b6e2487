//! Writes a rule set's address table ([`bpf_maps::addr_table`]) into the
//! kernel's `BPF_F_MMAPABLE` block and bitmap arrays through shared memory
//! mappings: a whole set is a few hundred KiB of stores instead of tens of
//! thousands of map-update syscalls. Only the inactive set is ever written
//! (the caller waits out the grace period first, like for every other map of
//! the set), so the kernel never reads a half-written block.

use std::os::fd::{AsFd, AsRawFd};

use aya::maps::{Map, MapData};
use bpf_maps::{
    addr_table::{
        bitmap_index, pool_block, root_block, AddrBlock, ADDR_BITMAPS, ADDR_BLOCKS,
        BITMAPS_PER_SET, BLOCK_ENTRIES, POOL_BLOCKS_PER_SET,
    },
    classifier::{RuleBitmap, BITMAP_WORDS},
};
use causeway_core::classifier::addr_table::AddrTable;
use memmap2::{MmapMut, MmapOptions};

use super::maps::{ClassifierMapsError, Result};

/// One mmapped array map of `entries` values of `elem` bytes.
struct Mapped {
    name: &'static str,
    // Kept open for as long as the mapping is used.
    _map: MapData,
    mem: MmapMut,
    elem: usize,
}

impl Mapped {
    fn open(name: &'static str, map: Map, entries: u32, elem: usize) -> Result<Self> {
        let Map::Array(map) = map else {
            return Err(ClassifierMapsError::Table {
                name,
                why: "is not an array map".into(),
            });
        };
        let info = map
            .info()
            .map_err(|source| ClassifierMapsError::Map { name, source })?;
        if info.max_entries() != entries || info.value_size() as usize != elem {
            return Err(ClassifierMapsError::Table {
                name,
                why: format!(
                    "holds {} values of {} bytes, this build expects {entries} of {elem}",
                    info.max_entries(),
                    info.value_size()
                ),
            });
        }
        let len = entries as usize * elem;
        let fd = map.fd().as_fd().as_raw_fd();
        // SAFETY: `fd` is an open BPF array map created with BPF_F_MMAPABLE
        // (the eBPF object declares it so; the kernel refuses the mmap
        // otherwise) whose value area is `len` bytes (`elem` is a multiple
        // of 8, so the kernel's element stride equals it). Nothing else in
        // this process maps it; the kernel's own concurrent reads are of the
        // inactive rule set only, which is why torn values are never seen.
        let mem = unsafe { MmapOptions::new().len(len).map_mut(fd) }
            .map_err(|source| ClassifierMapsError::Mmap { name, source })?;
        Ok(Self {
            name,
            _map: map,
            mem,
            elem,
        })
    }

    /// The bytes of value `index`.
    fn value(&mut self, index: u32) -> Result<&mut [u8]> {
        let start = index as usize * self.elem;
        let name = self.name;
        self.mem
            .get_mut(start..start + self.elem)
            .ok_or_else(|| ClassifierMapsError::Table {
                name,
                why: format!("value {index} is past the map's end"),
            })
    }
}

/// The two mapped arrays of the address table.
pub(super) struct AddrTableMaps {
    blocks: Mapped,
    bitmaps: Mapped,
}

impl AddrTableMaps {
    pub(super) fn open(blocks: (&'static str, Map), bitmaps: (&'static str, Map)) -> Result<Self> {
        Ok(Self {
            blocks: Mapped::open(blocks.0, blocks.1, ADDR_BLOCKS, size_of::<AddrBlock>())?,
            bitmaps: Mapped::open(bitmaps.0, bitmaps.1, ADDR_BITMAPS, size_of::<RuleBitmap>())?,
        })
    }

    /// Writes `table`'s roots, pool blocks and bitmaps into its set's
    /// slots and zeroes the set's unused ones; returns the bytes stored.
    pub(super) fn write(&mut self, table: &AddrTable) -> Result<usize> {
        let mut bytes = 0;
        for (trie, root) in table.roots.iter().enumerate() {
            bytes += write_block(self.blocks.value(root_block(table.set, trie as u32))?, root);
        }
        for (n, block) in table.pool.iter().enumerate() {
            bytes += write_block(self.blocks.value(pool_block(table.set, n as u32))?, block);
        }
        for (id, bitmap) in table.bitmaps.iter().enumerate() {
            let out = self.bitmaps.value(bitmap_index(table.set, id as u32))?;
            for (chunk, word) in out.chunks_exact_mut(8).zip(bitmap.words) {
                chunk.copy_from_slice(&word.to_ne_bytes());
            }
            bytes += BITMAP_WORDS * 8;
        }
        // The rest of the set's slots are zeroed, so that what the maps hold
        // is a function of the table alone: a rollback that rebuilds the
        // table from the tries it read back restores every byte.
        for n in table.pool.len() as u32..POOL_BLOCKS_PER_SET {
            bytes += zero(self.blocks.value(pool_block(table.set, n))?);
        }
        for id in table.bitmaps.len() as u32..BITMAPS_PER_SET {
            bytes += zero(self.bitmaps.value(bitmap_index(table.set, id))?);
        }
        Ok(bytes)
    }
}

/// Zeroes `out`; returns the bytes stored (none when it was zero already,
/// so that unused pages stay untouched).
fn zero(out: &mut [u8]) -> usize {
    if out.iter().all(|&b| b == 0) {
        return 0;
    }
    out.fill(0);
    out.len()
}

fn write_block(out: &mut [u8], block: &AddrBlock) -> usize {
    for (chunk, entry) in out.chunks_exact_mut(4).zip(block.entries) {
        chunk.copy_from_slice(&entry.to_ne_bytes());
    }
    BLOCK_ENTRIES * 4
}
