//! The TC egress shaper's maps: per-class shaping configuration, the shared
//! token-bucket state and per-CPU egress counters.
//!
//! Each class has a GCRA token bucket (arithmetic in [`crate::gcra`], run
//! by `ebpf/src/shaper.rs` and by the userspace model
//! `userspace/causeway/src/shaper/bucket.rs`): one `u64` "theoretical
//! arrival time" per class in [`MAP_EGRESS_BUCKETS`], updated with
//! compare-and-swap.
//!
//! Atomic replacement: [`MAP_EGRESS_CLASSES`] holds [`SHAPER_SETS`] complete
//! configurations side by side (`set * MAX_CLASSES + class`); userspace
//! writes the inactive one in full, then flips
//! [`ShaperControl::active_set`] with one 4-byte write.

use crate::classifier::MAX_CLASSES;

/// Complete shaping configurations held side by side.
pub const SHAPER_SETS: u32 = 2;
/// Entries in [`MAP_EGRESS_CLASSES`].
pub const SHAPER_CLASS_SLOTS: u32 = SHAPER_SETS * MAX_CLASSES;

/// Fixed-point shift of [`ShaperClassConfig::ns_per_byte_q16`].
pub const NS_PER_BYTE_SHIFT: u32 = 16;
/// Frames are charged at most this many bytes (GSO frames stay below it);
/// keeps `len * ns_per_byte_q16` inside a `u64` at the slowest rate.
pub const MAX_CHARGED_LEN: u32 = 1 << 20;
/// The burst (bytes) of the qdisc class that Causeway puts behind a class
/// shaped at `rate_bits` with a `burst_bytes` burst: HTB's `burst` at the
/// class rate and its `cburst` at the ceiling. The class's own burst capped
/// at 10 ms of the rate (HTB bursts let a class run ahead of its rate; the
/// program's bucket is what polices), at least 1 ms and ten full frames
/// (HTB's default of one timer tick starves fast classes).
///
/// The TC program's bucket counts frames as they enter the qdisc, which
/// sends up to this much ahead of the rate; so the bucket tolerates this
/// plus the class's burst (see `ShaperClassConfig::burst_ns`).
pub const fn qdisc_burst_bytes(rate_bits: u64, burst_bytes: u64) -> u64 {
    let at_10ms = rate_bits / 8 / 100;
    let mut b = if burst_bytes < at_10ms {
        burst_bytes
    } else {
        at_10ms
    };
    if b < rate_bits / 8 / 1000 {
        b = rate_bits / 8 / 1000;
    }
    if b < 15_140 {
        b = 15_140;
    }
    b
}

/// Compare-and-swap attempts before a frame is treated as over the limit.
pub const MAX_CAS_ATTEMPTS: u32 = 8;

/// [`ShaperClassConfig::flags`]: the token bucket is enforced.
pub const SHAPE_FLAG_BUCKET: u32 = 1 << 0;
/// [`ShaperClassConfig::flags`]: the DSCP is rewritten to `dscp`.
pub const SHAPE_FLAG_DSCP: u32 = 1 << 1;
/// [`ShaperClassConfig::flags`]: `skb->priority` is set to `priority`.
pub const SHAPE_FLAG_PRIORITY: u32 = 1 << 2;
/// [`ShaperClassConfig::flags`]: with [`SHAPE_FLAG_BUCKET`], the class is
/// paced (EDT) rather than policed: each frame gets a departure time in
/// `skb->tstamp` (`gcra::pace`) that the `fq` qdisc holds it to, and
/// `burst_ns` is the horizon beyond which frames are dropped.
pub const SHAPE_FLAG_EDT: u32 = 1 << 3;

/// Over-limit actions ([`ShaperClassConfig::over_action`]).
pub const OVER_DROP: u32 = 0;
/// Set ECN CE on ECT frames; frames that are not ECT pass unchanged (the
/// qdisc enforces the ceiling by queueing them).
pub const OVER_ECN_MARK: u32 = 1;
/// Send the frame as class `demote_class` (its priority and DSCP).
pub const OVER_DEMOTE: u32 = 2;

/// Map names (≤ 15 bytes).
pub const MAP_EGRESS_CONTROL: &str = "CW_EG_CONTROL";
pub const MAP_EGRESS_CLASSES: &str = "CW_EG_CLASSES";
pub const MAP_EGRESS_BUCKETS: &str = "CW_EG_BUCKETS";
pub const MAP_EGRESS_COUNTERS: &str = "CW_EG_COUNT";

/// How one class is shaped and marked on egress.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ShaperClassConfig {
    /// Configured rate, bytes per second (informational; the kernel uses
    /// `ns_per_byte_q16`).
    pub rate_bytes_per_sec: u64,
    /// Nanoseconds of transmission time per byte at the rate, in 48.16
    /// fixed point: a frame of `len` bytes costs `len * q16 >> 16` ns.
    pub ns_per_byte_q16: u64,
    /// Bucket tolerance, ns: the transmission time of `burst_bytes` plus
    /// [`qdisc_burst_bytes`]. The program sits in front of the qdisc and
    /// sees frames as they arrive there; the qdisc itself may send its own
    /// burst ahead of the rate, so arrivals run ahead of the rate by that
    /// burst plus whatever backlog waits in the qdisc. `burst_bytes` is the
    /// backlog tolerated above the qdisc's burst before the over-limit
    /// action applies. With [`SHAPE_FLAG_EDT`]: the horizon, ns; a frame
    /// whose departure time would be this far or further beyond its
    /// earliest one is dropped.
    pub burst_ns: u64,
    /// Configured burst, bytes (informational).
    pub burst_bytes: u64,
    /// `SHAPE_FLAG_*` bits.
    pub flags: u32,
    /// `OVER_*` action for frames over the limit.
    pub over_action: u32,
    /// Class taken by demoted frames (`OVER_DEMOTE`).
    pub demote_class: u32,
    /// DSCP written when `SHAPE_FLAG_DSCP` is set (0..=63).
    pub dscp: u32,
    /// `skb->priority` written when `SHAPE_FLAG_PRIORITY` is set: an HTB
    /// class id, `major << 16 | minor`.
    pub priority: u32,
    pub _reserved: u32,
}

/// One class's token bucket, shared by all CPUs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BucketState {
    /// GCRA theoretical arrival time, `bpf_ktime_get_ns` nanoseconds.
    pub tat_ns: u64,
}

/// Single-entry array: which configuration set is live.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ShaperControl {
    /// Set (0 or 1) that frames are shaped with.
    pub active_set: u32,
    /// Non-zero once userspace has written a configuration; until then
    /// the program only classifies and counts.
    pub enabled: u32,
    /// Incremented by userspace on every change.
    pub generation: u64,
    /// `CLOCK_MONOTONIC` ns of the last flip: userspace does not rewrite
    /// the now-inactive set until frames that read the old `active_set`
    /// are done (a grace period).
    pub flipped_at_ns: u64,
}

/// What the TC egress program counted for one class on one CPU. Indexed
/// like the ingress counters: class, or `UNCLASSIFIED_SLOT`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EgressCounters {
    /// Frames that left in this class (conforming, marked or demoted-in).
    pub sent_packets: u64,
    pub sent_bytes: u64,
    /// Frames found over this class's limit (whatever the action).
    pub shaped: u64,
    /// Over-limit frames dropped.
    pub dropped: u64,
    /// Over-limit frames that left with ECN CE set.
    pub marked: u64,
    /// Over-limit frames sent as the demotion class.
    pub demoted: u64,
}

crate::assert_no_padding!(
    ShaperClassConfig,
    u64,
    u64,
    u64,
    u64,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32
);
crate::assert_no_padding!(BucketState, u64);
crate::assert_no_padding!(ShaperControl, u32, u32, u64, u64);
crate::assert_no_padding!(EgressCounters, u64, u64, u64, u64, u64, u64);
crate::impl_pod!(
    ShaperClassConfig,
    BucketState,
    ShaperControl,
    EgressCounters
);
