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
use crate::error::Rank;
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
    /// Each chunk still on its way: its range of the buffer and the rank it
    /// goes to.
    out: Vec<(Range<usize>, Rank)>,
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
    /// Blocks until nothing uses the memory any more. Chunks not written
    /// for `within` have their connections closed (their peers are not
    /// taking the bytes), which drops them. Returns the connections used.
    fn wait_all(&self, within: Duration) -> Vec<Arc<dyn Closer>> {
        let mut u = self.lock();
        let mut closed = false;
        while u.count > 0 {
            let before = u.count;
            let (g, waited) = self
                .cv
                .wait_timeout(u, within)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            u = g;
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
                u = self.lock();
            }
        }
        std::mem::take(&mut u.links)
    }
    /// A chunk over `range` is no longer read: one user fewer, and the
    /// engine may be waiting to write there.
    fn chunk_done(&self, range: &Range<usize>) {
        let mut u = self.lock();
        if let Some(i) = u.out.iter().position(|(r, _)| r == range) {
            u.out.swap_remove(i);
        }
        u.count = u.count.saturating_sub(1);
        self.cv.notify_all();
    }
}

/// A `&mut [T]` lent to the engine thread; tells its [`Loan`] when dropped.
pub(crate) struct Lent<T> {
    ptr: *mut T,
    len: usize,
    returned: Arc<Returned>,
    _t: PhantomData<T>,
}

impl<T> Lent<T> {
    /// `len` elements at `ptr`, which their owner keeps valid and does not
    /// touch until this `Lent` and every chunk of it are gone (it waits on
    /// the returned users).
    fn new(ptr: *mut T, len: usize, registered: bool) -> Self {
        let returned = Arc::new(Returned {
            registered,
            ..Returned::default()
        });
        returned.add(&[]);
        Lent {
            ptr,
            len,
            returned,
            _t: PhantomData,
        }
    }
}

// SAFETY: `Lent` stands for a `&mut [T]` moved to another thread, which is
// `Send` when `T: Send` (every `Element` is). The memory stays valid and
// unaliased for the `Lent`'s whole life: the `Loan` or `Owned` that created
// it keeps it and waits, even while unwinding, until the `Lent` is dropped.
#[allow(unsafe_code)]
unsafe impl<T: Element> Send for Lent<T> {}

impl<T: Element> WorkBuf for Lent<T> {
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `ptr..ptr+len` is the slice the `Loan` borrows mutably (or
        // the `Owned` vector) and does not touch until this `Lent` is dropped
        // (see `Loan::drop`); `&mut self` makes this the only view of it.
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

    /// Bytes `range` of the lent buffer as a chunk to send as they are to
    /// `peer`; `links`: the connections it may go through (closed if it is
    /// not written in time). The engine must not write `range` while the
    /// chunk lives ([`Lender::wait_unread`]).
    pub fn chunk(
        &self,
        range: Range<usize>,
        peer: Rank,
        links: &[Arc<dyn Closer>],
    ) -> Option<LentChunk> {
        if range.start > range.end || range.end > self.len {
            return None;
        }
        self.returned.add(links);
        self.returned.lock().out.push((range.clone(), peer));
        crate::pool::LENT_BYTES.fetch_add(range.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Some(LentChunk {
            // SAFETY: `range` lies inside the lent slice (checked above),
            // which stays allocated while the `Loan` waits for this chunk.
            #[allow(unsafe_code)]
            ptr: unsafe { self.ptr.add(range.start) },
            range,
            returned: self.returned.clone(),
        })
    }

    /// Waits until no chunk over any byte of `range` is still on its way,
    /// for at most `within`; then the engine may write there. `Err(peer)`
    /// names the rank a chunk still goes to after that.
    pub fn wait_unread(&self, range: &Range<usize>, within: Duration) -> Result<(), Rank> {
        let r = &self.returned;
        let deadline = std::time::Instant::now() + within;
        let mut u = r.lock();
        loop {
            let Some(peer) = u
                .out
                .iter()
                .find(|(o, _)| o.start < range.end && range.start < o.end)
                .map(|&(_, peer)| peer)
            else {
                return Ok(());
            };
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(peer);
            }
            u =
                r.cv.wait_timeout(u, left)
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .0;
        }
    }
}

impl<T> Drop for Lent<T> {
    fn drop(&mut self) {
        self.returned.done();
    }
}

/// A range of a lent buffer sent as it is, without a copy: the caller's call
/// does not return while it exists ([`Loan::drop`] waits for it). The engine
/// makes one only for bytes its plan does not write again during the
/// operation (`SendChunk::settled`), or writes only with the answer of the
/// rank the chunk goes to (`SendChunk::answered`), and then only once the
/// chunk is gone ([`Lender::wait_unread`]): they do not change while a
/// connection reads them.
pub(crate) struct LentChunk {
    ptr: *const u8,
    /// Where in the lent buffer (its length is the chunk's).
    range: Range<usize>,
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
            std::slice::from_raw_parts(self.ptr, self.range.len())
        }
    }
}

impl Drop for LentChunk {
    fn drop(&mut self) {
        self.returned.chunk_done(&self.range);
    }
}

impl std::fmt::Debug for LentChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LentChunk({} bytes at {:p})", self.range.len(), self.ptr)
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
        let lent = Lent::new(buf.as_mut_ptr(), buf.len(), stable.is_some());
        (
            Loan {
                returned: lent.returned.clone(),
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
        let links = self.returned.wait_all(self.within);
        if let Some((start, id)) = self.stable {
            if !stable::wait_idle(start, id, self.within) {
                links.iter().for_each(|l| l.close());
                tracing::warn!("RDMA writes from a returned buffer did not complete in time");
            }
        }
    }
}

/// The working buffer of an asynchronous call (`Communicator::allreduce_async`
/// and the like): a vector the engine owns during the call, whose chunks it
/// sends without a copy like a [`Lent`] buffer's. The caller gets the vector
/// back ([`Owned::into_vec`]), and it is freed (on drop), only once every
/// chunk of it has been written.
pub(crate) struct Owned<T> {
    /// The vector's memory as the engine works on it (`None` once given
    /// back): one of the users [`Owned::release`] waits for.
    lent: Option<Lent<T>>,
    /// Not touched while `lent` lives.
    vec: Vec<T>,
    /// As [`Loan`]'s: how long writes from it may go on after the call.
    within: Duration,
}

impl<T: Element> Owned<T> {
    /// Not registered memory: RDMA links get copies.
    pub fn new(mut vec: Vec<T>, within: Duration) -> Self {
        Owned {
            lent: Some(Lent::new(vec.as_mut_ptr(), vec.len(), false)),
            vec,
            within,
        }
    }

    /// The vector, once no chunk of it is on its way.
    pub fn into_vec(mut self) -> Vec<T> {
        self.release();
        std::mem::take(&mut self.vec)
    }
}

impl<T> Owned<T> {
    /// Lets go of the memory and waits until no chunk of it is on its way.
    fn release(&mut self) {
        if let Some(lent) = self.lent.take() {
            let returned = lent.returned.clone();
            drop(lent);
            returned.wait_all(self.within);
        }
    }
}

impl<T> Drop for Owned<T> {
    /// The memory the chunks point into is freed right after.
    fn drop(&mut self) {
        self.release();
    }
}

impl<T: Element> WorkBuf for Owned<T> {
    fn bytes(&mut self) -> &mut [u8] {
        match &mut self.lent {
            Some(l) => l.bytes(),
            None => &mut [],
        }
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
    fn lender(&self) -> Option<Lender> {
        self.lent.as_ref()?.lender()
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
            assert!(
                lender.chunk(reversed, 1, &links).is_none(),
                "a reversed range"
            );
            assert!(
                lender.chunk(0..(64 << 10) + 1, 1, &links).is_none(),
                "past the end"
            );
            let chunk = lender.chunk(4096..8192, 1, &links).expect("chunk");
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
            .chunk(0..100, 1, &links)
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

    /// The engine writes into a range only once no chunk over it is on its
    /// way: at once beside one, after it over it, and an error naming the
    /// chunk's peer when it stays out too long.
    #[test]
    fn writing_over_a_chunk_on_its_way_waits_for_it() {
        let mut buf = vec![0u8; 1 << 20];
        let (loan, lent) = Loan::new(&mut buf, Duration::from_secs(5));
        let lender = lent.lender().expect("lender");
        let chunk = lender.chunk(4096..8192, 3, &[]).expect("chunk");
        let kept = lender.chunk(65536..65540, 2, &[]).expect("chunk");
        let t = Instant::now();
        assert_eq!(
            lender.wait_unread(&(0..4096), Duration::from_secs(5)),
            Ok(())
        );
        assert_eq!(
            lender.wait_unread(&(8192..9000), Duration::from_secs(5)),
            Ok(())
        );
        assert!(
            t.elapsed() < Duration::from_millis(50),
            "beside it: no wait"
        );
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(chunk);
        });
        assert_eq!(
            lender.wait_unread(&(8000..8001), Duration::from_secs(5)),
            Ok(())
        );
        assert!(
            t.elapsed() >= Duration::from_millis(90),
            "{:?}",
            t.elapsed()
        );
        writer.join().expect("writer");
        let t = Instant::now();
        assert_eq!(
            lender.wait_unread(&(65539..70000), Duration::from_millis(60)),
            Err(2)
        );
        assert!(t.elapsed() >= Duration::from_millis(55));
        drop(kept);
        assert_eq!(lender.wait_unread(&(0..1 << 20), Duration::ZERO), Ok(()));
        drop(lender);
        drop(lent);
        drop(loan);
    }
}
