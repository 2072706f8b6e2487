use bpf_maps::classifier::{
    RuleBitmap, ADDR_POOL_NODES, ADDR_SLOT_LEAF, ADDR_V4_MAX_NODES, TRIE_DST_V4, TRIE_DST_V6,
    TRIE_SRC_V4, TRIE_SRC_V6,
};
use proptest::prelude::*;

use super::*;

fn bm(n: u64) -> RuleBitmap {
    RuleBitmap {
        words: [n, n >> 1, 0, 1],
    }
}

/// The specification: the bitmap of the longest prefix holding `addr`.
fn naive<const N: usize>(entries: &LpmEntries<N>, addr: [u8; N]) -> Option<RuleBitmap> {
    super::super::compile::longest_prefix(entries, addr)
}

fn entries<const N: usize>(list: &[([u8; N], u8, u64)]) -> LpmEntries<N> {
    let mut e = LpmEntries::new();
    e.insert(([0; N], 0), bm(1));
    for (addr, len, b) in list {
        e.insert((masked(*addr, *len), *len), bm(*b));
    }
    e
}

/// `addr` with the bits past `len` cleared, as `IpPrefix` holds it.
fn masked<const N: usize>(mut addr: [u8; N], len: u8) -> [u8; N] {
    for (i, byte) in addr.iter_mut().enumerate() {
        let keep = (usize::from(len)).saturating_sub(i * 8).min(8);
        *byte &= (0xffu16 << (8 - keep)) as u8;
    }
    addr
}

#[test]
fn only_the_default_is_one_leaf_root() {
    let v4 = entries::<4>(&[]);
    let t = AddrTables::build(&v4, &v4, &LpmEntries::new(), &LpmEntries::new());
    assert_eq!(t.tables, (1 << TRIE_SRC_V4) | (1 << TRIE_DST_V4));
    assert_eq!(t.nodes.len(), 2);
    assert_eq!(t.bitmaps, vec![bm(1)], "one bitmap, shared");
    assert!(t.nodes[0].slots.iter().all(|s| *s == ADDR_SLOT_LEAF));
    assert_eq!(t.roots[TRIE_DST_V4], 1);
    assert_eq!(t.lookup(TRIE_SRC_V4, &[1, 2, 3, 4]), Some(bm(1)));
    assert_eq!(t.lookup(TRIE_SRC_V6, &[0; 16]), None, "no /0: no table");
}

#[test]
fn longer_prefixes_win_and_defaults_are_pushed_down() {
    let v4 = entries::<4>(&[
        ([10, 0, 0, 0], 8, 2),
        ([10, 1, 0, 0], 16, 3),
        ([10, 1, 2, 0], 24, 4),
        ([10, 1, 2, 128], 25, 5),
        ([10, 1, 2, 7], 32, 6),
        ([192, 0, 0, 0], 3, 7),
    ]);
    let t = AddrTables::build(&v4, &entries(&[]), &LpmEntries::new(), &LpmEntries::new());
    // Root, 10/8's child, 10.1/16's child, 10.1.2/24's child; then dst's root.
    assert_eq!(t.nodes.len(), 5);
    let at = |a: [u8; 4]| t.lookup(TRIE_SRC_V4, &a);
    assert_eq!(at([9, 1, 2, 3]), Some(bm(1)));
    assert_eq!(at([10, 9, 2, 3]), Some(bm(2)));
    assert_eq!(at([10, 1, 9, 3]), Some(bm(3)));
    assert_eq!(at([10, 1, 2, 3]), Some(bm(4)));
    assert_eq!(at([10, 1, 2, 200]), Some(bm(5)));
    assert_eq!(at([10, 1, 2, 7]), Some(bm(6)));
    assert_eq!(at([200, 1, 2, 7]), Some(bm(7)), "a /3 fills 32 root slots");
    assert_eq!(at([223, 1, 2, 7]), Some(bm(7)));
    assert_eq!(at([224, 1, 2, 7]), Some(bm(1)));
}

#[test]
fn an_ipv4_trie_of_256_host_routes_in_distinct_slash8s_fits_twice() {
    let list: Vec<_> = (0..=255u8)
        .map(|i| ([i, i, i, i], 32, u64::from(i) + 2))
        .collect();
    let v4 = entries::<4>(&list);
    let t = AddrTables::build(&v4, &v4, &LpmEntries::new(), &LpmEntries::new());
    assert_eq!(t.nodes.len(), 2 * ADDR_V4_MAX_NODES as usize);
    assert_eq!(t.tables, 0b11);
    for i in 0..=255u8 {
        assert_eq!(
            t.lookup(TRIE_DST_V4, &[i, i, i, i]),
            Some(bm(u64::from(i) + 2))
        );
    }
}

#[test]
fn an_ipv6_trie_that_does_not_fit_keeps_its_lpm_trie() {
    // 200 /128s that share nothing past the first byte: 1 + 200 * 15 nodes.
    let list: Vec<_> = (0..200u8)
        .map(|i| {
            let mut a = [i; 16];
            a[0] = i;
            (a, 128, u64::from(i) + 2)
        })
        .collect();
    let v6 = entries::<16>(&list);
    let small = entries::<16>(&[([0xfd; 16], 48, 9)]);
    let v4 = entries::<4>(&[]);
    let t = AddrTables::build(&v4, &v4, &v6, &small);
    assert_eq!(t.tables & (1 << TRIE_SRC_V6), 0, "too big");
    assert_ne!(t.tables & (1 << TRIE_DST_V6), 0, "the small one still fits");
    assert!(t.nodes.len() <= ADDR_POOL_NODES as usize);
    assert_eq!(t.lookup(TRIE_DST_V6, &[0xfd; 16]), Some(bm(9)));
}

fn v4_prefix() -> impl Strategy<Value = ([u8; 4], u8, u64)> {
    // Few distinct leading bytes, so that prefixes nest and share nodes.
    (0..4u8, any::<[u8; 3]>(), 0..=32u8, 2..1000u64)
        .prop_map(|(a, rest, len, b)| ([10 + a, rest[0] % 4, rest[1], rest[2]], len, b))
}

fn v6_prefix() -> impl Strategy<Value = ([u8; 16], u8, u64)> {
    (0..3u8, any::<[u8; 16]>(), 0..=128u8, 2..1000u64).prop_map(|(a, mut rest, len, b)| {
        rest[0] = 0xfd;
        rest[1] = a;
        (rest, len, b)
    })
}

/// An address near one of the prefixes (or anywhere).
fn near<const N: usize>(
    list: &[([u8; N], u8, u64)],
    pick: usize,
    noise: [u8; N],
    flip: u8,
) -> [u8; N] {
    let Some((addr, _, _)) = list.get(pick % (list.len() + 1)) else {
        return noise;
    };
    let mut a = *addr;
    let bit = usize::from(flip) % (N * 8);
    a[bit / 8] ^= 1 << (bit % 8);
    if flip.is_multiple_of(3) {
        a = *addr;
    }
    a
}

proptest! {
    #[test]
    fn ipv4_tables_match_the_longest_prefix(
        list in prop::collection::vec(v4_prefix(), 0..64),
        probes in prop::collection::vec((any::<usize>(), any::<[u8; 4]>(), any::<u8>()), 1..64),
    ) {
        let e = entries::<4>(&list);
        let t = AddrTables::build(&e, &e, &LpmEntries::new(), &LpmEntries::new());
        prop_assert_eq!(t.tables, 0b11);
        for (pick, noise, flip) in probes {
            let addr = near(&list, pick, noise, flip);
            prop_assert_eq!(t.lookup(TRIE_SRC_V4, &addr), naive(&e, addr));
            prop_assert_eq!(t.lookup(TRIE_DST_V4, &addr), naive(&e, addr));
        }
    }

    #[test]
    fn ipv6_tables_match_the_longest_prefix(
        list in prop::collection::vec(v6_prefix(), 0..40),
        probes in prop::collection::vec((any::<usize>(), any::<[u8; 16]>(), any::<u8>()), 1..64),
    ) {
        let e = entries::<16>(&list);
        let v4 = entries::<4>(&[]);
        let t = AddrTables::build(&v4, &v4, &e, &e);
        prop_assert_eq!(t.tables, 0b1111, "40 prefixes always fit");
        for (pick, noise, flip) in probes {
            let addr = near(&list, pick, noise, flip);
            prop_assert_eq!(t.lookup(TRIE_SRC_V6, &addr), naive(&e, addr));
            prop_assert_eq!(t.lookup(TRIE_DST_V6, &addr), naive(&e, addr));
        }
    }
}
