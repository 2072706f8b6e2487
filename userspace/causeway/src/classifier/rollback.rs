//! Undoing a rule change: a [`RulesSnapshot`] holds the config and the
//! inactive rule set as the maps hold them (read back, not recomputed), and
//! [`ClassifierMaps::restore`] puts both back. Used by the data path's
//! apply transaction (`datapath/apply.rs`) when a later step fails.
//!
//! When the staged set was already made live, restoring flips back first,
//! waits out [`MIN_FLIP_INTERVAL`] (frames that read the new `active_set`
//! are done), empties the address-cache slots computed under the retired
//! generation (the next apply reuses that generation number), and only then
//! rewrites the retired set.

use aya::maps::{lpm_trie::Key, Array, LpmTrie, MapData, PerCpuValues};
use bpf_maps::classifier::{
    AddrCacheEntry, ClassifierConfig, FragmentKey, ADDR_BITMAPS_PER_SET, ADDR_CACHE_SLOTS,
    ADDR_POOL_NODES, ADMISSION_PORT_WORDS, LPM_SET_BITS, MAP_ADDR_BITMAPS, MAP_ADDR_CACHE,
    MAP_ADDR_NODES, MAP_ADMISSION_FRAGMENTS, MAP_ADMISSION_PORTS, MAP_ADMISSION_V4,
    MAP_ADMISSION_V6, MAP_CLASSIFIER_CONFIG, MAP_DST_PORT, MAP_DST_V4, MAP_DST_V6, MAP_PROTO_DSCP,
    MAP_RULE_ACTIONS, MAP_SRC_PORT, MAP_SRC_V4, MAP_SRC_V6, MAP_TRIE_DEFAULTS, MAX_RULES,
    PORT_SLOTS, PROTO_DSCP_SLOTS, RULE_SETS,
};

use super::{
    addr_table::AddrTables,
    compile::{CompiledRuleSet, LpmEntries},
    map_writes::LpmData,
    maps::{
        map_err, ApplyStats, ClassifierMaps, ClassifierMapsError, KnownSlots, Result,
        MIN_FLIP_INTERVAL,
    },
};

/// The classifier state a failed change returns to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulesSnapshot {
    pub config: ClassifierConfig,
    /// The set that is inactive under `config`, as the maps held it.
    pub inactive: CompiledRuleSet,
}

impl ClassifierMaps {
    /// Reads the config and the inactive rule set back from the maps.
    pub fn snapshot(&mut self) -> Result<RulesSnapshot> {
        let config = self.config()?;
        if config.active_set >= RULE_SETS {
            return Err(ClassifierMapsError::BadActiveSet(config.active_set));
        }
        let inactive = self.read_set(1 - config.active_set)?;
        Ok(RulesSnapshot { config, inactive })
    }

    /// Reads rule set `set` back from the maps, and remembers its slots
    /// (so that the next write of that set reads nothing again).
    pub fn read_set(&mut self, set: u32) -> Result<CompiledRuleSet> {
        let slots = |n: u32| set * n..(set + 1) * n;
        let read = KnownSlots {
            proto_dscp: read_array(&self.proto_dscp, MAP_PROTO_DSCP, slots(PROTO_DSCP_SLOTS))?,
            src_ports: read_array(&self.src_ports, MAP_SRC_PORT, slots(PORT_SLOTS))?,
            dst_ports: read_array(&self.dst_ports, MAP_DST_PORT, slots(PORT_SLOTS))?,
            actions: read_array(&self.actions, MAP_RULE_ACTIONS, slots(MAX_RULES as u32))?,
            trie_defaults: read_array(&self.trie_defaults, MAP_TRIE_DEFAULTS, slots(1))?,
            admission_ports: read_array(
                &self.admission_ports,
                MAP_ADMISSION_PORTS,
                slots(ADMISSION_PORT_WORDS),
            )?,
            addr_nodes: read_array(&self.addr_nodes, MAP_ADDR_NODES, slots(ADDR_POOL_NODES))?,
            addr_bitmaps: read_array(
                &self.addr_bitmaps,
                MAP_ADDR_BITMAPS,
                slots(ADDR_BITMAPS_PER_SET),
            )?,
        };
        let src_v4 = read_lpm(&self.src_v4, MAP_SRC_V4, set)?;
        let dst_v4 = read_lpm(&self.dst_v4, MAP_DST_V4, set)?;
        let src_v6 = read_lpm(&self.src_v6, MAP_SRC_V6, set)?;
        let dst_v6 = read_lpm(&self.dst_v6, MAP_DST_V6, set)?;
        let trie_defaults = read.trie_defaults[0];
        let addr_tables = AddrTables {
            nodes: read.addr_nodes.clone(),
            bitmaps: read.addr_bitmaps.clone(),
            tables: trie_defaults.tables,
            roots: trie_defaults.roots,
        };
        let compiled = CompiledRuleSet {
            set,
            rule_count: 0,
            src_v4,
            dst_v4,
            src_v6,
            dst_v6,
            proto_dscp: read.proto_dscp.clone(),
            src_ports: read.src_ports.clone(),
            dst_ports: read.dst_ports.clone(),
            actions: read.actions.clone(),
            trie_defaults,
            addr_tables,
            admission_v4: read_lpm(&self.admission_v4, MAP_ADMISSION_V4, set)?,
            admission_v6: read_lpm(&self.admission_v6, MAP_ADMISSION_V6, set)?,
            admission_ports: read.admission_ports.clone(),
        };
        if self.generation_seen.is_none() {
            self.generation_seen = Some(self.config()?.generation);
        }
        self.known[set as usize] = Some(read);
        Ok(compiled)
    }

    /// Puts the maps back to `snapshot`: the config (flipping back if the
    /// staged set went live) and the contents of the inactive set.
    pub fn restore(&mut self, snapshot: &RulesSnapshot) -> Result<()> {
        let live = self.config()?;
        if live != snapshot.config {
            self.config
                .set(0, snapshot.config, 0)
                .map_err(map_err(MAP_CLASSIFIER_CONFIG))?;
            if live.active_set != snapshot.config.active_set {
                std::thread::sleep(MIN_FLIP_INTERVAL);
                self.forget_cached_after(snapshot.config.generation)?;
                self.forget_fragments_after(snapshot.config.generation)?;
            }
        }
        self.generation_seen = Some(snapshot.config.generation);
        let mut stats = ApplyStats::default();
        self.write_set(&snapshot.inactive, &mut stats)
    }

    /// Fault injection: a write the kernel rejects (an LPM key longer than
    /// the trie's keys), made on the IPv4 source trie.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn write_rejected_entry(&mut self) -> Result<()> {
        let key = Key::new(
            u32::from(u8::MAX),
            bpf_maps::classifier::Ipv4LpmData {
                set: 0,
                addr: [0; 4],
            },
        );
        self.src_v4
            .insert(&key, bpf_maps::classifier::RuleBitmap::default(), 0)
            .map_err(map_err(MAP_SRC_V4))
    }

    /// Forgets every first fragment remembered under a generation after
    /// `generation` (the next apply reuses those numbers).
    fn forget_fragments_after(&mut self, generation: u64) -> Result<()> {
        let map = &mut self.admission_fragments;
        let stale: Vec<FragmentKey> = map
            .iter()
            .filter_map(|entry| entry.ok())
            .filter(|(_, g)| *g > generation)
            .map(|(k, _)| k)
            .collect();
        for key in stale {
            match map.remove(&key) {
                Ok(()) | Err(aya::maps::MapError::KeyNotFound) => {}
                Err(e) => return Err(map_err(MAP_ADMISSION_FRAGMENTS)(e)),
            }
        }
        Ok(())
    }

    /// Empties every address-cache slot computed under a generation after
    /// `generation` (on every CPU).
    fn forget_cached_after(&mut self, generation: u64) -> Result<()> {
        let cache = &mut self.cache;
        for slot in 0..ADDR_CACHE_SLOTS {
            let values = cache.get(&slot, 0).map_err(map_err(MAP_ADDR_CACHE))?;
            if values.iter().all(|e| e.generation <= generation) {
                continue;
            }
            let kept: Vec<AddrCacheEntry> = values
                .iter()
                .map(|e| {
                    if e.generation > generation {
                        AddrCacheEntry::default()
                    } else {
                        *e
                    }
                })
                .collect();
            let kept =
                PerCpuValues::try_from(kept).map_err(|source| ClassifierMapsError::PerCpu {
                    name: MAP_ADDR_CACHE,
                    source,
                })?;
            cache.set(slot, kept, 0).map_err(map_err(MAP_ADDR_CACHE))?;
        }
        Ok(())
    }
}

fn read_array<V: aya::Pod>(
    map: &Array<MapData, V>,
    name: &'static str,
    slots: std::ops::Range<u32>,
) -> Result<Vec<V>> {
    slots
        .map(|i| map.get(&i, 0).map_err(map_err(name)))
        .collect()
}

fn read_lpm<K: LpmData<N>, V: aya::Pod, const N: usize>(
    trie: &LpmTrie<MapData, K, V>,
    name: &'static str,
    set: u32,
) -> Result<LpmEntries<N, V>> {
    let mut out = LpmEntries::new();
    for key in trie.keys() {
        let key: Key<K> = key.map_err(map_err(name))?;
        if key.data().set() != set {
            continue;
        }
        let bitmap = trie.get(&key, 0).map_err(map_err(name))?;
        let len = key.prefix_len().saturating_sub(LPM_SET_BITS) as u8;
        out.insert((key.data().addr(), len), bitmap);
    }
    Ok(out)
}
