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
//!
//! A caller's own buffer, lent to the engine for one blocking call
//! ([`lend`]), is recorded too, with a fresh id per call: its pages may
//! change under the same address once the call returns (the caller may free
//! it), so a registration of it serves that call only, like an allocation's
//! serves that allocation. The call returns only once no write from it is in
//! flight ([`unlend`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

struct Entry {
    len: usize,
    id: u64,
    /// Writes in flight from this allocation.
    holds: u32,
    /// The allocation itself, once its owner freed it while it was held.
    parked: Option<Vec<u8>>,
    /// A caller's buffer lent for one call, not a pool allocation.
    lent: bool,
}

/// Where a send's bytes lie ([`find`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub start: usize,
    pub len: usize,
    pub id: u64,
    /// A lent caller buffer, not a pool allocation.
    pub lent: bool,
}

/// start address → entry
static LIVE: Mutex<BTreeMap<usize, Entry>> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Notified whenever an entry's last hold is released.
static IDLE: Condvar = Condvar::new();

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
            lent: false,
        },
    );
}

/// Records `len` bytes at `start`, a caller's buffer lent to the engine for
/// one call; its id, or `None` when nothing is recorded (no RDMA in this
/// build, nothing to lend, or the range is already known).
pub fn lend(start: *const u8, len: usize) -> Option<u64> {
    if !super::BUILT || len == 0 {
        return None;
    }
    let mut m = live();
    let key = start as usize;
    let overlaps = m
        .range(..key.saturating_add(len))
        .next_back()
        .is_some_and(|(&s, e)| s + e.len > key);
    if overlaps {
        return None;
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    m.insert(
        key,
        Entry {
            len,
            id,
            holds: 0,
            parked: None,
            lent: true,
        },
    );
    Some(id)
}

/// Ends the lend [`lend`] returned `id` for, once no write from it is in
/// flight, waiting up to `within`. False if writes were still in flight
/// then (the entry is dropped anyway: the caller's call must return).
pub fn unlend(start: *const u8, id: u64, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let key = start as usize;
    let mut m = live();
    loop {
        let holds = match m.get(&key) {
            Some(e) if e.id == id => e.holds,
            _ => return true,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if holds == 0 || left.is_zero() {
            m.remove(&key);
            return holds == 0;
        }
        m = IDLE
            .wait_timeout(m, left)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
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

/// The live allocation or lent buffer holding all of `[addr, addr+len)`.
pub fn find(addr: usize, len: usize) -> Option<Found> {
    let m = live();
    let (&start, e) = m.range(..=addr).next_back()?;
    (e.parked.is_none() && addr + len <= start + e.len).then_some(Found {
        start,
        len: e.len,
        id: e.id,
        lent: e.lent,
    })
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
    if e.holds == 0 {
        IDLE.notify_all();
    }
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
        let Found { start, len, id, .. } = find(p as usize + 100, 200).expect("inside");
        assert_eq!((start, len), (p as usize, 4096));
        assert!(is_live(id));
        assert!(find(p as usize + 4000, 200).is_none(), "runs past the end");
        let b = a.clone();
        free_when_idle(a);
        assert!(find(p as usize + 100, 200).is_none());
        assert!(!is_live(id));
        let q = b.as_ptr();
        track(q, b.capacity());
        let id2 = find(q as usize, 1).expect("again").id;
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
        let Found { start, id, .. } = find(p as usize, 10).expect("tracked");
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

    /// A lent buffer is found as lent, held like an allocation, and its lend
    /// ends only once its last write completed (or the wait runs out).
    #[test]
    fn a_lent_buffer_returns_only_after_its_last_write() {
        let buf = vec![3u8; 4096];
        let p = buf.as_ptr();
        let id = lend(p, buf.len()).expect("lent");
        assert!(lend(p, 10).is_none(), "already known");
        let f = find(p as usize + 8, 64).expect("found");
        assert!(f.lent && f.id == id && f.start == p as usize);
        assert!(hold(f.start, id));
        assert!(is_held(id) && busy(p));
        let addr = p as usize;
        let released = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            release(addr, id);
        });
        let t = Instant::now();
        assert!(unlend(p, id, Duration::from_secs(5)), "released in time");
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "waited for the write"
        );
        released.join().expect("releasing thread");
        assert!(find(p as usize, 1).is_none(), "gone once returned");
        let id = lend(p, buf.len()).expect("lent again");
        assert!(hold(p as usize, id));
        assert!(
            !unlend(p, id, Duration::from_millis(20)),
            "a write never completed"
        );
        assert!(find(p as usize, 1).is_none());
    }
}
