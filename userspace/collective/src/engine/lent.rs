//! The caller's own slice as the engine's working buffer, for the blocking
//! calls: no copy in, no copy out. The engine thread works on the memory of a
//! `&mut [T]` the calling thread lent it; the calling thread does not return
//! (so the borrow does not end) before the engine has let go of it.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::{Arc, Condvar, Mutex};

use super::WorkBuf;
use crate::dtype::Element;

/// Set once the engine has dropped the [`Lent`] buffer.
#[derive(Default)]
struct Returned {
    done: Mutex<bool>,
    cv: Condvar,
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
}

impl<T> Drop for Lent<T> {
    fn drop(&mut self) {
        let mut done = self
            .returned
            .done
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *done = true;
        self.returned.cv.notify_all();
    }
}

/// The calling side of a lent slice: holds the `&mut` borrow; dropping it
/// waits until the engine has dropped the [`Lent`].
pub(crate) struct Loan<'a, T> {
    returned: Arc<Returned>,
    _buf: PhantomData<&'a mut [T]>,
}

impl<'a, T: Element> Loan<'a, T> {
    /// Lends `buf` to the engine: the [`Lent`] goes with the job; the `Loan`
    /// must live until the job's reply has been received (it waits on drop).
    pub fn new(buf: &'a mut [T]) -> (Self, Lent<T>) {
        let returned = Arc::new(Returned::default());
        let lent = Lent {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            returned: returned.clone(),
            _t: PhantomData,
        };
        (
            Loan {
                returned,
                _buf: PhantomData,
            },
            lent,
        )
    }
}

impl<T> Drop for Loan<'_, T> {
    /// Blocks until the engine has dropped the `Lent`: only then may the
    /// caller's borrow end. The engine drops it when the job is done (the
    /// reply carries it back and the handle drops it) or when the job is lost
    /// (a closed communicator drops the job).
    fn drop(&mut self) {
        let mut done = self
            .returned
            .done
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        while !*done {
            done = self
                .returned
                .cv
                .wait(done)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
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
            let (loan, mut lent) = Loan::new(&mut buf);
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
}
