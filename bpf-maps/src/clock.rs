//! Clock synchronisation: the UDP probe layout that the eBPF programs stamp,
//! the stamping configuration, and the per-peer estimates that the agent
//! publishes for the collective library.
//!
//! # Probe (UDP payload, every integer big-endian)
//! ```text
//!   0  magic    u32  "CWCK"
//!   4  version  u8   1
//!   5  kind     u8   1 request, 2 response, 3 follow-up
//!   6  flags    u16  FLAG_*
//!   8  seq      u32
//!  12  sender   u32  the sending host's id
//!  16  nonce    u64  chosen by the requester, echoed by the responder
//!  24  stamps   3 sets × 4 slots (t1, t2, t3, t4) × u64 ns
//!               set 0 kernel (eBPF), 1 SO_TIMESTAMPING, 2 userspace
//! 120  auth     [u8; 16] authentication tag if FLAG_AUTH, else zero
//! 136  end
//! ```
//!
//! # Authentication (`FLAG_AUTH`)
//! Between two agents that share a key for their pair, every probe carries
//! `FLAG_AUTH` and a tag: HMAC-SHA256 (key 32 bytes), truncated to its
//! leftmost 16 bytes, over all 136 bytes with three things zeroed: the auth
//! field, and the kernel stamp slots that the eBPF programs may write into
//! a probe of that kind in flight together with their `FLAG_KERNEL_T*`
//! bits. Who writes what:
//! ```text
//!   kind       sender fixes (covered)               kernel writes (excluded)
//!   request    all but kernel t1, t2                kernel t1 (sender's TC egress),
//!                                                   kernel t2 (receiver's XDP), bits 0-1
//!   response   all but kernel t3, t4; including     kernel t3 (responder's TC egress),
//!              the kernel t1, t2 (and bits 0-1)     kernel t4 (requester's XDP), bits 2-3
//!              the responder copies from the request
//!   follow-up  everything                           nothing (never stamped)
//! ```
//! So the magic, version, kind, the other flags (FLAG_AUTH itself too),
//! sequence, sender, nonce, the SO_TIMESTAMPING and userspace stamps are
//! all covered. Of the kernel stamps, t2 (request) and t4 (response) are
//! written by the receiving host's own kernel (never on the wire), t1 and
//! t2 come back covered in the response; only the egress stamps t1 (in the
//! request, before the responder covers it) and t3 cross the wire
//! uncovered: the kernel cannot compute a tag. For a keyed peer the
//! requester therefore uses a kernel sample only when those two agree with
//! covered or local stamps (`Requester::check_kernel_egress_stamps`), which
//! keeps a rewrite inside the covered userspace interval. Replay windows
//! and the key-file format are in `causeway_core::clock::auth`.
//!
//! # Kernel stamping
//! The XDP ingress and TC egress programs stamp IPv4 UDP probes to or from
//! [`ClockStampConfig::port`] whose UDP checksum is zero (the sender opts in
//! with `SO_NO_CHECK`): writing into such a datagram needs no checksum
//! update, and the receiving stack never verifies it. The kernel slot is
//! chosen by direction and kind: egress request → t1, ingress request → t2,
//! egress response → t3, ingress response → t4; the matching
//! `FLAG_KERNEL_T*` bit is set. Probes with a checksum (IPv6, where a zero
//! UDP checksum is not allowed) are left alone and fall back to
//! SO_TIMESTAMPING.
//!
//! Time is `bpf_ktime_get_tai_ns()` (CLOCK_TAI, Linux 6.1+) passed through
//! the host's synthetic transform ([`ClockStampConfig`]) so that every
//! stamp of a host, kernel or userspace, is on the same timescale.

/// Default UDP port of the clock probes.
pub const CLOCK_PORT: u16 = 7339;

pub const PROBE_MAGIC: u32 = 0x4357_434B;
pub const PROBE_VERSION: u8 = 1;
pub const PROBE_KIND_REQUEST: u8 = 1;
pub const PROBE_KIND_RESPONSE: u8 = 2;
pub const PROBE_KIND_FOLLOW_UP: u8 = 3;

pub const PROBE_OFF_MAGIC: usize = 0;
pub const PROBE_OFF_VERSION: usize = 4;
pub const PROBE_OFF_KIND: usize = 5;
pub const PROBE_OFF_FLAGS: usize = 6;
pub const PROBE_OFF_SEQ: usize = 8;
pub const PROBE_OFF_SENDER: usize = 12;
pub const PROBE_OFF_NONCE: usize = 16;
pub const PROBE_OFF_STAMPS: usize = 24;
pub const PROBE_OFF_AUTH: usize = 120;
pub const PROBE_AUTH_LEN: usize = 16;
/// Length of a probe (UDP payload).
pub const PROBE_LEN: usize = 136;

/// Stamp sets, in slot order.
pub const STAMP_SET_KERNEL: usize = 0;
pub const STAMP_SET_SOFTWARE: usize = 1;
pub const STAMP_SET_USER: usize = 2;
pub const STAMP_SETS: usize = 3;
/// Slots t1..t4 of a set.
pub const STAMP_SLOTS: usize = 4;

/// Byte offset of stamp `slot` (0 = t1) of `set` in the probe.
pub const fn stamp_offset(set: usize, slot: usize) -> usize {
    PROBE_OFF_STAMPS + (set * STAMP_SLOTS + slot) * 8
}

/// Set by the kernel when it wrote kernel slot t1 (bit 0) .. t4 (bit 3).
pub const FLAG_KERNEL_T1: u16 = 1 << 0;
/// A follow-up carrying the responder's SO_TIMESTAMPING t3 will be sent.
pub const FLAG_TWO_STEP: u16 = 1 << 4;
/// The auth field holds a tag (see "Authentication" above).
pub const FLAG_AUTH: u16 = 1 << 5;
/// Flags a version-1 decoder accepts.
pub const FLAGS_KNOWN_V1: u16 = 0x000f | FLAG_TWO_STEP | FLAG_AUTH;

/// Single-entry array: what the programs stamp and how.
pub const MAP_CLOCK_CONFIG: &str = "CW_CLK_CFG";
/// Per-CPU array of [`ClockStampCounters`], one entry.
pub const MAP_CLOCK_COUNTERS: &str = "CW_CLK_COUNT";
/// Hash map [`PeerClockKey`] → [`PeerClock`], written by the agent.
pub const MAP_CLOCK_PEERS: &str = "CW_CLK_PEERS";
/// Peers in [`MAP_CLOCK_PEERS`].
pub const MAX_CLOCK_PEERS: u32 = 256;

/// Stamping configuration ([`MAP_CLOCK_CONFIG`]). All zero: stamping off.
///
/// A stamp is `t + offset_ns + (t − epoch_ns) · drift_ppb / 10⁹` with `t`
/// the kernel's CLOCK_TAI. The transform is the identity unless a test
/// configures a synthetic clock error (userspace applies the same one to
/// its own stamps).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClockStampConfig {
    /// UDP port of the probes; 0 disables kernel stamping.
    pub port: u32,
    /// Magnitude of the drift in parts per 10⁹.
    pub drift_ppb_abs: u32,
    /// 1 if the drift is negative.
    pub drift_negative: u32,
    pub _reserved: u32,
    /// Signed offset, ns.
    pub offset_ns: i64,
    /// CLOCK_TAI time at which the drift term is zero.
    pub epoch_ns: u64,
}

/// What the programs stamped (per CPU, summed by userspace).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClockStampCounters {
    /// Probes stamped at XDP ingress.
    pub rx_stamped: u64,
    /// Probes stamped at TC egress.
    pub tx_stamped: u64,
    /// Probes on the clock port left unstamped because they carry a UDP
    /// checksum, are IPv6, fragmented or truncated.
    pub skipped: u64,
}

/// Key of [`MAP_CLOCK_PEERS`]: the peer's address, IPv4 as `::ffff:a.b.c.d`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PeerClockKey {
    pub addr: [u8; 16],
}

impl From<core::net::IpAddr> for PeerClockKey {
    /// IPv4 addresses are stored IPv4-mapped (`::ffff:a.b.c.d`).
    fn from(addr: core::net::IpAddr) -> Self {
        let v6 = match addr {
            core::net::IpAddr::V4(a) => a.to_ipv6_mapped(),
            core::net::IpAddr::V6(a) => a,
        };
        PeerClockKey { addr: v6.octets() }
    }
}

/// Timestamp source of a published estimate ([`PeerClock::source`]).
pub const CLOCK_SOURCE_KERNEL: u32 = 1;
pub const CLOCK_SOURCE_SO_TIMESTAMPING: u32 = 2;
pub const CLOCK_SOURCE_USERSPACE: u32 = 3;

/// The agent's current estimate of one peer's clock, CLOCK_TAI ns: the
/// peer's clock reads `local + offset_ns + drift_ppb · (local − ref_ns) / 10⁹`.
/// Readers should check `generation` before and after copying the value
/// (the agent writes the whole value with one map update, so a lookup sees
/// either the old or the new value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PeerClock {
    /// Local CLOCK_TAI time the estimate refers to.
    pub ref_ns: u64,
    pub offset_ns: i64,
    pub drift_ppb: i64,
    /// |true offset − estimate| at `ref_ns`, ns.
    pub error_bound_ns: u64,
    /// Smallest round-trip delay in the estimator's window, ns.
    pub min_rtt_ns: u64,
    /// Incremented on every update.
    pub generation: u64,
    /// `CLOCK_SOURCE_*`.
    pub source: u32,
    /// Samples the estimate used.
    pub samples: u32,
    /// How fast the bound grows away from `ref_ns`: at local time `t` the
    /// error is at most `error_bound_ns + drift_bound_ppb · |t − ref_ns| / 10⁹`.
    pub drift_bound_ppb: u64,
}

crate::assert_no_padding!(ClockStampConfig, u32, u32, u32, u32, i64, u64);
crate::assert_no_padding!(ClockStampCounters, u64, u64, u64);
crate::assert_no_padding!(PeerClockKey, [u8; 16]);
crate::assert_no_padding!(PeerClock, u64, i64, i64, u64, u64, u64, u32, u32, u64);
crate::impl_pod!(
    ClockStampConfig,
    ClockStampCounters,
    PeerClockKey,
    PeerClock
);
