//! Per-CPU, per-class ingress counters.

use bpf_maps::counters::IngressCounters;

use crate::maps::{INGRESS_COUNTERS, REASON_COUNTERS};

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

/// Counts one frame under `REASON_*` `reason`, and a drop when `dropped`.
#[inline(always)]
pub fn count_reason(reason: u32, bytes: u64, dropped: bool) {
    if let Some(c) = REASON_COUNTERS.get_ptr_mut(reason) {
        // SAFETY: as in `count_ingress`.
        unsafe { bump(c, bytes, dropped) }
    }
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
