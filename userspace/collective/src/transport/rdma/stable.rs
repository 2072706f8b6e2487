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
//! A caller's [`CommBuf`](crate::CommBuf) is recorded the same way
//! ([`track_caller`]): a blocking call on it sends straight from it with the
//! registration made on its first use, and returns only once no write from
//! it is in flight ([`wait_idle`]).

use std::any::Any;
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
    parked: Option<Box<dyn Any + Send>>,
    /// A caller's [`CommBuf`](crate::CommBuf), not a pool allocation.
    caller: bool,
}

/// Where a send's bytes lie ([`find`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub start: usize,
    pub len: usize,
    pub id: u64,
    /// A caller's [`CommBuf`](crate::CommBuf), not a pool allocation.
    pub caller: bool,
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
    insert(start, len, false);
}

/// Records a caller's [`CommBuf`](crate::CommBuf) of `len` bytes at `start`.
pub fn track_caller(start: *const u8, len: usize) {
    insert(start, len, true);
}

fn insert(start: *const u8, len: usize, caller: bool) {
    if !super::BUILT || len == 0 {
        return;
    }
    record(&mut live(), start as usize, len, caller);
}

/// Adds an entry for `len` bytes at `start` with a fresh id.
fn record(m: &mut BTreeMap<usize, Entry>, start: usize, len: usize, caller: bool) {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    m.insert(
        start,
        Entry {
            len,
            id,
            holds: 0,
            parked: None,
            caller,
        },
    );
}

/// Frees `buf` (a tracked allocation) now, or when the writes in flight from
/// it have completed.
pub fn free_when_idle(buf: Vec<u8>) {
    if buf.capacity() == 0 {
        return;
    }
    let start = buf.as_ptr() as usize;
    drop_when_idle(start, Box::new(buf));
}

/// Drops `owner` (what keeps the tracked allocation at `start` alive) now,
/// or when the writes in flight from it have completed.
pub fn drop_when_idle(start: usize, owner: Box<dyn Any + Send>) {
    if !super::BUILT {
        return;
    }
    let mut m = live();
    match m.get_mut(&start) {
        Some(e) if e.holds > 0 => e.parked = Some(owner),
        _ => {
            m.remove(&start);
            drop(m);
            drop(owner);
        }
    }
}

/// Records caller memory of `len` bytes at `start` unless a recorded
/// allocation shares a byte with it (then false, nothing recorded).
pub fn track_caller_alone(start: *const u8, len: usize) -> bool {
    if !super::BUILT || len == 0 {
        return true;
    }
    let (addr, end) = (start as usize, (start as usize).saturating_add(len));
    let mut m = live();
    let touches = m
        .range(..end)
        .next_back()
        .is_some_and(|(&s, e)| s + e.len > addr);
    if touches {
        return false;
    }
    record(&mut m, addr, len, true);
    true
}

/// The live allocation holding all of `[addr, addr+len)`: (start, id).
pub fn covering(addr: usize, len: usize) -> Option<(usize, u64)> {
    find(addr, len).map(|f| (f.start, f.id))
}

/// Waits until no write from allocation `id` at `start` is in flight, up to
/// `within`; false if writes were still in flight then.
pub fn wait_idle(start: usize, id: u64, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut m = live();
    loop {
        match m.get(&start) {
            Some(e) if e.id == id && e.holds > 0 => {}
            _ => return true,
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        m = IDLE
            .wait_timeout(m, left)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

/// Forgets the allocation at `start` (its owner takes the memory back; no
/// write from it may be in flight).
pub fn untrack(start: usize) {
    if super::BUILT {
        live().remove(&start);
    }
}

/// Whether writes from the allocation at `start` are in flight.
pub fn busy(start: *const u8) -> bool {
    super::BUILT && live().get(&(start as usize)).is_some_and(|e| e.holds > 0)
}

/// The live allocation or caller's `CommBuf` holding all of `[addr, addr+len)`.
pub fn find(addr: usize, len: usize) -> Option<Found> {
    let m = live();
    let (&start, e) = m.range(..=addr).next_back()?;
    (e.parked.is_none() && addr + len <= start + e.len).then_some(Found {
        start,
        len: e.len,
        id: e.id,
        caller: e.caller,
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

    /// A caller's buffer is found as such, held like an allocation, and
    /// waited for until its last write completed (or the wait runs out).
    #[test]
    fn a_caller_buffer_is_idle_only_after_its_last_write() {
        let buf = vec![3u8; 4096];
        let p = buf.as_ptr();
        track_caller(p, buf.len());
        let f = find(p as usize + 8, 64).expect("found");
        assert!(f.caller && f.start == p as usize);
        assert_eq!(covering(p as usize + 8, 64), Some((f.start, f.id)));
        assert!(hold(f.start, f.id));
        let (addr, id) = (f.start, f.id);
        let released = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            release(addr, id);
        });
        let t = Instant::now();
        assert!(
            wait_idle(addr, id, Duration::from_secs(5)),
            "released in time"
        );
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "waited for the write"
        );
        released.join().expect("releasing thread");
        assert!(hold(addr, id));
        assert!(
            !wait_idle(addr, id, Duration::from_millis(20)),
            "a write never completed"
        );
        release(addr, id);
        untrack(addr);
        assert!(find(addr, 1).is_none());
    }
}
