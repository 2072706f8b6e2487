//! The classifier's maps: rules compiled to per-field bitmaps.
//!
//! A policy of up to [`MAX_RULES`] rules, sorted by priority, is compiled by
//! userspace into one [`RuleBitmap`] per value of each packet field: bit `i`
//! of the bitmap found for a field value is set when rule `i` accepts that
//! value. The kernel looks up the source and destination prefixes (stride-8
//! tables, [`AddrNode`], compiled from the same entries as the LPM tries,
//! which remain the fallback), the (protocol, DSCP) pair and both ports
//! (arrays), ANDs the five bitmaps and takes the lowest set bit: that is the
//! highest-priority matching rule. The cost is the same for 1 or 256 rules.
//! A per-CPU cache ([`AddrCacheEntry`]) remembers the result per flow.
//!
//! Atomic replacement: every map holds [`RULE_SETS`] (two) complete rule sets,
//! selected by the set index in its key. Userspace writes the inactive set in
//! full, then flips [`ClassifierConfig::active_set`] with one 4-byte write; a
//! frame reads `active_set` once and sees either the old or the new rule set,
//! never a mix.

/// Rules in one rule set; bit `i` of a [`RuleBitmap`] stands for rule `i`.
pub const MAX_RULES: usize = 256;
/// 64-bit words in a [`RuleBitmap`].
pub const BITMAP_WORDS: usize = MAX_RULES / 64;
/// Complete rule sets held side by side (active + the one being written).
pub const RULE_SETS: u32 = 2;
/// Traffic classes a rule can map a frame to.
pub const MAX_CLASSES: u32 = 16;
/// Class of frames that match no rule.
pub const DEFAULT_CLASS: u32 = 0;

/// Port slots per rule set: one per port, plus [`NO_PORTS`].
pub const PORT_SLOTS: u32 = 65_537;
/// Port slot used for frames that carry no L4 ports (not TCP/UDP, or a
/// non-first fragment): only rules without a port constraint match it.
pub const NO_PORTS: u32 = 65_536;
/// (protocol, DSCP) slots per rule set: `proto * 64 + dscp`.
pub const PROTO_DSCP_SLOTS: u32 = 256 * 64;

/// IPv6 extension headers (hop-by-hop, routing, fragment, destination
/// options, AH) the parser walks before giving up on finding the upper-layer
/// protocol. See the parser rules in `ebpf/src/parse.rs`.
pub const MAX_IPV6_EXT_HEADERS: u32 = 6;

/// Verdicts a rule can carry.
pub const VERDICT_PASS: u32 = 0;
pub const VERDICT_DROP: u32 = 1;

/// Map names (≤ 15 bytes, the kernel's BPF_OBJ_NAME_LEN - 1).
pub const MAP_CLASSIFIER_CONFIG: &str = "CW_CLS_CONFIG";
pub const MAP_SRC_V4: &str = "CW_SRC_V4";
pub const MAP_DST_V4: &str = "CW_DST_V4";
pub const MAP_SRC_V6: &str = "CW_SRC_V6";
pub const MAP_DST_V6: &str = "CW_DST_V6";
pub const MAP_PROTO_DSCP: &str = "CW_PROTO_DSCP";
pub const MAP_SRC_PORT: &str = "CW_SPORT";
pub const MAP_DST_PORT: &str = "CW_DPORT";
pub const MAP_RULE_ACTIONS: &str = "CW_RULE_ACT";
pub const MAP_ADDR_CACHE: &str = "CW_ADDR_CACHE";
pub const MAP_TRIE_DEFAULTS: &str = "CW_TRIE_DFLT";

/// Index of each LPM trie in [`TrieDefaults`].
pub const TRIE_SRC_V4: usize = 0;
pub const TRIE_DST_V4: usize = 1;
pub const TRIE_SRC_V6: usize = 2;
pub const TRIE_DST_V6: usize = 3;

/// Slots of the per-CPU classification cache (a power of two).
pub const ADDR_CACHE_SLOTS: u32 = 256;

/// [`ClassifierConfig::flags`]: do not use the classification cache
/// ([`AddrCacheEntry`]; every frame is classified from the maps). Results
/// are the same either way; the flag exists to measure and test the
/// uncached path.
pub const CLS_FLAG_NO_ADDR_CACHE: u32 = 1 << 0;
/// [`ClassifierConfig::flags`]: the programs of this interface write log
/// records (see [`crate::log`]). Off by default; set and cleared by
/// `causeway log --on/--off`, kept across policy changes.
pub const CLS_FLAG_LOG: u32 = 1 << 1;

/// Maximum entries in each LPM trie (both rule sets together).
pub const LPM_MAX_ENTRIES: u32 = 2 * (MAX_RULES as u32 + 1) * 2;

/// One bit per rule of a rule set.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RuleBitmap {
    pub words: [u64; BITMAP_WORDS],
}

/// Bits of the rule-set field at the start of every LPM key: an entry's
/// prefix length is `LPM_SET_BITS` plus its address prefix length, so that a
/// lookup never crosses into the other rule set. The set is a whole `u32` (not
/// a byte) so that the address that follows is 4-byte aligned and the kernel
/// builds keys with word stores.
pub const LPM_SET_BITS: u32 = 32;

/// LPM trie key data for IPv4: the rule-set index, then the address in
/// network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ipv4LpmData {
    pub set: u32,
    pub addr: [u8; 4],
}

/// LPM trie key data for IPv6, laid out like [`Ipv4LpmData`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ipv6LpmData {
    pub set: u32,
    pub addr: [u8; 16],
}

/// What a matching rule does with a frame. Indexed by
/// `set * MAX_RULES + rule`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RuleAction {
    /// Traffic class, `< MAX_CLASSES`.
    pub class: u32,
    /// `VERDICT_PASS` or `VERDICT_DROP`.
    pub verdict: u32,
}

/// Single-entry array: which rule set is live.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClassifierConfig {
    /// Rule set that frames are classified with (0 or 1).
    pub active_set: u32,
    /// Number of rules in the active set (informational).
    pub rule_count: u32,
    /// Incremented by userspace on every policy change.
    pub generation: u64,
    /// `CLOCK_BOOTTIME` nanoseconds of the last flip of `active_set`, so that
    /// any process (not only the one that flipped) can wait out the grace
    /// period before it rewrites the now-inactive set.
    pub flipped_at_ns: u64,
    /// `CLS_FLAG_*` bits.
    pub flags: u32,
    pub reserved: u32,
}

/// Per rule set (an array indexed by set): which LPM tries hold nothing but
/// their `/0` entry, and that entry's bitmap. No rule of the set constrains
/// such a trie's field for its family, so every address finds that bitmap and
/// the kernel skips the trie walk. Also which tries have a stride-8 table
/// (see [`AddrNode`]) and its root. Written with the rest of the inactive
/// set, before the flip.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TrieDefaults {
    /// Bit `TRIE_*` set: that trie is trivial and its bitmap is `bitmaps[TRIE_*]`.
    pub trivial: u32,
    /// `POLICY_*` bits of this rule set (kept per set, so that a frame sees
    /// them together with the set it reads, never mixed across a flip).
    pub policy: u32,
    /// Bit `TRIE_*` set: that trie's prefixes are also compiled into the
    /// set's stride-8 table, rooted at node `roots[TRIE_*]` of the set's
    /// pool; clear: the kernel walks the LPM trie. Always set for a non-empty
    /// IPv4 trie; an IPv6 trie whose table does not fit the pool has only
    /// its LPM trie.
    pub tables: u32,
    pub reserved: u32,
    /// Root node of each trie's table, an index into the set's pool
    /// (`0..ADDR_POOL_NODES`).
    pub roots: [u32; 4],
    pub bitmaps: [RuleBitmap; 4],
}

/// The stride-8 address tables (multibit tries with controlled prefix
/// expansion) that replace the LPM walk: one pool of [`ADDR_POOL_NODES`]
/// nodes per rule set (map [`MAP_ADDR_NODES`], indexed
/// `set * ADDR_POOL_NODES + node`), shared by the set's four tries, each
/// rooted at [`TrieDefaults::roots`]. The root is indexed by the address's
/// first byte, its children by the second, and so on: at most 4 lookups for
/// IPv4, 16 for IPv6. A slot is either a child node index (below
/// [`ADDR_POOL_NODES`]) or [`ADDR_SLOT_LEAF`] `|` an index into the set's
/// bitmaps ([`MAP_ADDR_BITMAPS`], indexed `set * ADDR_BITMAPS_PER_SET +
/// index`): the bitmap of the longest prefix that covers the slot (a
/// covering prefix's bitmap is pushed down into child nodes, so one `u32`
/// per slot suffices).
pub const MAP_ADDR_NODES: &str = "CW_ADDR_NODES";
/// Deduplicated rule bitmaps of the address tables.
pub const MAP_ADDR_BITMAPS: &str = "CW_ADDR_BMP";
/// Slots of an [`AddrNode`]: one per value of an address byte.
pub const ADDR_NODE_SLOTS: usize = 256;
/// Bit of a slot that makes it a leaf (a bitmap index), not a child.
pub const ADDR_SLOT_LEAF: u32 = 1 << 31;
/// Distinct prefixes a trie of one rule set holds: one per rule, plus `/0`.
pub const ADDR_TRIE_PREFIXES: u32 = MAX_RULES as u32 + 1;
/// Nodes in one rule set's pool. Each prefix longer than 8 bits adds at
/// most one node per byte past the first, so an IPv4 trie needs at most
/// `1 + 3 * MAX_RULES` nodes and both IPv4 tries always fit (asserted
/// below); the IPv6 tries take what is left, each only if it fits whole.
/// 2 × 2048 nodes of 1 KiB: 4 MiB of map memory.
pub const ADDR_POOL_NODES: u32 = 2048;
/// Bitmaps per rule set: at most one per prefix of each of the four tries.
pub const ADDR_BITMAPS_PER_SET: u32 = 4 * ADDR_TRIE_PREFIXES;
/// Nodes one IPv4 trie can need.
pub const ADDR_V4_MAX_NODES: u32 = 1 + 3 * (ADDR_TRIE_PREFIXES - 1);
const _: () = assert!(2 * ADDR_V4_MAX_NODES <= ADDR_POOL_NODES);
const _: () = assert!(ADDR_POOL_NODES < ADDR_SLOT_LEAF);
const _: () = assert!(ADDR_BITMAPS_PER_SET < ADDR_SLOT_LEAF);

/// One node of an address table: a slot per value of the address byte.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AddrNode {
    pub slots: [u32; ADDR_NODE_SLOTS],
}

impl Default for AddrNode {
    fn default() -> Self {
        Self {
            slots: [0; ADDR_NODE_SLOTS],
        }
    }
}

/// One slot of the per-CPU, direct-mapped classification cache: the class
/// and verdict of one flow (address pair, protocol, DSCP and ports: every
/// input of classification), valid only for the rule set *and* generation
/// it was computed under (a rule set's contents change only together with
/// the generation, so a stale slot never matches). Indexed by a hash of the
/// addresses and ports; an all-zero slot (family 0) is empty.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AddrCacheEntry {
    pub generation: u64,
    /// Address words as on the wire (an IPv4 address is word 0).
    pub src: [u32; 4],
    pub dst: [u32; 4],
    /// 4 or 6; 0 = empty.
    pub family: u32,
    pub set: u32,
    /// `proto << 16 | dscp << 8 | 1` when the frame has ports, without the
    /// `1` when it has none.
    pub l4: u32,
    /// `src_port << 16 | dst_port`, 0 without ports.
    pub ports: u32,
    /// The result: traffic class and `VERDICT_*`.
    pub class: u32,
    pub verdict: u32,
}

/// [`TrieDefaults::policy`]: frames the parser could not fully read (see
/// [`crate::counters`] `REASON_*` 1..=6) are dropped (`unclassified = "drop"`).
pub const POLICY_UNCLASSIFIED_DROP: u32 = 1 << 0;
/// [`TrieDefaults::policy`]: admission is on: frames aimed at the ports of
/// `CW_ADM_PORTS` pass only from the prefixes of `CW_ADM_V4`/`CW_ADM_V6`.
pub const POLICY_ADMISSION: u32 = 1 << 1;

/// Admitted prefixes per family and rule set.
pub const ADMISSION_MAX_PREFIXES: u32 = 16_384;
/// Entries of each admission trie (both rule sets together).
pub const ADMISSION_LPM_ENTRIES: u32 = ADMISSION_MAX_PREFIXES * RULE_SETS;
/// `u32` words of the protected-port bitmap of one rule set: bit `port % 32`
/// of word `port / 32`.
pub const ADMISSION_PORT_WORDS: u32 = 65_536 / 32;
/// Remembered first fragments (LRU).
pub const ADMISSION_FRAG_ENTRIES: u32 = 8_192;

/// Admission tries: keyed like the rule tries ([`Ipv4LpmData`],
/// [`Ipv6LpmData`], set first), value `1`; a missing entry = not admitted.
pub const MAP_ADMISSION_V4: &str = "CW_ADM_V4";
pub const MAP_ADMISSION_V6: &str = "CW_ADM_V6";
/// `u32` array indexed `set * ADMISSION_PORT_WORDS + port / 32`: the
/// training and probe ports admission protects (TCP and UDP).
pub const MAP_ADMISSION_PORTS: &str = "CW_ADM_PORTS";
/// LRU hash [`FragmentKey`] → generation (`u64`): first fragments from
/// non-admitted sources that went to unprotected ports; their later
/// fragments pass. Valid only under the generation stored.
pub const MAP_ADMISSION_FRAGMENTS: &str = "CW_ADM_FRAG";

/// Key of [`MAP_ADMISSION_FRAGMENTS`]: one datagram.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FragmentKey {
    /// Address words as on the wire (an IPv4 address is word 0).
    pub src: [u32; 4],
    pub dst: [u32; 4],
    /// IPv4 identification (16 bits) or IPv6 fragment-header identification.
    pub id: u32,
    /// IPv4 protocol, or the Next Header of the IPv6 fragment header.
    pub proto: u32,
}

crate::assert_no_padding!(FragmentKey, [u32; 4], [u32; 4], u32, u32);
crate::assert_no_padding!(TrieDefaults, u32, u32, u32, u32, [u32; 4], [RuleBitmap; 4]);
crate::assert_no_padding!(AddrNode, [u32; ADDR_NODE_SLOTS]);
crate::assert_no_padding!(RuleBitmap, [u64; BITMAP_WORDS]);
crate::assert_no_padding!(Ipv4LpmData, u32, [u8; 4]);
crate::assert_no_padding!(Ipv6LpmData, u32, [u8; 16]);
crate::assert_no_padding!(RuleAction, u32, u32);
crate::assert_no_padding!(ClassifierConfig, u32, u32, u64, u64, u32, u32);
crate::assert_no_padding!(
    AddrCacheEntry,
    u64,
    [u32; 4],
    [u32; 4],
    u32,
    u32,
    u32,
    u32,
    u32,
    u32
);
crate::impl_pod!(
    RuleBitmap,
    Ipv4LpmData,
    Ipv6LpmData,
    RuleAction,
    ClassifierConfig,
    AddrCacheEntry,
    TrieDefaults,
    FragmentKey,
    AddrNode
);
