//! WAN path steering: the maps of the TC ingress program `causeway_tc_steer`
//! (`ebpf/src/steer.rs`), which a gateway runs on its LAN-facing interface.
//!
//! A frame whose flow (protocol, addresses, ports) is in [`MAP_PATH_FLOWS`]
//! gets `skb->mark` = its path's mark from [`MAP_PATH_TABLE`], when that path
//! is up; the routing rule `fwmark <mark> lookup <table>` then sends it over
//! that path. The mark is set at ingress because the route of a forwarded
//! frame is chosen right after ingress: a mark set at egress comes too late.
//! Re-routing a flow is one map update (its entry, or its path's
//! [`PATH_UP`] flag for every flow on it at once); the connection never
//! notices. Frames of no listed flow, and flows of a path that is down, keep
//! the mark they came with and take the routing table's default.
//!
//! Counted per CPU in [`MAP_PATH_COUNT`]: frames and bytes steered onto each
//! path, and in [`PATH_UNSTEERED_SLOT`] every other IP frame.

/// Paths a gateway can steer to (path ids `0..MAX_PATHS`).
pub const MAX_PATHS: u32 = 16;
/// Counter slot of frames not steered (no flow entry, path down or unknown,
/// not IP, a later fragment: it carries no ports).
pub const PATH_UNSTEERED_SLOT: u32 = MAX_PATHS;
/// Slots of [`MAP_PATH_COUNT`].
pub const PATH_COUNTER_SLOTS: u32 = MAX_PATHS + 1;
/// Flow entries a gateway holds.
pub const PATH_FLOW_ENTRIES: u32 = 65_536;

/// Hash of [`FlowKey`] → path id (`u32`).
pub const MAP_PATH_FLOWS: &str = "CW_PATH_FLOWS";
/// Array of [`PathEntry`], indexed by path id.
pub const MAP_PATH_TABLE: &str = "CW_PATH_TABLE";
/// Per-CPU array of [`PathCounters`], indexed by path id, plus
/// [`PATH_UNSTEERED_SLOT`].
pub const MAP_PATH_COUNT: &str = "CW_PATH_COUNT";

/// [`FlowKey::family`] of an IPv4 flow.
pub const FAMILY_V4: u8 = 4;
/// [`FlowKey::family`] of an IPv6 flow.
pub const FAMILY_V6: u8 = 6;

/// One direction of a flow, as the program reads it from a frame. Addresses
/// are the bytes on the wire (an IPv4 address in the first 4 bytes, the rest
/// zero); ports in host byte order (0 for protocols without ports).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub src_port: u16,
    pub dst_port: u16,
    /// IP protocol (IPv6: the upper-layer Next Header).
    pub proto: u8,
    /// [`FAMILY_V4`] or [`FAMILY_V6`].
    pub family: u8,
    /// Always zero.
    pub pad: [u8; 2],
}

crate::assert_no_padding!(FlowKey, [u8; 16], [u8; 16], u16, u16, u8, u8, [u8; 2]);
crate::impl_pod!(FlowKey);

impl FlowKey {
    /// The key of an IPv4 flow.
    pub const fn v4(src: [u8; 4], dst: [u8; 4], proto: u8, src_port: u16, dst_port: u16) -> Self {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        let mut i = 0;
        while i < 4 {
            s[i] = src[i];
            d[i] = dst[i];
            i += 1;
        }
        Self {
            src: s,
            dst: d,
            src_port,
            dst_port,
            proto,
            family: FAMILY_V4,
            pad: [0; 2],
        }
    }

    /// The key of an IPv6 flow.
    pub const fn v6(src: [u8; 16], dst: [u8; 16], proto: u8, src_port: u16, dst_port: u16) -> Self {
        Self {
            src,
            dst,
            src_port,
            dst_port,
            proto,
            family: FAMILY_V6,
            pad: [0; 2],
        }
    }
}

/// [`PathEntry::flags`]: the path is up; its flows are steered onto it.
pub const PATH_UP: u32 = 1 << 0;

/// One path of the gateway.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PathEntry {
    /// The `skb->mark` that selects the path's routing table.
    pub mark: u32,
    /// `PATH_*` bits.
    pub flags: u32,
}

crate::assert_no_padding!(PathEntry, u32, u32);
crate::impl_pod!(PathEntry);

/// Frames and bytes (whole frame, from the Ethernet header) on one CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PathCounters {
    pub packets: u64,
    pub bytes: u64,
}

crate::assert_no_padding!(PathCounters, u64, u64);
crate::impl_pod!(PathCounters);
