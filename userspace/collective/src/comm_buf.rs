//! [`CommBuf`]: a buffer the RDMA transport registers once, so blocking
//! calls on it send straight from it (like NCCL's `ncclMemAlloc` +
//! `ncclCommRegister`). Other memory is sent from as it is over TCP and
//! shared memory, but over RDMA it is copied into the library's registered
//! pool first: registering a caller's memory on every call costs about what
//! the copy does (docs/BENCHMARKS.md), and a registration kept across calls
//! could outlive the memory (freed and reallocated at the same address, a
//! pinned registration would send the old pages).

use std::ops::{Deref, DerefMut};

use crate::dtype::Element;
use crate::transport::rdma::stable;

/// A `Vec<T>` recorded as registrable send memory for its whole life: the
/// RDMA transport registers it on its first send and reuses that
/// registration for every later call on it (no `ibv_reg_mr` per call), and
/// a blocking call on it returns only once the device has read its bytes.
/// Without the `rdma` feature it is a plain `Vec<T>`.
pub struct CommBuf<T: Element> {
    v: Vec<T>,
}

impl<T: Element> CommBuf<T> {
    /// `len` zeroed elements.
    pub fn zeroed(len: usize) -> Self {
        Self::from_vec(vec![T::zeroed(); len])
    }

    /// Takes `v` over (its capacity is never reallocated while it is a
    /// `CommBuf`).
    pub fn from_vec(v: Vec<T>) -> Self {
        stable::track_caller(v.as_ptr().cast(), std::mem::size_of_val(v.as_slice()));
        CommBuf { v }
    }

    /// Gives the `Vec` back (no write from it is in flight: every call on
    /// it waited for its writes).
    pub fn into_vec(mut self) -> Vec<T> {
        stable::untrack(self.v.as_ptr() as usize);
        std::mem::take(&mut self.v)
    }
}

impl<T: Element> Deref for CommBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.v
    }
}

impl<T: Element> DerefMut for CommBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.v
    }
}

impl<T: Element> Drop for CommBuf<T> {
    fn drop(&mut self) {
        if self.v.capacity() > 0 {
            let start = self.v.as_ptr() as usize;
            stable::drop_when_idle(start, Box::new(std::mem::take(&mut self.v)));
        }
    }
}

impl<T: Element> std::fmt::Debug for CommBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CommBuf<{:?}>({} elements)", T::DTYPE, self.v.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comm_buf_is_its_vec_and_gives_it_back() {
        let mut b = CommBuf::from_vec(vec![1.5f32; 1000]);
        b[3] = 2.0;
        assert_eq!(b.len(), 1000);
        let found = stable::covering(b.as_ptr() as usize + 8, 64).is_some();
        assert_eq!(
            found,
            crate::transport::rdma::BUILT,
            "recorded where RDMA is built"
        );
        let p = b.as_ptr() as usize;
        let v = b.into_vec();
        assert_eq!((v[3], v[4]), (2.0, 1.5));
        assert!(
            stable::covering(p, 1).is_none(),
            "forgotten once given back"
        );
        let z = CommBuf::<i32>::zeroed(10);
        assert!(z.iter().all(|x| *x == 0));
    }
}
