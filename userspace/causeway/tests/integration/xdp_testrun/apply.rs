//! `ClassifierMaps::apply`: set flips, stale entries, minimal writes, the
//! grace period, pinned maps and a second writer.

use std::path::PathBuf;

use aya::maps::LpmTrie;
use bpf_maps::classifier::{Ipv4LpmData, RuleBitmap, MAP_SRC_V4};
use causeway::classifier::{maps::MIN_FLIP_INTERVAL, ClassifierMaps};

use super::*;

fn peer_frame() -> Vec<u8> {
    v4_udp(&[], V4::new(PEER, LOCAL, 17), 1000, 29501, 16)
}

fn src_rule(priority: u32, prefix: &str, class: u8, verdict: Verdict) -> RuleSet {
    RuleSet::new(vec![Rule {
        src: net(prefix),
        ..rule(priority, class, verdict)
    }])
    .expect("rule set")
}

/// (prefix length incl. the set field, address) of set `set` in CW_SRC_V4.
fn src_v4_entries(h: &Harness, set: u32) -> Vec<(u32, [u8; 4])> {
    let map = h.ebpf.map(MAP_SRC_V4).expect("map");
    let trie = LpmTrie::<_, Ipv4LpmData, RuleBitmap>::try_from(map).expect("trie");
    let mut out: Vec<_> = trie
        .keys()
        .map(|k| k.expect("key"))
        .filter(|k| k.data().set == set)
        .map(|k| (k.prefix_len(), k.data().addr))
        .collect();
    out.sort();
    out
}

#[test]
fn apply_flips_sets_and_removes_stale_entries() {
    require_root!("apply_flips_sets_and_removes_stale_entries");
    let mut h = Harness::load();
    let drop_peers = src_rule(1, "10.1.0.0/16", 6, Verdict::Drop);
    let narrow = src_rule(1, "10.1.2.0/24", 3, Verdict::Pass);

    assert_eq!(h.maps.config().unwrap().generation, 0);
    assert_eq!(
        h.run(&peer_frame()),
        XDP_PASS,
        "no policy yet: everything passes"
    );

    assert_eq!(h.maps.apply(&drop_peers).unwrap(), 1);
    assert_eq!(h.maps.config().unwrap().active_set, 1);
    assert_eq!(h.run(&peer_frame()), XDP_DROP);
    assert_eq!(h.counters()[6].drops, 1);

    assert_eq!(h.maps.apply(&RuleSet::default()).unwrap(), 2);
    assert_eq!(h.maps.config().unwrap().active_set, 0);
    assert_eq!(h.run(&peer_frame()), XDP_PASS);
    assert_eq!(
        h.counters()[DEFAULT_CLASS as usize].packets,
        2,
        "before any policy, and now"
    );

    assert_eq!(h.maps.apply(&narrow).unwrap(), 3);
    assert_eq!(h.run(&peer_frame()), XDP_PASS);
    assert_eq!(h.counters()[3].packets, 1);
    assert!(
        h.maps.last_apply_stats().lpm_removals >= 1,
        "the /16 of the first policy must go"
    );
    assert_eq!(
        src_v4_entries(&h, 1),
        vec![(32, [0; 4]), (32 + 24, [10, 1, 2, 0])]
    );
    assert_eq!(src_v4_entries(&h, 0), vec![(32, [0; 4])]);

    // Set 0 holds the empty policy, set 1 `narrow`: re-applying them writes nothing.
    h.maps.apply(&RuleSet::default()).unwrap();
    let stats = h.maps.last_apply_stats();
    assert_eq!(
        (
            stats.array_writes,
            stats.array_reads,
            stats.lpm_writes,
            stats.lpm_removals
        ),
        (0, 0, 0, 0)
    );
    h.maps.apply(&narrow).unwrap();
    let stats = h.maps.last_apply_stats();
    assert_eq!(
        (
            stats.array_writes,
            stats.array_reads,
            stats.lpm_writes,
            stats.lpm_removals
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(h.run(&peer_frame()), XDP_PASS);
    assert_eq!(h.counters()[3].packets, 2);
    assert_eq!(h.maps.config().unwrap().rule_count, 1);
}

#[test]
fn apply_waits_out_the_grace_period() {
    require_root!("apply_waits_out_the_grace_period");
    let mut h = Harness::load();
    h.maps
        .apply(&src_rule(1, "10.1.0.0/16", 1, Verdict::Pass))
        .unwrap();
    let first = h.maps.config().unwrap().flipped_at_ns;
    h.maps
        .apply(&src_rule(1, "10.1.0.0/16", 2, Verdict::Pass))
        .unwrap();
    let second = h.maps.config().unwrap().flipped_at_ns;
    assert!(
        second - first >= MIN_FLIP_INTERVAL.as_nanos() as u64,
        "flips {} ns apart, the minimum is {MIN_FLIP_INTERVAL:?}",
        second - first
    );
}

/// A bpffs mounted on a private directory, unmounted and removed on drop.
struct BpffsMount(PathBuf);

impl BpffsMount {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("causeway-bpffs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating the mount point");
        nix::mount::mount(
            Some("bpf"),
            &dir,
            Some("bpf"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .expect("mounting bpffs");
        Self(dir)
    }
}

impl Drop for BpffsMount {
    fn drop(&mut self) {
        let _ = nix::mount::umount(&self.0);
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn pinned_maps_and_a_second_writer() {
    require_root!("pinned_maps_and_a_second_writer");
    let mut h = Harness::load();
    let mount = BpffsMount::new();
    for (name, map) in h.ebpf.maps() {
        // Global data (`.rodata…`, aya-log's constants): bpffs refuses dotted
        // names, and the data path does not pin it either.
        if name.starts_with('.') {
            continue;
        }
        map.pin(mount.0.join(name))
            .unwrap_or_else(|e| panic!("pinning {name}: {e}"));
    }
    let mut pinned = ClassifierMaps::from_pin_dir(&mount.0).expect("opening pinned maps");
    pinned
        .apply(&src_rule(1, "10.1.0.0/16", 6, Verdict::Drop))
        .unwrap();
    assert_eq!(
        h.run(&peer_frame()),
        XDP_DROP,
        "a policy written through the pins reaches the program"
    );

    // The harness's own handle has not seen generation 1: it must read back
    // what the set holds instead of trusting its (empty) memory.
    h.maps
        .apply(&src_rule(1, "10.1.0.0/16", 3, Verdict::Pass))
        .unwrap();
    assert!(h.maps.last_apply_stats().array_reads > 0);
    assert_eq!(h.run(&peer_frame()), XDP_PASS);
    pinned
        .apply(&src_rule(1, "10.1.0.0/16", 5, Verdict::Drop))
        .unwrap();
    assert!(
        pinned.last_apply_stats().array_reads > 0,
        "generation moved under the pinned handle"
    );
    assert_eq!(h.run(&peer_frame()), XDP_DROP);
    assert_eq!(h.counters()[5].drops, 1);
    assert_eq!(pinned.config().unwrap().generation, 3);
    assert!(ClassifierMaps::from_pin_dir(&mount.0.join("missing")).is_err());
}

#[test]
fn address_cache_never_serves_a_replaced_rule_set() {
    require_root!("address_cache_never_serves_a_replaced_rule_set");
    let mut h = Harness::load();
    // Rule 0 matches the peer in A; in C rule 0 is another network and the
    // peer is rule 1. A slot cached under A and wrongly reused under C would
    // pick C's rule 0 (class 7) instead of rule 1 (class 9).
    let a = src_rule(1, "10.1.0.0/16", 2, Verdict::Pass);
    let c = RuleSet::new(vec![
        Rule {
            src: net("10.2.0.0/16"),
            ..rule(1, 7, Verdict::Pass)
        },
        Rule {
            src: net("10.1.0.0/16"),
            ..rule(2, 9, Verdict::Pass)
        },
    ])
    .expect("rule set");
    h.maps.apply(&a).unwrap(); // set 1, generation 1
    for _ in 0..3 {
        h.run(&peer_frame()); // fills the slot under (set 1, generation 1)
    }
    h.maps.apply(&RuleSet::default()).unwrap(); // set 0, no frame runs
    h.maps.apply(&c).unwrap(); // set 1 rewritten, generation 3
    assert_eq!(h.maps.config().unwrap().active_set, 1);
    h.run(&peer_frame());
    let counters = h.counters();
    assert_eq!(
        (
            counters[2].packets,
            counters[7].packets,
            counters[9].packets
        ),
        (3, 0, 1)
    );
}

/// An IPv6 trie whose stride-8 table does not fit the pool (200 unrelated
/// /128s need ~3,000 nodes) has no table: the kernel walks its LPM trie, with
/// the same results, cached or not.
#[test]
fn an_ipv6_trie_too_large_for_its_table_is_looked_up_in_the_lpm_trie() {
    require_root!("an_ipv6_trie_too_large_for_its_table_is_looked_up_in_the_lpm_trie");
    let mut h = Harness::load();
    let mut rules: Vec<Rule> = (0..200u32)
        .map(|i| Rule {
            src: net(&format!("{:x}00:{:x}::1/128", 0x20 + i, i + 1)),
            ..rule(i + 10, 4, Verdict::Pass)
        })
        .collect();
    rules.push(Rule {
        src: net("fd00:1::1/128"),
        ..rule(1, 5, Verdict::Pass)
    });
    let rules = RuleSet::new(rules).expect("rule set");
    let compiled = causeway::classifier::compile::compile(&rules, 0);
    assert_eq!(
        compiled.trie_defaults.tables & (1 << bpf_maps::classifier::TRIE_SRC_V6),
        0,
        "the source IPv6 table must not fit"
    );
    h.maps.apply(&rules).expect("apply");
    let frame = |src: &str| {
        cat(&[
            &eth(&[], ETH_IPV6),
            &ipv6(V6::new(src, "fd00:2::1", 17), &udp(40_000, 29_501, 16)),
        ])
    };
    for cache in [false, true, true] {
        h.maps.set_address_cache(cache).expect("cache flag");
        let before = h.counters();
        assert_eq!(h.run(&frame("fd00:1::1")), XDP_PASS);
        assert_eq!(h.run(&frame("2000:1::1")), XDP_PASS);
        assert_eq!(h.run(&frame("fd00:1::2")), XDP_PASS);
        let after = h.counters();
        let delta = |class: usize| after[class].packets - before[class].packets;
        assert_eq!(delta(5), 1, "fd00:1::1 matches its /128 (cache {cache})");
        assert_eq!(delta(4), 1, "2000:1::1 matches the first of the 200");
        assert_eq!(
            delta(DEFAULT_CLASS as usize),
            1,
            "fd00:1::2 matches nothing"
        );
    }
}
