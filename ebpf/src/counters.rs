//! Per-CPU, per-class ingress counters.

use bpf_maps::counters::{IngressCounters, UNCLASSIFIED_SLOT};

use crate::maps::INGRESS_COUNTERS;

/// Counts one frame of `bytes` bytes in `slot` (a class or
/// `UNCLASSIFIED_SLOT`), and a drop when `dropped`.
#[inline(always)]
pub fn count_ingress(slot: u32, bytes: u64, dropped: bool) {
    if let Some(c) = INGRESS_COUNTERS.get_ptr_mut(slot) {
        // SAFETY: per-CPU slot: only this CPU touches it, and the program is
        // not re-entered on one CPU while it runs (XDP runs with BH disabled).
        unsafe { bump(c, bytes, dropped) }
    }
}

/// Counts a frame that was not parsed.
#[inline(always)]
pub fn count_unclassified(bytes: u64) {
    count_ingress(UNCLASSIFIED_SLOT, bytes, false);
}

#[inline(always)]
unsafe fn bump(c: *mut IngressCounters, bytes: u64, dropped: bool) {
    // SAFETY: the caller passes a valid map value pointer.
    unsafe {
        (*c).packets += 1;
        (*c).bytes += bytes;
        if dropped {
            (*c).drops += 1;
        }
    }
}
