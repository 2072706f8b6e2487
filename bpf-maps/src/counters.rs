//! Per-CPU, per-class counters kept by the programs.

use crate::classifier::MAX_CLASSES;

/// Counter slot for frames that are not IP or too short to parse.
pub const UNCLASSIFIED_SLOT: u32 = MAX_CLASSES;
/// Slots in a counter map: one per class plus [`UNCLASSIFIED_SLOT`].
pub const COUNTER_SLOTS: u32 = MAX_CLASSES + 1;

/// Per-CPU array of [`IngressCounters`], indexed by class.
pub const MAP_INGRESS_COUNTERS: &str = "CW_IN_COUNT";

/// What the XDP classifier counted for one class on one CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct IngressCounters {
    /// Frames seen (passed or dropped).
    pub packets: u64,
    /// Bytes seen (whole frame, from the Ethernet header).
    pub bytes: u64,
    /// Frames dropped by a rule's verdict.
    pub drops: u64,
}

crate::assert_no_padding!(IngressCounters, u64, u64, u64);
crate::impl_pod!(IngressCounters);
