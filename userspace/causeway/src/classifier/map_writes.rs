//! The writes behind [`ClassifierMaps::apply`](super::maps::ClassifierMaps::apply):
//! array slots and LPM entries of one rule set, each written only where it
//! differs from what the map holds, and the grace-period wait before a set is
//! rewritten.

use std::{thread, time::Duration};

use aya::{
    maps::{lpm_trie::Key, Array, LpmTrie, MapData, MapError},
    Pod,
};
use bpf_maps::classifier::{Ipv4LpmData, Ipv6LpmData, LPM_SET_BITS};

use super::{
    compile::LpmEntries,
    maps::{map_err, ApplyStats, ClassifierMapsError, Result, MIN_FLIP_INTERVAL},
};

/// Writes `wanted` at `base..` wherever it differs from what the slots hold:
/// `known` when this handle knows it (the first `known.len()` slots),
/// otherwise read back slot by slot.
pub(super) fn write_array<V: Pod + PartialEq>(
    map: &mut Array<MapData, V>,
    name: &'static str,
    base: u32,
    wanted: &[V],
    known: Option<Vec<V>>,
    stats: &mut ApplyStats,
) -> Result<()> {
    for (i, value) in wanted.iter().enumerate() {
        let index = base + i as u32;
        let held = match known.as_ref().and_then(|k| k.get(i)) {
            Some(k) => *k,
            None => {
                stats.array_reads += 1;
                map.get(&index, 0).map_err(map_err(name))?
            }
        };
        if held != *value {
            map.set(index, value, 0).map_err(map_err(name))?;
            stats.array_writes += 1;
        }
    }
    Ok(())
}

/// LPM key data constructors, so that one writer serves both families.
pub(super) trait LpmData<const N: usize>: Pod + Eq + std::hash::Hash {
    fn new(set: u32, addr: [u8; N]) -> Self;
    fn set(&self) -> u32;
    fn addr(&self) -> [u8; N];
}

impl LpmData<4> for Ipv4LpmData {
    fn new(set: u32, addr: [u8; 4]) -> Self {
        Self { set, addr }
    }
    fn set(&self) -> u32 {
        self.set
    }
    fn addr(&self) -> [u8; 4] {
        self.addr
    }
}

impl LpmData<16> for Ipv6LpmData {
    fn new(set: u32, addr: [u8; 16]) -> Self {
        Self { set, addr }
    }
    fn set(&self) -> u32 {
        self.set
    }
    fn addr(&self) -> [u8; 16] {
        self.addr
    }
}

/// Makes the trie's entries for `set` exactly `wanted`: stale entries are
/// removed, new or changed ones written, equal ones left alone.
pub(super) fn write_lpm<K: LpmData<N>, V: Pod + PartialEq, const N: usize>(
    trie: &mut LpmTrie<MapData, K, V>,
    name: &'static str,
    set: u32,
    wanted: &LpmEntries<N, V>,
    make: fn(u32, [u8; N]) -> K,
    stats: &mut ApplyStats,
) -> Result<()> {
    let key_of = |addr: [u8; N], len: u8| Key::new(LPM_SET_BITS + u32::from(len), make(set, addr));
    let mut held = Vec::new();
    for key in trie.keys() {
        let key = key.map_err(map_err(name))?;
        if key.data().set() == set {
            held.push(key);
        }
    }
    let wanted_keys: std::collections::HashSet<(u32, K)> = wanted
        .keys()
        .map(|(addr, len)| {
            let k = key_of(*addr, *len);
            (k.prefix_len(), k.data())
        })
        .collect();
    for key in &held {
        let id = (key.prefix_len(), key.data());
        if !wanted_keys.contains(&id) {
            trie.remove(key).map_err(map_err(name))?;
            stats.lpm_removals += 1;
        }
    }
    for ((addr, len), bitmap) in wanted {
        let key = key_of(*addr, *len);
        match trie.get(&key, 0) {
            Ok(current) if current == *bitmap => {}
            Ok(_) | Err(MapError::KeyNotFound) => {
                trie.insert(&key, bitmap, 0).map_err(map_err(name))?;
                stats.lpm_writes += 1;
            }
            Err(e) => return Err(map_err(name)(e)),
        }
    }
    Ok(())
}

/// Sleeps until [`MIN_FLIP_INTERVAL`] has passed since `flipped_at_ns`.
pub(super) fn wait_out_grace_period(flipped_at_ns: u64) -> Result<()> {
    let now = boottime_ns()?;
    let ready_at = flipped_at_ns.saturating_add(MIN_FLIP_INTERVAL.as_nanos() as u64);
    if now < ready_at {
        let wait = Duration::from_nanos(ready_at - now).min(MIN_FLIP_INTERVAL);
        thread::sleep(wait);
    }
    Ok(())
}

pub(super) fn boottime_ns() -> Result<u64> {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map_err(ClassifierMapsError::Clock)?;
    Ok(ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64)
}
