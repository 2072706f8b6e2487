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

/// Per-CPU array of [`IngressCounters`] indexed by `REASON_*`: frames the
/// parser could not fully read, and admission drops (`drops` counts those
/// dropped). Each frame is counted under at most one reason.
pub const MAP_REASON_COUNTERS: &str = "CW_REASONS";

/// Not IPv4/IPv6 (ARP, LLDP, ...): always passes.
pub const REASON_NOT_IP: u32 = 0;
/// Headers cut short (Ethernet, VLAN tag, IP header or its options).
pub const REASON_TRUNCATED: u32 = 1;
/// Impossible IP version, IHL or total length.
pub const REASON_BAD_HEADER: u32 = 2;
/// More VLAN tags than the parser reads (a third tag, `0x88a8` inside a tag).
pub const REASON_VLAN_DEPTH: u32 = 3;
/// The IP length field claims more bytes than the frame holds: classified
/// on the bytes present.
pub const REASON_LENGTH_OVERRUN: u32 = 4;
/// The IPv6 extension-header chain did not end within the parser's bound.
pub const REASON_EXT_CHAIN: u32 = 5;
/// TCP/UDP whose fixed header is not inside the frame: no ports.
pub const REASON_L4_TRUNCATED: u32 = 6;
/// Admission: a non-admitted source aimed at a protected port.
pub const REASON_ADM_SOURCE: u32 = 7;
/// Admission: a later fragment from a non-admitted source whose first
/// fragment was not seen going to an unprotected port.
pub const REASON_ADM_FRAGMENT: u32 = 8;
/// Admission: a non-admitted source whose destination port cannot be read.
pub const REASON_ADM_UNPROVEN: u32 = 9;
/// Slots of [`MAP_REASON_COUNTERS`].
pub const REASON_SLOTS: u32 = 10;
/// Names of the reasons, by index (for `causeway stats`).
pub const REASON_NAMES: [&str; REASON_SLOTS as usize] = [
    "not-ip",
    "truncated",
    "bad-header",
    "vlan-depth",
    "length-overrun",
    "ext-chain",
    "l4-truncated",
    "adm-source",
    "adm-fragment",
    "adm-unproven",
];
