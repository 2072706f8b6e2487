//! Every map of the classifier, its counters and the path steering. Names are the `MAP_*`
//! constants of `bpf_maps` (the `#[map]` attribute needs a literal; the
//! userspace test `object_declares_every_shared_map` checks they agree).

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LpmTrie, LruHashMap, PerCpuArray},
};
use bpf_maps::{
    classifier::{
        AddrCacheEntry, AddrNode, ClassifierConfig, FragmentKey, Ipv4LpmData, Ipv6LpmData,
        RuleAction, RuleBitmap, TrieDefaults, ADDR_BITMAPS_PER_SET, ADDR_CACHE_SLOTS,
        ADDR_POOL_NODES, ADMISSION_FRAG_ENTRIES, ADMISSION_LPM_ENTRIES, ADMISSION_PORT_WORDS,
        LPM_MAX_ENTRIES, MAX_RULES, PORT_SLOTS, PROTO_DSCP_SLOTS, RULE_SETS,
    },
    counters::{IngressCounters, COUNTER_SLOTS, REASON_SLOTS},
    paths::{FlowKey, PathCounters, PathEntry, MAX_PATHS, PATH_COUNTER_SLOTS, PATH_FLOW_ENTRIES},
};

/// Single entry: the active rule set.
#[map(name = "CW_CLS_CONFIG")]
pub static CLS_CONFIG: Array<ClassifierConfig> = Array::with_max_entries(1, 0);

#[map(name = "CW_SRC_V4")]
pub static SRC_V4: LpmTrie<Ipv4LpmData, RuleBitmap> = LpmTrie::with_max_entries(LPM_MAX_ENTRIES, 0);
#[map(name = "CW_DST_V4")]
pub static DST_V4: LpmTrie<Ipv4LpmData, RuleBitmap> = LpmTrie::with_max_entries(LPM_MAX_ENTRIES, 0);
#[map(name = "CW_SRC_V6")]
pub static SRC_V6: LpmTrie<Ipv6LpmData, RuleBitmap> = LpmTrie::with_max_entries(LPM_MAX_ENTRIES, 0);
#[map(name = "CW_DST_V6")]
pub static DST_V6: LpmTrie<Ipv6LpmData, RuleBitmap> = LpmTrie::with_max_entries(LPM_MAX_ENTRIES, 0);

/// Indexed by `set * PROTO_DSCP_SLOTS + proto * 64 + dscp`.
#[map(name = "CW_PROTO_DSCP")]
pub static PROTO_DSCP: Array<RuleBitmap> = Array::with_max_entries(RULE_SETS * PROTO_DSCP_SLOTS, 0);

/// Indexed by `set * PORT_SLOTS + port` (or `NO_PORTS`).
#[map(name = "CW_SPORT")]
pub static SRC_PORT: Array<RuleBitmap> = Array::with_max_entries(RULE_SETS * PORT_SLOTS, 0);
#[map(name = "CW_DPORT")]
pub static DST_PORT: Array<RuleBitmap> = Array::with_max_entries(RULE_SETS * PORT_SLOTS, 0);

/// Indexed by `set * MAX_RULES + rule`.
#[map(name = "CW_RULE_ACT")]
pub static RULE_ACTIONS: Array<RuleAction> =
    Array::with_max_entries(RULE_SETS * MAX_RULES as u32, 0);

/// Per-CPU counters by class, plus `UNCLASSIFIED_SLOT`.
#[map(name = "CW_IN_COUNT")]
pub static INGRESS_COUNTERS: PerCpuArray<IngressCounters> =
    PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);

/// Per-CPU direct-mapped cache of LPM results by address pair.
#[map(name = "CW_ADDR_CACHE")]
pub static ADDR_CACHE: PerCpuArray<AddrCacheEntry> =
    PerCpuArray::with_max_entries(ADDR_CACHE_SLOTS, 0);

/// Stride-8 address tables: each set's pool of nodes, indexed
/// `set * ADDR_POOL_NODES + node` (see `bpf_maps::classifier::AddrNode`).
#[map(name = "CW_ADDR_NODES")]
pub static ADDR_NODES: Array<AddrNode> = Array::with_max_entries(RULE_SETS * ADDR_POOL_NODES, 0);

/// The tables' leaf bitmaps, indexed `set * ADDR_BITMAPS_PER_SET + index`.
#[map(name = "CW_ADDR_BMP")]
pub static ADDR_BITMAPS: Array<RuleBitmap> =
    Array::with_max_entries(RULE_SETS * ADDR_BITMAPS_PER_SET, 0);

/// Indexed by set: tries that hold only their `/0` entry, and its bitmap.
#[map(name = "CW_TRIE_DFLT")]
pub static TRIE_DEFAULTS: Array<TrieDefaults> = Array::with_max_entries(RULE_SETS, 0);

/// Per-CPU counters by `REASON_*` (unparsed frames, admission drops).
#[map(name = "CW_REASONS")]
pub static REASON_COUNTERS: PerCpuArray<IngressCounters> =
    PerCpuArray::with_max_entries(REASON_SLOTS, 0);

/// Admitted source prefixes, keyed with the rule set like the rule tries.
#[map(name = "CW_ADM_V4")]
pub static ADMISSION_V4: LpmTrie<Ipv4LpmData, u32> =
    LpmTrie::with_max_entries(ADMISSION_LPM_ENTRIES, 0);
#[map(name = "CW_ADM_V6")]
pub static ADMISSION_V6: LpmTrie<Ipv6LpmData, u32> =
    LpmTrie::with_max_entries(ADMISSION_LPM_ENTRIES, 0);

/// Protected-port bitmap, indexed `set * ADMISSION_PORT_WORDS + port / 32`.
#[map(name = "CW_ADM_PORTS")]
pub static ADMISSION_PORTS: Array<u32> =
    Array::with_max_entries(RULE_SETS * ADMISSION_PORT_WORDS, 0);

/// First fragments whose later fragments pass (value: the generation).
#[map(name = "CW_ADM_FRAG")]
pub static ADMISSION_FRAGMENTS: LruHashMap<FragmentKey, u64> =
    LruHashMap::with_max_entries(ADMISSION_FRAG_ENTRIES, 0);

/// WAN path steering (`steer.rs`): flow → path id.
#[map(name = "CW_PATH_FLOWS")]
pub static PATH_FLOWS: HashMap<FlowKey, u32> = HashMap::with_max_entries(PATH_FLOW_ENTRIES, 0);

/// Path id → mark and state.
#[map(name = "CW_PATH_TABLE")]
pub static PATH_TABLE: Array<PathEntry> = Array::with_max_entries(MAX_PATHS, 0);

/// Per-CPU frames and bytes steered onto each path, plus the unsteered slot.
#[map(name = "CW_PATH_COUNT")]
pub static PATH_COUNT: PerCpuArray<PathCounters> =
    PerCpuArray::with_max_entries(PATH_COUNTER_SLOTS, 0);
