use bpf_maps::{
    addr_table::POOL_BLOCKS_PER_SET,
    classifier::{RuleBitmap, TRIE_DST_V4, TRIE_DST_V6, TRIE_SRC_V4, TRIE_SRC_V6},
};
use proptest::prelude::*;

use super::*;
use crate::classifier::compile::set_bit;

fn bitmap(bit: usize) -> RuleBitmap {
    let mut b = RuleBitmap::default();
    set_bit(&mut b, bit);
    b
}

/// The longest prefix in `entries` holding `addr`, as the kernel's LPM trie answers.
fn longest_match<const N: usize>(entries: &LpmEntries<N>, addr: &[u8; N]) -> Option<RuleBitmap> {
    entries
        .iter()
        .filter(|((prefix, len), _)| {
            (0..usize::from(*len)).all(|bit| {
                let mask = 0x80u8 >> (bit % 8);
                prefix[bit / 8] & mask == addr[bit / 8] & mask
            })
        })
        .max_by_key(|((_, len), _)| *len)
        .map(|(_, b)| *b)
}

/// Masks `addr` to `len` bits, as LPM entries are stored.
fn masked<const N: usize>(mut addr: [u8; N], len: u8) -> [u8; N] {
    for bit in usize::from(len)..N * 8 {
        addr[bit / 8] &= !(0x80u8 >> (bit % 8));
    }
    addr
}

fn with_default<const N: usize>(mut e: LpmEntries<N>) -> LpmEntries<N> {
    e.entry(([0; N], 0)).or_insert_with(|| bitmap(255));
    e
}

#[test]
fn a_slash_zero_alone_answers_every_address() {
    let v4 = with_default(LpmEntries::<4>::new());
    let v6 = with_default(LpmEntries::<16>::new());
    let t = build(1, &v4, &v4, &v6, &v6);
    assert_eq!(t.tabled, 0b1111);
    assert!(t.pool.is_empty(), "no block below the roots");
    assert_eq!(t.lookup(TRIE_SRC_V4, &[1, 2, 3, 4]), Some(bitmap(255)));
    assert_eq!(t.lookup(TRIE_DST_V6, &[0xff; 16]), Some(bitmap(255)));
}

#[test]
fn longer_prefixes_win_at_every_stride_boundary() {
    let mut v4 = with_default(LpmEntries::<4>::new());
    v4.insert(([10, 0, 0, 0], 8), bitmap(1));
    v4.insert(([10, 1, 0, 0], 16), bitmap(2));
    v4.insert(([10, 1, 2, 0], 23), bitmap(3));
    v4.insert(([10, 1, 2, 3], 32), bitmap(4));
    let v6 = with_default(LpmEntries::<16>::new());
    let t = build(0, &v4, &v4, &v6, &v6);
    let cases: [([u8; 4], usize); 7] = [
        ([10, 1, 2, 3], 4),
        ([10, 1, 2, 4], 3),
        ([10, 1, 3, 9], 3), // /23 covers 10.1.2.0–10.1.3.255
        ([10, 1, 4, 0], 2),
        ([10, 9, 0, 0], 1),
        ([11, 0, 0, 0], 255),
        ([9, 255, 255, 255], 255),
    ];
    for (addr, want) in cases {
        assert_eq!(t.lookup(TRIE_SRC_V4, &addr), Some(bitmap(want)), "{addr:?}");
        assert_eq!(t.lookup(TRIE_DST_V4, &addr), Some(bitmap(want)), "{addr:?}");
    }
}

#[test]
fn child_entries_point_into_the_sets_own_pool() {
    let mut v6 = with_default(LpmEntries::<16>::new());
    let mut host = [0u8; 16];
    host[0] = 0xfd;
    host[15] = 1;
    v6.insert((host, 128), bitmap(7));
    let v4 = with_default(LpmEntries::<4>::new());
    for set in [0, 1] {
        let t = build(set, &v4, &v4, &v6, &v4_as_v6(&v4));
        assert_eq!(
            t.pool.len(),
            15,
            "a /128 needs one block per byte past the root"
        );
        let first = pool_block(set, 0);
        for block in t.roots.iter().chain(&t.pool) {
            for &e in &block.entries {
                if e & ADDR_CHILD != 0 {
                    let b = e & !ADDR_CHILD;
                    assert!(
                        b >= first && b < first + t.pool.len() as u32,
                        "set {set}: {b}"
                    );
                }
            }
        }
        assert_eq!(t.lookup(TRIE_SRC_V6, &host), Some(bitmap(7)));
        let mut other = host;
        other[15] = 2;
        assert_eq!(t.lookup(TRIE_SRC_V6, &other), Some(bitmap(255)));
    }
}

fn v4_as_v6(_: &LpmEntries<4>) -> LpmEntries<16> {
    with_default(LpmEntries::<16>::new())
}

#[test]
fn a_trie_that_does_not_fit_the_pool_is_left_to_its_lpm_trie() {
    // 300 host /128s in distinct /8s need 15 blocks each: 4500 > the pool.
    let mut v6 = with_default(LpmEntries::<16>::new());
    for i in 0..300u32 {
        let mut a = [0u8; 16];
        a[0] = (i % 256) as u8;
        a[1] = (i / 256) as u8;
        a[15] = 1;
        v6.insert((a, 128), bitmap(i as usize % 200));
    }
    let v4 = with_default(LpmEntries::<4>::new());
    let t = build(0, &v4, &v4, &v6, &v6);
    assert!(t.pool.len() <= POOL_BLOCKS_PER_SET as usize);
    assert_eq!(t.tabled & (1 << TRIE_SRC_V6), 0, "src v6 does not fit");
    assert_eq!(
        t.tabled & (1 << TRIE_DST_V6),
        0,
        "dst v6 does not fit either"
    );
    assert_ne!(t.tabled & (1 << TRIE_SRC_V4), 0);
    assert_eq!(t.lookup(TRIE_SRC_V6, &[0; 16]), None);
}

fn v4_entries() -> impl Strategy<Value = LpmEntries<4>> {
    prop::collection::vec((any::<[u8; 4]>(), 0u8..=32, 0usize..256), 0..40).prop_map(|v| {
        let mut e = LpmEntries::new();
        for (a, len, bit) in v {
            e.insert((masked(a, len), len), bitmap(bit));
        }
        with_default(e)
    })
}

fn v6_entries() -> impl Strategy<Value = LpmEntries<16>> {
    // Few distinct leading bytes, so that prefixes nest and share blocks.
    prop::collection::vec((0u8..4, any::<[u8; 16]>(), 0u8..=128, 0usize..256), 0..30).prop_map(
        |v| {
            let mut e = LpmEntries::new();
            for (lead, mut a, len, bit) in v {
                a[0] = 0xfd;
                a[1] = lead;
                e.insert((masked(a, len), len), bitmap(bit));
            }
            with_default(e)
        },
    )
}

proptest! {
    #[test]
    fn table_lookups_equal_longest_prefix_matches(
        src4 in v4_entries(),
        dst4 in v4_entries(),
        src6 in v6_entries(),
        probes4 in prop::collection::vec(any::<[u8; 4]>(), 32),
        probes6 in prop::collection::vec((0u8..4, any::<[u8; 16]>()), 32),
        set in 0u32..2,
    ) {
        let dst6 = with_default(LpmEntries::<16>::new());
        let t = build(set, &src4, &dst4, &src6, &dst6);
        // Probe the prefixes' own addresses and their neighbours too.
        let mut addrs4 = probes4;
        for ((a, _), _) in src4.iter().chain(&dst4) {
            addrs4.push(*a);
            addrs4.push(u32::from_be_bytes(*a).wrapping_sub(1).to_be_bytes());
        }
        for a in &addrs4 {
            prop_assert_eq!(t.lookup(TRIE_SRC_V4, a), longest_match(&src4, a));
            prop_assert_eq!(t.lookup(TRIE_DST_V4, a), longest_match(&dst4, a));
        }
        let mut addrs6: Vec<[u8; 16]> = probes6
            .into_iter()
            .map(|(lead, mut a)| { a[0] = 0xfd; a[1] = lead; a })
            .collect();
        addrs6.extend(src6.keys().map(|(a, _)| *a));
        for a in &addrs6 {
            if t.tabled & (1 << TRIE_SRC_V6) != 0 {
                prop_assert_eq!(t.lookup(TRIE_SRC_V6, a), longest_match(&src6, a));
            }
            prop_assert_eq!(t.lookup(TRIE_DST_V6, a), longest_match(&dst6, a));
        }
    }
}
