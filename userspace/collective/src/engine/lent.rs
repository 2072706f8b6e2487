//! The caller's own slice as the engine's working buffer, for the blocking
//! calls: no copy in, no copy out. The engine thread works on the memory of a
//! `&mut [T]` the calling thread lent it; the calling thread does not return
//! (so the borrow does not end) before the engine has let go of it.

use std::any::Any;
use std::marker::PhantomData;
use std::ops::{Deref, Range};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::WorkBuf;
use crate::dtype::Element;
use crate::transport::rdma::stable;
use crate::transport::Closer;

/// What still uses the lent memory: the [`Lent`] itself and every
/// [`LentChunk`] on its way to a peer, and the connections those go through.
#[derive(Default)]
struct Returned {
    state: Mutex<Users>,
    cv: Condvar,
    /// The lent buffer lies in a [`crate::CommBuf`] (found once, by the
    /// `Loan`, which waits for that allocation's RDMA writes).
    registered: bool,
}

#[derive(Default)]
struct Users {
    count: usize,
    /// The connections lent chunks were queued on (closed if their writes
    /// do not end in time).
    links: Vec<Arc<dyn Closer>>,
}

impl Returned {
    fn lock(&self) -> std::sync::MutexGuard<'_, Users> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
    /// One more user of the memory, queued on `links`.
    fn add(&self, links: &[Arc<dyn Closer>]) {
        let mut u = self.lock();
        u.count += 1;
        for l in links {
            if !u.links.iter().any(|k| Arc::ptr_eq(k, l)) {
                u.links.push(l.clone());
            }
        }
    }
    fn done(&self) {
        let mut u = self.lock();
        u.count = u.count.saturating_sub(1);
        if u.count == 0 {
            self.cv.notify_all();
        }
    }
}

/// A `&mut [T]` lent to the engine thread; tells its [`Loan`] when dropped.
pub(crate) struct Lent<T> {
    ptr: *mut T,
    len: usize,
    returned: Arc<Returned>,
    _t: PhantomData<T>,
}

// SAFETY: `Lent` stands for a `&mut [T]` moved to another thread, which is
// `Send` when `T: Send` (every `Element` is). The memory stays valid and
// unaliased for the `Lent`'s whole life: the `Loan` that created it holds the
// borrow and waits, even while unwinding, until the `Lent` is dropped.
#[allow(unsafe_code)]
unsafe impl<T: Element> Send for Lent<T> {}

impl<T: Element> WorkBuf for Lent<T> {
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `ptr..ptr+len` is the slice the `Loan` borrows mutably and
        // does not touch until this `Lent` is dropped (see `Loan::drop`); `&mut
        // self` makes this the only view of it.
        #[allow(unsafe_code)]
        let s = unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) };
        bytemuck::cast_slice_mut(s)
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
    fn lender(&self) -> Option<Lender> {
        Some(Lender {
            ptr: self.ptr.cast::<u8>(),
            len: self.len * std::mem::size_of::<T>(),
            returned: self.returned.clone(),
        })
    }
}

/// Hands out [`LentChunk`]s of a lent buffer (the engine's, while it holds
/// the [`Lent`]).
pub(crate) struct Lender {
    ptr: *const u8,
    len: usize,
    returned: Arc<Returned>,
}

impl Lender {
    /// Whether the lent buffer lies in memory the RDMA transport registers
    /// once (a [`crate::CommBuf`]): elsewhere it would register the
    /// caller's memory on every call, so RDMA links get a copy instead.
    pub fn registered(&self) -> bool {
        self.returned.registered
    }

    /// Bytes `range` of the lent buffer as a chunk to send as they are;
    /// `links`: the connections it may go through (closed if it is not
    /// written in time). The engine must not write `range` while the chunk
    /// lives.
    pub fn chunk(&self, range: Range<usize>, links: &[Arc<dyn Closer>]) -> Option<LentChunk> {
        if range.start > range.end || range.end > self.len {
            return None;
        }
        self.returned.add(links);
        crate::pool::LENT_BYTES.fetch_add(range.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Some(LentChunk {
            // SAFETY: `range` lies inside the lent slice (checked above),
            // which stays allocated while the `Loan` waits for this chunk.
            #[allow(unsafe_code)]
            ptr: unsafe { self.ptr.add(range.start) },
            len: range.len(),
            returned: self.returned.clone(),
        })
    }
}

impl<T> Drop for Lent<T> {
    fn drop(&mut self) {
        self.returned.done();
    }
}

/// A range of a lent buffer sent as it is, without a copy: the caller's call
/// does not return while it exists ([`Loan::drop`] waits for it). The engine
/// makes one only for bytes its plan never writes again during the operation
/// (`SendChunk::settled`), so they do not change while a connection reads
/// them.
pub(crate) struct LentChunk {
    ptr: *const u8,
    len: usize,
    returned: Arc<Returned>,
}

// SAFETY: a `LentChunk` stands for a shared view of bytes of the lent slice
// that nothing writes while it exists (see above) and that stay valid until
// it is dropped (the `Loan` waits for that); reading them from another
// thread is sound.
#[allow(unsafe_code)]
unsafe impl Send for LentChunk {}

impl Deref for LentChunk {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: see `unsafe impl Send for LentChunk`: valid and unchanged
        // for the chunk's whole life.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.ptr, self.len)
        }
    }
}

impl Drop for LentChunk {
    fn drop(&mut self) {
        self.returned.done();
    }
}

impl std::fmt::Debug for LentChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LentChunk({} bytes at {:p})", self.len, self.ptr)
    }
}

/// The calling side of a lent slice: holds the `&mut` borrow; dropping it
/// waits until the engine has dropped the [`Lent`], every [`LentChunk`] of
/// it has been written, and (over RDMA) every write from it has completed.
pub(crate) struct Loan<'a, T> {
    returned: Arc<Returned>,
    /// How long writes from the buffer may go on after the operation before
    /// their connections are closed.
    within: Duration,
    /// The registered allocation ([`crate::CommBuf`]) the buffer lies in
    /// (start, id), whose RDMA writes must complete before the call returns.
    stable: Option<(usize, u64)>,
    _buf: PhantomData<&'a mut [T]>,
}

impl<'a, T: Element> Loan<'a, T> {
    /// Lends `buf` to the engine: the [`Lent`] goes with the job; the `Loan`
    /// must live until the job's reply has been received (it waits on drop).
    /// Writes still reading the buffer `within` after that have their
    /// connections closed (their peer is not taking the bytes).
    pub fn new(buf: &'a mut [T], within: Duration) -> (Self, Lent<T>) {
        let stable = stable::covering(buf.as_ptr() as usize, std::mem::size_of_val(buf));
        let returned = Arc::new(Returned {
            registered: stable.is_some(),
            ..Returned::default()
        });
        returned.add(&[]);
        let lent = Lent {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            returned: returned.clone(),
            _t: PhantomData,
        };
        (
            Loan {
                returned,
                within,
                stable,
                _buf: PhantomData,
            },
            lent,
        )
    }
}

impl<T> Drop for Loan<'_, T> {
    /// Blocks until the engine has dropped the `Lent` and every chunk of it
    /// has been written: only then may the caller's borrow end. The engine
    /// drops the `Lent` when the job is done (the reply carries it back and
    /// the handle drops it) or when the job is lost (a closed communicator
    /// drops the job); a writer drops a chunk once written (or failed), and
    /// an RDMA connection releases it in `stable` when its write completes.
    fn drop(&mut self) {
        let r = &self.returned;
        let mut u = r.lock();
        let mut closed = false;
        while u.count > 0 {
            let before = u.count;
            let (g, waited) =
                r.cv.wait_timeout(u, self.within)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            u = g;
            // No chunk written for `within`: their peers are not taking them.
            if waited.timed_out() && u.count == before && !closed {
                tracing::warn!(
                    waiting = u.count,
                    "sends from a returned buffer made no progress in time; closing their connections"
                );
                // Closed without the lock: a connection may drop its chunks
                // (and so take the lock) while it closes.
                let links = u.links.clone();
                drop(u);
                links.iter().for_each(|l| l.close());
                closed = true;
                u = r.lock();
            }
        }
        let links = std::mem::take(&mut u.links);
        drop(u);
        if let Some((start, id)) = self.stable {
            if !stable::wait_idle(start, id, self.within) {
                links.iter().for_each(|l| l.close());
                tracing::warn!("RDMA writes from a returned buffer did not complete in time");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn the_loan_ends_only_after_the_engine_let_go() {
        let mut buf = vec![1i32; 4];
        let t = Instant::now();
        {
            let (loan, mut lent) = Loan::new(&mut buf, Duration::from_secs(5));
            let engine = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                lent.bytes()[0] = 7; // works in the caller's memory
                drop(lent);
            });
            drop(loan); // blocks until the engine thread dropped `lent`
            assert!(t.elapsed() >= Duration::from_millis(100));
            engine.join().expect("engine thread");
        }
        let mut want = 1i32.to_ne_bytes();
        want[0] = 7;
        assert_eq!(buf, [i32::from_ne_bytes(want), 1, 1, 1]);
    }

    /// A connection that closes when told to, dropping what its writer
    /// still holds (as a real writer does when its socket is shut).
    struct StuckLink {
        held: Mutex<Option<LentChunk>>,
        closed: std::sync::atomic::AtomicBool,
    }

    impl Closer for StuckLink {
        fn close(&self) {
            self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
            self.held.lock().expect("held").take();
        }
        fn finish(&self) {}
    }

    /// A chunk still queued when the call ends holds the caller until it is
    /// written; one that makes no progress for `within` has its connection
    /// closed, so the call returns (an error for the next one), never hangs.
    #[test]
    fn a_chunk_holds_the_call_until_written_or_its_link_is_closed() {
        let mut buf = vec![5u8; 64 << 10];
        let link = Arc::new(StuckLink {
            held: Mutex::new(None),
            closed: Default::default(),
        });
        let links: Vec<Arc<dyn Closer>> = vec![link.clone()];
        let t = Instant::now();
        {
            let (loan, lent) = Loan::new(&mut buf, Duration::from_millis(150));
            let lender = lent.lender().expect("a lent buffer lends");
            #[allow(clippy::reversed_empty_ranges)]
            let reversed = 10..5;
            assert!(lender.chunk(reversed, &links).is_none(), "a reversed range");
            assert!(
                lender.chunk(0..(64 << 10) + 1, &links).is_none(),
                "past the end"
            );
            let chunk = lender.chunk(4096..8192, &links).expect("chunk");
            assert_eq!((chunk.len(), chunk[0]), (4096, 5));
            *link.held.lock().expect("held") = Some(chunk);
            drop(lent);
            drop(loan); // waits for the chunk: closes the link after 150 ms
        }
        let waited = t.elapsed();
        assert!(link.closed.load(std::sync::atomic::Ordering::SeqCst));
        assert!(
            waited >= Duration::from_millis(140) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        // A chunk written in time: no close.
        let link2 = Arc::new(StuckLink {
            held: Mutex::new(None),
            closed: Default::default(),
        });
        let links: Vec<Arc<dyn Closer>> = vec![link2.clone()];
        let (loan, lent) = Loan::new(&mut buf, Duration::from_secs(5));
        let chunk = lent
            .lender()
            .expect("lender")
            .chunk(0..100, &links)
            .expect("chunk");
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(chunk);
        });
        drop(lent);
        drop(loan);
        writer.join().expect("writer");
        assert!(!link2.closed.load(std::sync::atomic::Ordering::SeqCst));
    }
}
