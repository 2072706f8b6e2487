//! The buffer pool's live allocations, process-wide: memory that stays
//! mapped at the same pages from allocation to free, so the RDMA transport
//! may register it once and reuse the registration for every later send from
//! it. Each allocation gets a fresh id; a registration is reused only while
//! the id it was made for is still live, so memory freed and reallocated at
//! the same address (other pages) is registered anew, never sent from stale
//! pages.
//!
//! An allocation is also *held* while RDMA WRITEs from it are in flight (the
//! writer returns before the device has read the bytes, so that successive
//! writes overlap): the pool does not hand a held buffer out again
//! ([`busy`]), and one it frees while held is kept here until the last hold
//! is released ([`free_when_idle`]). Without the `rdma` feature nothing is
//! recorded and nothing is ever held.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

struct Entry {
    len: usize,
    id: u64,
    /// Writes in flight from this allocation.
    holds: u32,
    /// The allocation itself, once its owner freed it while it was held.
    parked: Option<Vec<u8>>,
}

/// start address → entry
static LIVE: Mutex<BTreeMap<usize, Entry>> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn live() -> std::sync::MutexGuard<'static, BTreeMap<usize, Entry>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records an allocation of `len` bytes at `start`.
pub fn track(start: *const u8, len: usize) {
    if !super::BUILT || len == 0 {
        return;
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    live().insert(
        start as usize,
        Entry {
            len,
            id,
            holds: 0,
            parked: None,
        },
    );
}

/// Frees `buf` (a tracked allocation) now, or when the writes in flight from
/// it have completed.
pub fn free_when_idle(buf: Vec<u8>) {
    if !super::BUILT || buf.capacity() == 0 {
        return;
    }
    let mut m = live();
    let key = buf.as_ptr() as usize;
    match m.get_mut(&key) {
        Some(e) if e.holds > 0 => e.parked = Some(buf),
        _ => {
            m.remove(&key);
            drop(m);
            drop(buf);
        }
    }
}

/// Whether writes from the allocation at `start` are in flight.
pub fn busy(start: *const u8) -> bool {
    super::BUILT && live().get(&(start as usize)).is_some_and(|e| e.holds > 0)
}

/// The live allocation holding all of `[addr, addr+len)`: (start, length, id).
pub fn find(addr: usize, len: usize) -> Option<(usize, usize, u64)> {
    let m = live();
    let (&start, e) = m.range(..=addr).next_back()?;
    (e.parked.is_none() && addr + len <= start + e.len).then_some((start, e.len, e.id))
}

/// Whether allocation `id` is still live (not freed, or parked until its
/// writes complete).
pub fn is_live(id: u64) -> bool {
    live().values().any(|e| e.id == id)
}

/// Whether allocation `id` has writes in flight.
pub fn is_held(id: u64) -> bool {
    live().values().any(|e| e.id == id && e.holds > 0)
}

/// Marks one more write in flight from the allocation at `start` with `id`
/// (the caller borrows it, so it is live). False if it is not.
pub fn hold(start: usize, id: u64) -> bool {
    match live().get_mut(&start) {
        Some(e) if e.id == id => {
            e.holds += 1;
            true
        }
        _ => false,
    }
}

/// Ends one [`hold`]: the device has read the bytes (or the queue pair is
/// gone). A parked allocation is freed with its last hold.
pub fn release(start: usize, id: u64) {
    let mut m = live();
    let Some(e) = m.get_mut(&start).filter(|e| e.id == id) else {
        return;
    };
    e.holds = e.holds.saturating_sub(1);
    if e.holds == 0 && e.parked.is_some() {
        let freed = m.remove(&start);
        drop(m);
        drop(freed);
    }
}

#[cfg(all(test, feature = "rdma"))]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_found_only_inside_a_live_allocation_with_its_id() {
        let a = vec![0u8; 4096];
        let p = a.as_ptr();
        track(p, a.capacity());
        let (start, len, id) = find(p as usize + 100, 200).expect("inside");
        assert_eq!((start, len), (p as usize, 4096));
        assert!(is_live(id));
        assert!(find(p as usize + 4000, 200).is_none(), "runs past the end");
        let b = a.clone();
        free_when_idle(a);
        assert!(find(p as usize + 100, 200).is_none());
        assert!(!is_live(id));
        let q = b.as_ptr();
        track(q, b.capacity());
        let (_, _, id2) = find(q as usize, 1).expect("again");
        assert_ne!(id, id2, "every allocation gets a new id");
        free_when_idle(b);
    }

    /// A buffer freed while writes from it are in flight stays allocated,
    /// busy and unfindable until the last write completes.
    #[test]
    fn a_held_allocation_is_freed_only_with_its_last_hold() {
        let a = vec![7u8; 8192];
        let p = a.as_ptr();
        track(p, a.capacity());
        let (start, _, id) = find(p as usize, 10).expect("tracked");
        assert!(!busy(p));
        assert!(hold(start, id) && hold(start, id));
        assert!(busy(p) && is_held(id));
        assert!(!hold(start, id + 1_000_000), "another allocation's id");
        free_when_idle(a);
        assert!(is_live(id), "parked while two writes are in flight");
        assert!(
            find(p as usize, 10).is_none(),
            "a freed buffer is not sent from"
        );
        release(start, id);
        assert!(is_live(id) && busy(p));
        release(start, id);
        assert!(!is_live(id) && !busy(p), "freed with the last hold");
        release(start, id);
    }
}
