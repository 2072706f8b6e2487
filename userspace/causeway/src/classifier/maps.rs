//! [`ClassifierMaps`]: the handle through which a rule set reaches the
//! kernel's classifier maps.
//!
//! # Atomic replacement and why it is race-free
//! Every map holds two rule sets. [`ClassifierMaps::apply`] compiles the new
//! rules for the set that is *not* active, writes that set completely, and
//! only then flips `active_set` in `CW_CLS_CONFIG` with one map update. A
//! frame reads `active_set` once, at the start of its classification, so it
//! sees the old set or the new one, never a mix:
//! * the flip itself cannot tear: the old and new config values differ in
//!   `active_set`'s low byte (0 ↔ 1) and in fields the kernel never reads;
//! * a program that read the old `active_set` just before the flip keeps
//!   using the old set until it returns. XDP/TC programs run to completion
//!   with bottom halves disabled, within microseconds (the verifier bounds
//!   them). The old set is rewritten only by the *next* apply, which first
//!   waits until [`MIN_FLIP_INTERVAL`] (50 ms, four orders of magnitude more
//!   than any program run) has passed since the last flip. The flip time is
//!   stored in the config (`flipped_at_ns`, `CLOCK_BOOTTIME`) so that the
//!   wait also holds between different processes.
//! * the kernel's per-CPU classification cache (a result per flow) tags
//!   every slot with the rule set and the generation it was computed under;
//!   the flip bumps the generation, so no slot computed from a set's old
//!   contents is used after it is rewritten.
//!
//! # Few syscalls
//! The handle remembers what each set's array slots hold (after writing or
//! reading them back once), and writes only slots that differ. LPM entries of
//! the inactive set are read back every time (at most a few hundred) and
//! stale ones are removed. If another process applied in between (the config
//! generation is not the one this handle wrote), what it remembered is
//! dropped and read back again.

use std::{path::Path, time::Duration};

use aya::{
    maps::{Array, HashMap, LpmTrie, Map, MapData, MapError, PerCpuArray},
    Ebpf,
};
use bpf_maps::classifier::{
    AddrCacheEntry, AddrNode, ClassifierConfig, FragmentKey, Ipv4LpmData, Ipv6LpmData, RuleAction,
    RuleBitmap, TrieDefaults, ADDR_BITMAPS_PER_SET, ADDR_POOL_NODES, ADMISSION_PORT_WORDS,
    CLS_FLAG_NO_ADDR_CACHE, MAP_ADDR_BITMAPS, MAP_ADDR_CACHE, MAP_ADDR_NODES,
    MAP_ADMISSION_FRAGMENTS, MAP_ADMISSION_PORTS, MAP_ADMISSION_V4, MAP_ADMISSION_V6,
    MAP_CLASSIFIER_CONFIG, MAP_DST_PORT, MAP_DST_V4, MAP_DST_V6, MAP_PROTO_DSCP, MAP_RULE_ACTIONS,
    MAP_SRC_PORT, MAP_SRC_V4, MAP_SRC_V6, MAP_TRIE_DEFAULTS, MAX_RULES, PORT_SLOTS,
    PROTO_DSCP_SLOTS, RULE_SETS,
};

use crate::map_handles::{self, OpenMapError};

use super::{
    compile::{compile, CompiledRuleSet},
    map_writes::{boottime_ns, wait_out_grace_period, write_array, write_lpm, LpmData},
    rule::RuleSet,
};

/// Minimum time between a flip and the next rewrite of the set it retired.
pub const MIN_FLIP_INTERVAL: Duration = Duration::from_millis(50);

/// Why the classifier maps could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum ClassifierMapsError {
    #[error("map {name} is not in the eBPF object")]
    MissingMap { name: &'static str },
    #[error("map {name}: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: MapError,
    },
    #[error("opening pinned map {path}: {source}")]
    Pin {
        path: std::path::PathBuf,
        #[source]
        source: MapError,
    },
    #[error("{MAP_CLASSIFIER_CONFIG} holds active_set {0}, expected 0 or 1")]
    BadActiveSet(u32),
    #[error("map {name}: per-CPU values: {source}")]
    PerCpu {
        name: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("reading CLOCK_BOOTTIME: {0}")]
    Clock(#[source] nix::Error),
}

pub(super) type Result<T> = std::result::Result<T, ClassifierMapsError>;

/// Map updates and removals made by the last [`ClassifierMaps::apply`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplyStats {
    pub array_writes: usize,
    pub array_reads: usize,
    pub lpm_writes: usize,
    pub lpm_removals: usize,
}

/// Rules written to the inactive set by [`ClassifierMaps::stage`], not yet
/// live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagedRules {
    /// The config before: what a rollback restores.
    pub previous: ClassifierConfig,
    /// The config [`ClassifierMaps::commit`] writes (its flip time is
    /// taken then).
    pub next: ClassifierConfig,
}

/// Array slots of one rule set as this handle last wrote or read them.
#[derive(Clone)]
pub(super) struct KnownSlots {
    pub(super) proto_dscp: Vec<RuleBitmap>,
    pub(super) src_ports: Vec<RuleBitmap>,
    pub(super) dst_ports: Vec<RuleBitmap>,
    pub(super) actions: Vec<RuleAction>,
    pub(super) trie_defaults: Vec<TrieDefaults>,
    pub(super) admission_ports: Vec<u32>,
    /// The set's address-table pool and bitmaps (slots past a vector's end
    /// are unknown: read back before they are written).
    pub(super) addr_nodes: Vec<AddrNode>,
    pub(super) addr_bitmaps: Vec<RuleBitmap>,
}

/// Open handles on every classifier map, plus what this handle knows of
/// their contents.
pub struct ClassifierMaps {
    pub(super) config: Array<MapData, ClassifierConfig>,
    pub(super) src_v4: LpmTrie<MapData, Ipv4LpmData, RuleBitmap>,
    pub(super) dst_v4: LpmTrie<MapData, Ipv4LpmData, RuleBitmap>,
    pub(super) src_v6: LpmTrie<MapData, Ipv6LpmData, RuleBitmap>,
    pub(super) dst_v6: LpmTrie<MapData, Ipv6LpmData, RuleBitmap>,
    pub(super) proto_dscp: Array<MapData, RuleBitmap>,
    pub(super) src_ports: Array<MapData, RuleBitmap>,
    pub(super) dst_ports: Array<MapData, RuleBitmap>,
    pub(super) actions: Array<MapData, RuleAction>,
    pub(super) trie_defaults: Array<MapData, TrieDefaults>,
    pub(super) addr_nodes: Array<MapData, AddrNode>,
    pub(super) addr_bitmaps: Array<MapData, RuleBitmap>,
    pub(super) admission_v4: LpmTrie<MapData, Ipv4LpmData, u32>,
    pub(super) admission_v6: LpmTrie<MapData, Ipv6LpmData, u32>,
    pub(super) admission_ports: Array<MapData, u32>,
    /// Remembered first fragments, emptied of a retired generation by a
    /// rollback.
    pub(super) admission_fragments: HashMap<MapData, FragmentKey, u64>,
    /// The kernel's classification cache, emptied of a retired generation by a
    /// rollback ([`super::rollback`]).
    pub(super) cache: PerCpuArray<MapData, AddrCacheEntry>,
    pub(super) known: [Option<KnownSlots>; RULE_SETS as usize],
    pub(super) generation_seen: Option<u64>,
    pub(super) last_stats: ApplyStats,
}

pub(super) fn map_err(name: &'static str) -> impl FnOnce(MapError) -> ClassifierMapsError {
    move |source| ClassifierMapsError::Map { name, source }
}

impl From<OpenMapError> for ClassifierMapsError {
    fn from(e: OpenMapError) -> Self {
        match e {
            OpenMapError::Missing { name } => Self::MissingMap { name },
            OpenMapError::Pin { path, source, .. } => Self::Pin { path, source },
            OpenMapError::Map { name, source } => Self::Map { name, source },
        }
    }
}

/// Opens the map `name` through `get` as the typed map `T`.
fn typed<T: TryFrom<Map, Error = MapError>>(
    get: &mut impl FnMut(&'static str) -> Result<Map>,
    name: &'static str,
) -> Result<T> {
    T::try_from(get(name)?).map_err(map_err(name))
}

impl ClassifierMaps {
    /// Handles on the classifier maps of a loaded Causeway object.
    pub fn from_ebpf(ebpf: &Ebpf) -> Result<Self> {
        Self::open(|name| Ok(map_handles::reopen(ebpf, name)?))
    }

    /// Handles on classifier maps pinned as `<dir>/<MAP_NAME>`.
    pub fn from_pin_dir(dir: &Path) -> Result<Self> {
        Self::open(|name| Ok(map_handles::open_pinned(dir, name)?))
    }

    fn open(mut get: impl FnMut(&'static str) -> Result<Map>) -> Result<Self> {
        Ok(Self {
            config: typed(&mut get, MAP_CLASSIFIER_CONFIG)?,
            src_v4: typed(&mut get, MAP_SRC_V4)?,
            dst_v4: typed(&mut get, MAP_DST_V4)?,
            src_v6: typed(&mut get, MAP_SRC_V6)?,
            dst_v6: typed(&mut get, MAP_DST_V6)?,
            proto_dscp: typed(&mut get, MAP_PROTO_DSCP)?,
            src_ports: typed(&mut get, MAP_SRC_PORT)?,
            dst_ports: typed(&mut get, MAP_DST_PORT)?,
            actions: typed(&mut get, MAP_RULE_ACTIONS)?,
            trie_defaults: typed(&mut get, MAP_TRIE_DEFAULTS)?,
            addr_nodes: typed(&mut get, MAP_ADDR_NODES)?,
            addr_bitmaps: typed(&mut get, MAP_ADDR_BITMAPS)?,
            admission_v4: typed(&mut get, MAP_ADMISSION_V4)?,
            admission_v6: typed(&mut get, MAP_ADMISSION_V6)?,
            admission_ports: typed(&mut get, MAP_ADMISSION_PORTS)?,
            admission_fragments: typed(&mut get, MAP_ADMISSION_FRAGMENTS)?,
            cache: typed(&mut get, MAP_ADDR_CACHE)?,
            known: [None, None],
            generation_seen: None,
            last_stats: ApplyStats::default(),
        })
    }

    /// The live configuration (active set, rule count, generation).
    pub fn config(&self) -> Result<ClassifierConfig> {
        self.config
            .get(&0, 0)
            .map_err(map_err(MAP_CLASSIFIER_CONFIG))
    }

    /// What the last [`apply`](Self::apply) wrote and read.
    pub fn last_apply_stats(&self) -> ApplyStats {
        self.last_stats
    }

    /// Turns the kernel's per-CPU classification cache (one result per
    /// flow) on or off (it is on unless turned off). Results are the same
    /// either way; off, every frame is classified from the maps, its
    /// addresses looked up in the stride-8 tables (or LPM tries): the cost
    /// of a flow's first frame (for measurements and tests).
    pub fn set_address_cache(&mut self, enabled: bool) -> Result<()> {
        let mut config = self.config()?;
        if enabled {
            config.flags &= !CLS_FLAG_NO_ADDR_CACHE;
        } else {
            config.flags |= CLS_FLAG_NO_ADDR_CACHE;
        }
        self.config
            .set(0, config, 0)
            .map_err(map_err(MAP_CLASSIFIER_CONFIG))
    }

    /// Replaces the live rule set with `rules`, atomically for the frames
    /// being classified, and returns the new generation. On error the live
    /// set is unchanged (only the inactive set may be partly written).
    pub fn apply(&mut self, rules: &RuleSet) -> Result<u64> {
        let staged = self.stage(rules)?;
        self.commit(&staged)
    }

    /// Writes `rules` into the inactive set (after the grace period of the
    /// last flip) without making it live; [`commit`](Self::commit) flips.
    pub fn stage(&mut self, rules: &RuleSet) -> Result<StagedRules> {
        let current = self.config()?;
        if current.active_set >= RULE_SETS {
            return Err(ClassifierMapsError::BadActiveSet(current.active_set));
        }
        if self.generation_seen != Some(current.generation) {
            self.known = [None, None];
        }
        let target = 1 - current.active_set;
        wait_out_grace_period(current.flipped_at_ns)?;
        let compiled = compile(rules, target);
        let mut stats = ApplyStats::default();
        self.write_set(&compiled, &mut stats)?;
        self.last_stats = stats;
        Ok(StagedRules {
            previous: current,
            next: ClassifierConfig {
                active_set: target,
                rule_count: compiled.rule_count,
                generation: current.generation + 1,
                flipped_at_ns: 0,
                flags: current.flags,
                reserved: 0,
            },
        })
    }

    /// Makes staged rules live with one write of the config; returns the
    /// new generation.
    pub fn commit(&mut self, staged: &StagedRules) -> Result<u64> {
        let next = ClassifierConfig {
            flipped_at_ns: boottime_ns()?,
            ..staged.next
        };
        self.config
            .set(0, next, 0)
            .map_err(map_err(MAP_CLASSIFIER_CONFIG))?;
        self.generation_seen = Some(next.generation);
        Ok(next.generation)
    }

    /// Writes one compiled set (LPM tries, then array slots) where it
    /// differs from the maps; remembers the slots.
    pub(super) fn write_set(
        &mut self,
        compiled: &CompiledRuleSet,
        stats: &mut ApplyStats,
    ) -> Result<()> {
        let target = compiled.set;
        let known = self.known[target as usize].take();
        write_lpm(
            &mut self.src_v4,
            MAP_SRC_V4,
            target,
            &compiled.src_v4,
            Ipv4LpmData::new,
            stats,
        )?;
        write_lpm(
            &mut self.dst_v4,
            MAP_DST_V4,
            target,
            &compiled.dst_v4,
            Ipv4LpmData::new,
            stats,
        )?;
        write_lpm(
            &mut self.src_v6,
            MAP_SRC_V6,
            target,
            &compiled.src_v6,
            Ipv6LpmData::new,
            stats,
        )?;
        write_lpm(
            &mut self.dst_v6,
            MAP_DST_V6,
            target,
            &compiled.dst_v6,
            Ipv6LpmData::new,
            stats,
        )?;
        write_lpm(
            &mut self.admission_v4,
            MAP_ADMISSION_V4,
            target,
            &compiled.admission_v4,
            Ipv4LpmData::new,
            stats,
        )?;
        write_lpm(
            &mut self.admission_v6,
            MAP_ADMISSION_V6,
            target,
            &compiled.admission_v6,
            Ipv6LpmData::new,
            stats,
        )?;
        let slots = self.write_slots(compiled, known, stats)?;
        self.known[target as usize] = Some(slots);
        Ok(())
    }

    fn write_slots(
        &mut self,
        c: &CompiledRuleSet,
        known: Option<KnownSlots>,
        stats: &mut ApplyStats,
    ) -> Result<KnownSlots> {
        let set = c.set;
        let (pd, sp, dp, act, td, ap, an, ab) = match known {
            Some(k) => (
                Some(k.proto_dscp),
                Some(k.src_ports),
                Some(k.dst_ports),
                Some(k.actions),
                Some(k.trie_defaults),
                Some(k.admission_ports),
                Some(k.addr_nodes),
                Some(k.addr_bitmaps),
            ),
            None => (None, None, None, None, None, None, None, None),
        };

        let set_base = |slots: u32| set * slots;
        write_array(
            &mut self.admission_ports,
            MAP_ADMISSION_PORTS,
            set_base(ADMISSION_PORT_WORDS),
            &c.admission_ports,
            ap,
            stats,
        )?;
        write_array(
            &mut self.proto_dscp,
            MAP_PROTO_DSCP,
            set_base(PROTO_DSCP_SLOTS),
            &c.proto_dscp,
            pd,
            stats,
        )?;
        write_array(
            &mut self.src_ports,
            MAP_SRC_PORT,
            set_base(PORT_SLOTS),
            &c.src_ports,
            sp,
            stats,
        )?;
        write_array(
            &mut self.dst_ports,
            MAP_DST_PORT,
            set_base(PORT_SLOTS),
            &c.dst_ports,
            dp,
            stats,
        )?;
        write_array(
            &mut self.actions,
            MAP_RULE_ACTIONS,
            set_base(MAX_RULES as u32),
            &c.actions,
            act,
            stats,
        )?;
        // The tables before the defaults that point into them (the set is
        // not live yet either way). The whole region of the set is written,
        // zeros past what the tables use, so that the maps are a function of
        // the rule set and a restore leaves them byte for byte as they were.
        let mut nodes = c.addr_tables.nodes.clone();
        nodes.resize(ADDR_POOL_NODES as usize, AddrNode::default());
        let mut bitmaps = c.addr_tables.bitmaps.clone();
        bitmaps.resize(ADDR_BITMAPS_PER_SET as usize, RuleBitmap::default());
        write_array(
            &mut self.addr_nodes,
            MAP_ADDR_NODES,
            set_base(ADDR_POOL_NODES),
            &nodes,
            an,
            stats,
        )?;
        write_array(
            &mut self.addr_bitmaps,
            MAP_ADDR_BITMAPS,
            set_base(ADDR_BITMAPS_PER_SET),
            &bitmaps,
            ab,
            stats,
        )?;
        let defaults = [c.trie_defaults];
        write_array(
            &mut self.trie_defaults,
            MAP_TRIE_DEFAULTS,
            set,
            &defaults,
            td,
            stats,
        )?;
        Ok(KnownSlots {
            proto_dscp: c.proto_dscp.clone(),
            src_ports: c.src_ports.clone(),
            dst_ports: c.dst_ports.clone(),
            actions: c.actions.clone(),
            trie_defaults: defaults.to_vec(),
            admission_ports: c.admission_ports.clone(),
            addr_nodes: nodes,
            addr_bitmaps: bitmaps,
        })
    }
}
