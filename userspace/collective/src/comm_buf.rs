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

/// Memory something else owns (a framework's tensor, through its DLPack
/// capsule), recorded like a [`CommBuf`]'s for as long as this lives: the
/// RDMA transport registers it on its first send and blocking calls on
/// slices of it send straight from it, as NCCL's `ncclCommRegister` does.
/// Dropping it keeps `owner` until no write from the memory is in flight.
/// Without the `rdma` feature it records nothing.
pub struct Registered {
    start: usize,
    len: usize,
    owner: Option<Box<dyn std::any::Any + Send>>,
}

impl Registered {
    /// Records `[ptr, ptr + len)`, kept allocated by `owner`; `None` when
    /// some of it is recorded already (registered twice, or a `CommBuf`).
    ///
    /// # Safety
    /// The bytes stay allocated at this address, and are not released to be
    /// reused, for as long as `owner` lives (e.g. `owner` holds a reference
    /// on the tensor's storage). Otherwise a later call on other memory at
    /// the same address would be sent from the old, still pinned pages.
    #[allow(unsafe_code)]
    pub unsafe fn new(
        ptr: *const u8,
        len: usize,
        owner: Box<dyn std::any::Any + Send>,
    ) -> Option<Self> {
        if !stable::track_caller_alone(ptr, len) {
            return None;
        }
        Some(Registered {
            start: ptr as usize,
            len,
            owner: Some(owner),
        })
    }

    /// The recorded bytes: (start address, length).
    pub fn range(&self) -> (usize, usize) {
        (self.start, self.len)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            stable::drop_when_idle(self.start, owner);
        }
    }
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registered({} bytes at {:#x})", self.len, self.start)
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

    /// Memory registered through its owner is recorded while the
    /// registration lives, and the owner is released with it.
    #[test]
    #[allow(unsafe_code)]
    fn registered_memory_is_recorded_until_dropped() {
        let owner = std::sync::Arc::new(vec![7u8; 4096]);
        let (p, len) = (owner.as_ptr(), owner.len());
        // SAFETY: the Vec lives in `owner` (an Arc clone moves into the
        // registration), unchanged until both are dropped.
        let r = unsafe { Registered::new(p, len, Box::new(owner.clone())) }
            .expect("not recorded before");
        assert_eq!(r.range(), (p as usize, 4096));
        // SAFETY: as above.
        let again = unsafe { Registered::new(p.wrapping_add(10), 10, Box::new(())) };
        assert_eq!(
            again.is_none(),
            crate::transport::rdma::BUILT,
            "memory is registered once"
        );
        assert_eq!(
            stable::covering(p as usize + 100, 200).is_some(),
            crate::transport::rdma::BUILT
        );
        assert_eq!(std::sync::Arc::strong_count(&owner), 2);
        drop(r);
        assert!(stable::covering(p as usize, 1).is_none());
        assert_eq!(std::sync::Arc::strong_count(&owner), 1, "owner released");
    }

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
