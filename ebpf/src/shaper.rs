//! The egress shaper's maps and per-class GCRA token bucket.
//!
//! The arithmetic is `bpf_maps::gcra`, shared with the userspace model
//! `userspace/causeway/src/shaper/bucket.rs`, which documents the algorithm
//! and why the compare-and-swap loop below is not racy: the decision is a
//! pure function of the `tat` value loaded, and it is published only if `tat`
//! still holds that value, so concurrent CPUs behave as some serial order.

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::map,
    maps::{Array, PerCpuArray},
};
use bpf_maps::{
    classifier::MAX_CLASSES,
    counters::COUNTER_SLOTS,
    gcra::{decide, pace, Decision, Pacing},
    shaper::{
        BucketState, EgressCounters, ShaperClassConfig, ShaperControl, MAX_CAS_ATTEMPTS,
        SHAPER_CLASS_SLOTS,
    },
};

/// Single entry: the live configuration set.
#[map(name = "CW_EG_CONTROL")]
pub static EG_CONTROL: Array<ShaperControl> = Array::with_max_entries(1, 0);

/// Indexed by `set * MAX_CLASSES + class`.
#[map(name = "CW_EG_CLASSES")]
pub static EG_CLASSES: Array<ShaperClassConfig> = Array::with_max_entries(SHAPER_CLASS_SLOTS, 0);

/// One bucket per class, shared by every CPU (updated by CAS).
#[map(name = "CW_EG_BUCKETS")]
pub static EG_BUCKETS: Array<BucketState> = Array::with_max_entries(MAX_CLASSES, 0);

/// Per-CPU counters by class, plus `UNCLASSIFIED_SLOT`.
#[map(name = "CW_EG_COUNT")]
pub static EG_COUNTERS: PerCpuArray<EgressCounters> =
    PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);

/// The live configuration of `class`, or `None` while shaping is off.
#[inline(always)]
pub fn class_config(class: u32) -> Option<&'static ShaperClassConfig> {
    let control = EG_CONTROL.get(0)?;
    if control.enabled == 0 || class >= MAX_CLASSES {
        return None;
    }
    EG_CLASSES.get((control.active_set & 1) * MAX_CLASSES + class)
}

/// Whether a `len`-byte frame of `class` conforms to its bucket now; takes
/// its tokens when it does (model: `SharedBucket::admit`).
#[inline(always)]
pub fn admit(class: u32, len: u32, cfg: &ShaperClassConfig) -> bool {
    let Some(bucket) = EG_BUCKETS.get_ptr_mut(class) else {
        return true;
    };
    let tat = bucket as *mut u64;
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    for _ in 0..MAX_CAS_ATTEMPTS {
        // SAFETY: `tat` points at the 8-byte aligned first field of a live
        // array map value; a volatile load is a single 64-bit BPF load.
        let seen = unsafe { core::ptr::read_volatile(tat) };
        let Decision::Conform { new_tat } =
            decide(seen, now, len, cfg.ns_per_byte_q16, cfg.burst_ns)
        else {
            return false;
        };
        // SAFETY: as above; the intrinsic compiles to BPF_CMPXCHG, which
        // the kernel executes atomically across CPUs on map values.
        let (_, swapped) = unsafe {
            core::intrinsics::atomic_cxchg::<
                u64,
                { core::intrinsics::AtomicOrdering::SeqCst },
                { core::intrinsics::AtomicOrdering::SeqCst },
            >(tat, seen, new_tat)
        };
        if swapped {
            return true;
        }
    }
    false
}

/// The departure time of a `len`-byte frame of a paced (EDT) class whose
/// own departure time is `earliest` (`skb->tstamp`), taking its place in
/// the class's schedule; `None` when it would leave beyond the horizon
/// (model: `causeway_core::shaper::bucket::SharedBucket::pace`). Same
/// compare-and-swap loop as [`admit`].
#[inline(always)]
pub fn pace_frame(class: u32, len: u32, earliest: u64, cfg: &ShaperClassConfig) -> Option<u64> {
    let bucket = EG_BUCKETS.get_ptr_mut(class)?;
    let tat = bucket as *mut u64;
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    for _ in 0..MAX_CAS_ATTEMPTS {
        // SAFETY: as in `admit`.
        let seen = unsafe { core::ptr::read_volatile(tat) };
        let Pacing::Send { tstamp, new_tat } =
            pace(seen, now, earliest, len, cfg.ns_per_byte_q16, cfg.burst_ns)
        else {
            return None;
        };
        // SAFETY: as in `admit`.
        let (_, swapped) = unsafe {
            core::intrinsics::atomic_cxchg::<
                u64,
                { core::intrinsics::AtomicOrdering::SeqCst },
                { core::intrinsics::AtomicOrdering::SeqCst },
            >(tat, seen, new_tat)
        };
        if swapped {
            return Some(tstamp);
        }
    }
    None
}

/// What happened to a frame, for the counters.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Sent,
    Dropped,
    Marked,
    /// Over the limit, not ECN-capable: sent unchanged, counted as shaped.
    Unmarked,
    Demoted,
}

/// Counts one frame of `class` (`sent_in` is the class it left in, which
/// differs for demoted frames).
#[inline(always)]
pub fn count(class: u32, sent_in: u32, bytes: u64, outcome: Outcome) {
    if outcome != Outcome::Sent {
        if let Some(c) = EG_COUNTERS.get_ptr_mut(class) {
            // SAFETY: per-CPU slot, only this CPU writes it while the
            // program runs (TC runs with preemption disabled).
            unsafe {
                (*c).shaped += 1;
                match outcome {
                    Outcome::Dropped => (*c).dropped += 1,
                    Outcome::Marked => (*c).marked += 1,
                    Outcome::Demoted => (*c).demoted += 1,
                    Outcome::Sent | Outcome::Unmarked => {}
                }
            }
        }
    }
    if outcome != Outcome::Dropped {
        if let Some(c) = EG_COUNTERS.get_ptr_mut(sent_in) {
            // SAFETY: as above.
            unsafe {
                (*c).sent_packets += 1;
                (*c).sent_bytes += bytes;
            }
        }
    }
}
