//! The buffer pool's live allocations, process-wide: memory that stays
//! mapped at the same pages from allocation to free, so the RDMA transport
//! may register it once and reuse the registration for every later send from
//! it. Each allocation gets a fresh id; a registration is reused only while
//! the id it was made for is still live, so memory freed and reallocated at
//! the same address (other pages) is registered anew, never sent from stale
//! pages. Without the `rdma` feature nothing is recorded.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// start address → (length, id)
static LIVE: Mutex<BTreeMap<usize, (usize, u64)>> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Records an allocation of `len` bytes at `start`.
pub fn track(start: *const u8, len: usize) {
    if !super::BUILT || len == 0 {
        return;
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut m) = LIVE.lock() {
        m.insert(start as usize, (len, id));
    }
}

/// Forgets the allocation at `start` (it is about to be freed).
pub fn untrack(start: *const u8) {
    if !super::BUILT {
        return;
    }
    if let Ok(mut m) = LIVE.lock() {
        m.remove(&(start as usize));
    }
}

/// The live allocation holding all of `[addr, addr+len)`: (start, length, id).
pub fn find(addr: usize, len: usize) -> Option<(usize, usize, u64)> {
    let m = LIVE.lock().ok()?;
    let (&start, &(alen, id)) = m.range(..=addr).next_back()?;
    (addr + len <= start + alen).then_some((start, alen, id))
}

/// Whether allocation `id` is still live.
pub fn is_live(id: u64) -> bool {
    LIVE.lock()
        .map(|m| m.values().any(|(_, i)| *i == id))
        .unwrap_or(false)
}

#[cfg(all(test, feature = "rdma"))]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_found_only_inside_a_live_allocation_with_its_id() {
        let a = vec![0u8; 4096];
        let p = a.as_ptr();
        track(p, a.len());
        let (start, len, id) = find(p as usize + 100, 200).expect("inside");
        assert_eq!((start, len), (p as usize, 4096));
        assert!(is_live(id));
        assert!(find(p as usize + 4000, 200).is_none(), "runs past the end");
        untrack(p);
        assert!(find(p as usize + 100, 200).is_none());
        assert!(!is_live(id));
        track(p, a.len());
        let (_, _, id2) = find(p as usize, 1).expect("again");
        assert_ne!(
            id, id2,
            "a new allocation at the same address gets a new id"
        );
        untrack(p);
    }
}
