//! Reusable chunk buffers: frames are read into and sent from pooled buffers,
//! so a steady stream of chunks does not allocate. A frame may also arrive as
//! bytes borrowed from the transport itself (an RDMA receive ring), read where
//! the peer wrote them ([`PooledBuf::borrowed`]).

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::transport::rdma::stable;

#[derive(Debug)]
struct PoolInner {
    free: Mutex<Vec<Vec<u8>>>,
    keep: usize,
    allocations: AtomicUsize,
}

/// A pool of byte buffers. Cloning shares the pool.
#[derive(Debug, Clone)]
pub struct BufferPool {
    inner: Arc<PoolInner>,
}

impl BufferPool {
    /// A pool that keeps at most `keep` idle buffers.
    pub fn new(keep: usize) -> Self {
        BufferPool {
            inner: Arc::new(PoolInner {
                free: Mutex::new(Vec::new()),
                keep,
                allocations: AtomicUsize::new(0),
            }),
        }
    }

    /// A buffer of exactly `len` bytes (contents unspecified), reused when possible.
    pub fn take(&self, len: usize) -> PooledBuf {
        let reused = self.inner.free.lock().ok().and_then(|mut f| {
            // Prefer a buffer that is already big enough, and never one
            // the RDMA transport is still sending from.
            let i = f
                .iter()
                .rposition(|b| b.capacity() >= len && !stable::busy(b.as_ptr()))?;
            Some(f.swap_remove(i))
        });
        let mut buf = match reused {
            Some(b) => b,
            None => {
                self.inner.allocations.fetch_add(1, Ordering::Relaxed);
                let b = Vec::with_capacity(len);
                // Kept mapped until freed: the RDMA transport registers it once.
                stable::track(b.as_ptr(), b.capacity());
                b
            }
        };
        // Only bytes never used before are zeroed: a reused buffer keeps its
        // length, and the view is cut to `len` ([`PooledBuf`]), so taking a
        // chunk-sized buffer after a shorter use costs no memset.
        if buf.len() < len {
            buf.resize(len, 0);
        }
        PooledBuf {
            buf,
            len,
            pool: Some(self.inner.clone()),
            borrowed: None,
        }
    }

    /// How many buffers this pool has allocated since it was made.
    pub fn allocations(&self) -> usize {
        self.inner.allocations.load(Ordering::Relaxed)
    }
}

/// Bytes a transport lends to a received frame where they arrived (an RDMA
/// receive ring): the transport does not reuse them until this is dropped.
pub trait Borrowed: Send + std::fmt::Debug {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
}

/// A buffer that returns to its pool when dropped: the first `len` bytes of
/// `buf` (which may be longer, from an earlier use); or bytes borrowed from a
/// transport, given back when dropped.
#[derive(Debug)]
pub struct PooledBuf {
    buf: Vec<u8>,
    len: usize,
    pool: Option<Arc<PoolInner>>,
    borrowed: Option<Box<dyn Borrowed>>,
}

impl PooledBuf {
    /// A buffer that belongs to no pool.
    pub fn unpooled(buf: Vec<u8>) -> Self {
        PooledBuf {
            len: buf.len(),
            buf,
            pool: None,
            borrowed: None,
        }
    }

    /// A received payload read in place from the transport's memory.
    pub fn borrowed(b: Box<dyn Borrowed>) -> Self {
        PooledBuf {
            len: b.bytes().len(),
            buf: Vec::new(),
            pool: None,
            borrowed: Some(b),
        }
    }

    /// Whether the bytes are borrowed from a transport ([`PooledBuf::borrowed`]).
    pub fn is_borrowed(&self) -> bool {
        self.borrowed.is_some()
    }

    /// The same bytes, no longer borrowed: a payload about to be kept for
    /// later (a step or an operation not reached yet) is copied into a
    /// buffer of `pool`, so the transport gets its memory back now; a
    /// transport whose receive memory sat in such a stash could run out of
    /// room for the very bytes that would let the stash drain.
    pub fn detach(self, pool: &BufferPool) -> PooledBuf {
        if self.borrowed.is_none() {
            return self;
        }
        let mut own = pool.take(self.len());
        own.copy_from_slice(&self);
        DETACHED_BYTES.fetch_add(own.len() as u64, Ordering::Relaxed);
        own
    }
}

/// Received bytes copied out of a transport's memory because their frame
/// was kept for later ([`PooledBuf::detach`]): process-wide.
pub fn detached_bytes() -> u64 {
    DETACHED_BYTES.load(Ordering::Relaxed)
}

static DETACHED_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.borrowed {
            Some(b) => b.bytes(),
            None => &self.buf[..self.len],
        }
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.borrowed {
            Some(b) => b.bytes_mut(),
            None => &mut self.buf[..self.len],
        }
    }
}

/// Payload bytes queued straight from callers' own buffers (lent to the
/// engine by blocking calls), not copied into a pool buffer: process-wide,
/// every transport.
pub fn lent_bytes() -> u64 {
    LENT_BYTES.load(Ordering::Relaxed)
}

pub(crate) static LENT_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A frame's payload on its way to a connection's writer: a pooled copy, or
/// bytes of the caller's own buffer sent as they are
/// ([`LentChunk`](crate::engine::lent::LentChunk)).
#[derive(Debug)]
pub(crate) enum Payload {
    Pooled(PooledBuf),
    Lent(crate::engine::lent::LentChunk),
}

impl Payload {
    /// As a pooled buffer (a lent chunk is copied).
    pub fn into_pooled(self) -> PooledBuf {
        match self {
            Payload::Pooled(p) => p,
            Payload::Lent(l) => PooledBuf::unpooled(l.to_vec()),
        }
    }
}

impl From<PooledBuf> for Payload {
    fn from(p: PooledBuf) -> Self {
        Payload::Pooled(p)
    }
}

impl Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Payload::Pooled(p) => p,
            Payload::Lent(l) => l,
        }
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            if let Ok(mut free) = pool.free.lock() {
                if free.len() < pool.keep {
                    free.push(std::mem::take(&mut self.buf));
                    return;
                }
            }
            stable::free_when_idle(std::mem::take(&mut self.buf));
        }
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        if let Ok(free) = self.free.get_mut() {
            free.drain(..).for_each(stable::free_when_idle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes a test transport lends; `back` counts those given back.
    #[derive(Debug)]
    struct Lent(Vec<u8>, Arc<AtomicUsize>);

    impl Borrowed for Lent {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
        fn bytes_mut(&mut self) -> &mut [u8] {
            &mut self.0
        }
    }

    impl Drop for Lent {
        fn drop(&mut self) {
            self.1.fetch_add(self.0.len(), Ordering::SeqCst);
        }
    }

    /// A borrowed payload reads and writes the transport's bytes, and goes
    /// back to the transport when dropped, or at once when detached (the
    /// copy keeps the bytes).
    #[test]
    fn a_borrowed_payload_goes_back_when_dropped_or_detached() {
        let back = Arc::new(AtomicUsize::new(0));
        let mut b = PooledBuf::borrowed(Box::new(Lent(vec![1, 2, 3], back.clone())));
        assert!(b.is_borrowed());
        b[1] = 9;
        assert_eq!(&b[..], &[1, 9, 3]);
        drop(b);
        assert_eq!(back.load(Ordering::SeqCst), 3);

        let pool = BufferPool::new(2);
        let b = PooledBuf::borrowed(Box::new(Lent(vec![4; 1000], back.clone())));
        let before = detached_bytes();
        let kept = b.detach(&pool);
        assert_eq!(back.load(Ordering::SeqCst), 1003, "given back on detach");
        assert!(!kept.is_borrowed());
        assert_eq!(&kept[..], &[4u8; 1000][..]);
        assert!(detached_bytes() - before >= 1000);
        let own = pool.take(10);
        assert_eq!(
            own.detach(&pool).len(),
            10,
            "an owned buffer stays as it is"
        );
    }

    #[test]
    fn steady_state_reuses_buffers() {
        let pool = BufferPool::new(4);
        for _ in 0..100 {
            let a = pool.take(1024);
            let b = pool.take(512);
            assert_eq!((a.len(), b.len()), (1024, 512));
        }
        assert_eq!(pool.allocations(), 2);
    }

    /// A buffer reused for a longer chunk after a shorter one shows exactly
    /// the length asked for, and a longer one is not allocated anew.
    #[test]
    fn reuse_after_a_shorter_use_keeps_the_length_asked_for() {
        let pool = BufferPool::new(1);
        drop(pool.take(1024));
        let mut short = pool.take(10);
        assert_eq!(short.len(), 10);
        short.fill(7);
        drop(short);
        let long = pool.take(1000);
        assert_eq!(long.len(), 1000);
        assert_eq!(&long[..10], &[7u8; 10]);
        assert_eq!(pool.allocations(), 1);
        drop(long);
        let bigger = pool.take(2048);
        assert_eq!(bigger.len(), 2048);
        assert!(bigger[1024..].iter().all(|&b| b == 0));
    }

    /// A buffer the RDMA transport still sends from is not handed out again,
    /// and one the pool frees meanwhile lives until the send completes.
    #[cfg(feature = "rdma")]
    #[test]
    fn a_buffer_in_flight_is_neither_reused_nor_freed() {
        let pool = BufferPool::new(1);
        let a = pool.take(4096);
        let stable::Found { start, id, .. } =
            stable::find(a.as_ptr() as usize, 1).expect("tracked");
        assert!(stable::hold(start, id));
        drop(a);
        let b = pool.take(4096);
        assert_ne!(b.as_ptr() as usize, start, "the held buffer is not reused");
        assert_eq!(pool.allocations(), 2);
        drop(b);
        stable::release(start, id);
        let c = pool.take(4096);
        assert_eq!(c.as_ptr() as usize, start, "released, it is reused");

        let keep_none = BufferPool::new(0);
        let d = keep_none.take(4096);
        let stable::Found { start, id, .. } =
            stable::find(d.as_ptr() as usize, 1).expect("tracked");
        assert!(stable::hold(start, id));
        drop(d);
        assert!(stable::is_live(id), "freed while held: kept until released");
        stable::release(start, id);
        assert!(!stable::is_live(id), "freed with its release");
    }

    #[test]
    fn keeps_at_most_keep_idle_buffers() {
        let pool = BufferPool::new(1);
        drop((pool.take(8), pool.take(8), pool.take(8)));
        assert_eq!(pool.inner.free.lock().map(|f| f.len()).unwrap_or(0), 1);
    }
}
