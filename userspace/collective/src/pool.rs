//! Reusable chunk buffers: frames are read into and sent from pooled buffers,
//! so a steady stream of chunks does not allocate.

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
        }
    }

    /// How many buffers this pool has allocated since it was made.
    pub fn allocations(&self) -> usize {
        self.inner.allocations.load(Ordering::Relaxed)
    }
}

/// A buffer that returns to its pool when dropped: the first `len` bytes of
/// `buf` (which may be longer, from an earlier use).
#[derive(Debug)]
pub struct PooledBuf {
    buf: Vec<u8>,
    len: usize,
    pool: Option<Arc<PoolInner>>,
}

impl PooledBuf {
    /// A buffer that belongs to no pool.
    pub fn unpooled(buf: Vec<u8>) -> Self {
        PooledBuf {
            len: buf.len(),
            buf,
            pool: None,
        }
    }
}

impl Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
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
