//! Compiles a rule set's LPM entries into the stride-8 address tables the
//! kernel walks instead of its LPM tries (layout: `bpf_maps::classifier`,
//! [`AddrNode`]). Pure: `causeway::classifier::maps` writes the result.
//!
//! Controlled prefix expansion: a prefix of length `L > 0` lives in the node
//! at depth `⌈L/8⌉ - 1` on its path (the root is depth 0, indexed by the
//! first address byte) and fills the `2^(8⌈L/8⌉ - L)` slots it covers there;
//! a longer prefix overwrites a shorter one's slots (prefixes are inserted
//! shortest first); `/0` fills the whole root. A slot that leads to deeper
//! prefixes becomes a child pointer, and its own prefix's bitmap is pushed
//! down into the child's slots that no longer prefix fills. Then every slot
//! is either a child or a leaf naming the bitmap of the longest prefix
//! covering it, and a walk ends at the first leaf.
//!
//! The four tries of a rule set share one pool of `ADDR_POOL_NODES` nodes
//! and one deduplicated bitmap array. The IPv4 tries always fit; an IPv6
//! trie gets a table only when all of its nodes fit in what is left, and
//! otherwise keeps its kernel LPM trie (same answers, slower). A trie with
//! no `/0` entry (a set never written) gets no table either.

use std::collections::HashMap;

use bpf_maps::classifier::{
    AddrNode, RuleBitmap, ADDR_BITMAPS_PER_SET, ADDR_NODE_SLOTS, ADDR_POOL_NODES, ADDR_SLOT_LEAF,
    TRIE_DST_V4, TRIE_DST_V6, TRIE_SRC_V4, TRIE_SRC_V6,
};

use super::compile::LpmEntries;

/// The address tables of one rule set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddrTables {
    /// The set's pool, nodes `0..nodes.len()` (the rest are never reached).
    pub nodes: Vec<AddrNode>,
    /// The set's bitmaps, `0..bitmaps.len()`.
    pub bitmaps: Vec<RuleBitmap>,
    /// Bit `TRIE_*`: that trie has a table (`TrieDefaults::tables`).
    pub tables: u32,
    /// Root node of each trie that has a table (`TrieDefaults::roots`).
    pub roots: [u32; 4],
}

impl AddrTables {
    /// Builds the tables of one rule set from its four tries' entries.
    pub fn build(
        src_v4: &LpmEntries<4>,
        dst_v4: &LpmEntries<4>,
        src_v6: &LpmEntries<16>,
        dst_v6: &LpmEntries<16>,
    ) -> Self {
        let mut out = Self::default();
        let mut dedup = HashMap::new();
        out.add(TRIE_SRC_V4, src_v4, &mut dedup);
        out.add(TRIE_DST_V4, dst_v4, &mut dedup);
        out.add(TRIE_SRC_V6, src_v6, &mut dedup);
        out.add(TRIE_DST_V6, dst_v6, &mut dedup);
        out
    }

    /// Appends trie `index`'s table to the pool when it has a `/0` and fits.
    fn add<const N: usize>(
        &mut self,
        index: usize,
        entries: &LpmEntries<N>,
        dedup: &mut HashMap<RuleBitmap, u32>,
    ) {
        if !entries.contains_key(&([0; N], 0)) {
            return;
        }
        let Some(nodes) = expand(entries) else {
            return;
        };
        let base = self.nodes.len();
        if base + nodes.len() > ADDR_POOL_NODES as usize {
            return;
        }
        let mut new_bitmaps = Vec::new();
        let mut bitmap_index = |b: RuleBitmap| -> u32 {
            let next = (self.bitmaps.len() + new_bitmaps.len()) as u32;
            *dedup.entry(b).or_insert_with(|| {
                new_bitmaps.push(b);
                next
            })
        };
        let mut encoded = Vec::with_capacity(nodes.len());
        for node in &nodes {
            let mut out = AddrNode::default();
            for (slot, s) in out.slots.iter_mut().zip(node) {
                *slot = match s {
                    Slot::Child(c) => (base as u32) + c,
                    Slot::Prefix(_, bitmap) => ADDR_SLOT_LEAF | bitmap_index(*bitmap),
                    Slot::Empty => unreachable!("every slot is filled after the push-down"),
                };
            }
            encoded.push(out);
        }
        // At most one bitmap per prefix and per trie: always fits.
        debug_assert!(self.bitmaps.len() + new_bitmaps.len() <= ADDR_BITMAPS_PER_SET as usize);
        self.bitmaps.extend(new_bitmaps);
        self.nodes.extend(encoded);
        self.tables |= 1 << index;
        self.roots[index] = base as u32;
    }

    /// The bitmap the kernel finds for `addr` in trie `index` (a model of
    /// the walk in `ebpf/src/addresses.rs`); `None` when the trie has no
    /// table.
    pub fn lookup(&self, index: usize, addr: &[u8]) -> Option<RuleBitmap> {
        if self.tables & (1 << index) == 0 {
            return None;
        }
        let mut node = self.roots[index];
        for byte in addr {
            let slot = self.nodes.get(node as usize)?.slots[usize::from(*byte)];
            if slot & ADDR_SLOT_LEAF != 0 {
                return self.bitmaps.get((slot & !ADDR_SLOT_LEAF) as usize).copied();
            }
            node = slot;
        }
        None
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Empty,
    /// A prefix's length and bitmap.
    Prefix(u8, RuleBitmap),
    /// A node index, relative to the trie's own nodes.
    Child(u32),
}

/// One trie's nodes (root first, every child after its parent), before
/// encoding; `None` when the trie needs more nodes than a pool holds.
fn expand<const N: usize>(entries: &LpmEntries<N>) -> Option<Vec<[Slot; ADDR_NODE_SLOTS]>> {
    let mut by_len: Vec<_> = entries.iter().collect();
    by_len.sort_by_key(|((_, len), _)| *len);
    let mut nodes = vec![[Slot::Empty; ADDR_NODE_SLOTS]];
    // Child of (node, slot), kept apart from the slot's own prefix until the
    // push-down.
    let mut children: HashMap<(usize, usize), usize> = HashMap::new();
    let mut slot_prefix: Vec<[Slot; ADDR_NODE_SLOTS]> = vec![[Slot::Empty; ADDR_NODE_SLOTS]];
    for ((addr, len), bitmap) in by_len {
        let len = usize::from(*len).min(N * 8);
        let depth = len.saturating_sub(1) / 8;
        let mut node = 0;
        for &byte in addr.iter().take(depth) {
            let key = (node, usize::from(byte));
            node = match children.get(&key) {
                Some(c) => *c,
                None => {
                    if nodes.len() >= ADDR_POOL_NODES as usize {
                        return None;
                    }
                    nodes.push([Slot::Empty; ADDR_NODE_SLOTS]);
                    slot_prefix.push([Slot::Empty; ADDR_NODE_SLOTS]);
                    children.insert(key, nodes.len() - 1);
                    nodes.len() - 1
                }
            };
        }
        // Bits of this prefix inside the byte at `depth`.
        let fixed = len - depth * 8;
        let span = 1usize << (8 - fixed);
        let first = if fixed == 0 {
            0
        } else {
            usize::from(addr[depth]) & !(span - 1)
        };
        for slot in &mut slot_prefix[node][first..first + span] {
            *slot = Slot::Prefix(len as u8, *bitmap);
        }
    }
    // Push each slot's prefix down into its child's unfilled slots; parents
    // come before their children, so a pushed prefix travels all the way.
    for n in 0..nodes.len() {
        for s in 0..ADDR_NODE_SLOTS {
            match children.get(&(n, s)) {
                Some(&child) => {
                    let inherited = slot_prefix[n][s];
                    for slot in slot_prefix[child].iter_mut() {
                        if *slot == Slot::Empty {
                            *slot = inherited;
                        }
                    }
                    nodes[n][s] = Slot::Child(child as u32);
                }
                None => nodes[n][s] = slot_prefix[n][s],
            }
        }
    }
    if nodes.iter().flatten().any(|s| *s == Slot::Empty) {
        // Only without a `/0`, which `AddrTables::add` rules out.
        return None;
    }
    Some(nodes)
}

#[cfg(test)]
#[path = "addr_table_tests.rs"]
mod tests;
