//! Kernel timestamps for clock-sync probes (layout and rules in
//! `bpf_maps::clock`).
//!
//! * [`stamp_xdp_ingress`] — called by the XDP ingress program for every
//!   parsed frame: stamps t2 into arriving requests and t4 into arriving
//!   responses.
//! * [`stamp_tc_egress`] — called by the TC egress program for every parsed
//!   frame: stamps t1 into leaving requests and t3 into leaving responses.
//!
//! Only IPv4 UDP probes to or from the configured port, unfragmented, with
//! the whole probe in the linear data and a zero UDP checksum are stamped
//! (a zero checksum means "none" for IPv4, so writing the stamp needs no
//! checksum update and the receiving stack verifies nothing; the sender
//! opts in with `SO_NO_CHECK`). Everything else on the port is counted as
//! skipped and left untouched. Both functions cost one array lookup for
//! frames that are not on the clock port.
//!
//! Time is `bpf_ktime_get_tai_ns()` (CLOCK_TAI, Linux 6.1+, callable from
//! XDP and TC) through the synthetic transform of [`ClockStampConfig`],
//! with the same integer arithmetic as `SyncClock::apply` in userspace.

use aya_ebpf::{
    helpers::generated::bpf_ktime_get_tai_ns,
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
    programs::{TcContext, XdpContext},
};
use bpf_maps::clock::{
    stamp_offset, ClockStampConfig, ClockStampCounters, PeerClock, PeerClockKey, FLAG_KERNEL_T1,
    MAX_CLOCK_PEERS, PROBE_KIND_REQUEST, PROBE_KIND_RESPONSE, PROBE_LEN, PROBE_MAGIC,
    PROBE_OFF_FLAGS, PROBE_OFF_KIND, PROBE_OFF_VERSION, PROBE_VERSION, STAMP_SET_KERNEL,
};

use crate::parse::{ParsedFrame, FLAG_FRAGMENT, IPPROTO_UDP};

/// Single entry: port and synthetic transform; port 0 = stamping off.
#[map(name = "CW_CLK_CFG")]
pub static CLOCK_CONFIG: Array<ClockStampConfig> = Array::with_max_entries(1, 0);

/// What was stamped or skipped.
#[map(name = "CW_CLK_COUNT")]
pub static CLOCK_COUNTERS: PerCpuArray<ClockStampCounters> = PerCpuArray::with_max_entries(1, 0);

/// Per-peer estimates, written by the agent, read by the collective
/// library (no program touches it; it lives here so that it is created and
/// pinned with the object's other maps).
#[map(name = "CW_CLK_PEERS")]
pub static CLOCK_PEERS: HashMap<PeerClockKey, PeerClock> =
    HashMap::with_max_entries(MAX_CLOCK_PEERS, 0);

const UDP_HLEN: usize = 8;
/// Largest IPv4 L4 offset: two VLAN tags (22) + a 60-byte header.
const MAX_L4_OFFSET: u32 = 82;

/// Which kernel slot a probe gets in a direction, if any.
#[inline(always)]
fn slot_for(kind: u8, egress: bool) -> Option<usize> {
    match (kind, egress) {
        (PROBE_KIND_REQUEST, true) => Some(0),
        (PROBE_KIND_REQUEST, false) => Some(1),
        (PROBE_KIND_RESPONSE, true) => Some(2),
        (PROBE_KIND_RESPONSE, false) => Some(3),
        _ => None,
    }
}

/// The config if `frame` is UDP on the clock port; `None` (and nothing
/// counted) otherwise.
#[inline(always)]
fn config_for(frame: &ParsedFrame) -> Option<&'static ClockStampConfig> {
    if frame.proto != IPPROTO_UDP || !frame.has_ports() {
        return None;
    }
    let cfg = CLOCK_CONFIG.get(0)?;
    let port = cfg.port;
    if port == 0 || (u32::from(frame.dst_port) != port && u32::from(frame.src_port) != port) {
        return None;
    }
    Some(cfg)
}

/// Whether the frame is a candidate for an in-place stamp at all.
#[inline(always)]
fn stampable(frame: &ParsedFrame) -> bool {
    frame.ip_version == 4
        && frame.flags & FLAG_FRAGMENT == 0
        && frame.l4_offset <= MAX_L4_OFFSET
        && frame.ip_end >= frame.l4_offset + (UDP_HLEN + PROBE_LEN) as u32
}

/// The host clock now: CLOCK_TAI + offset + drift·(t − epoch).
#[inline(always)]
fn host_time(cfg: &ClockStampConfig) -> u64 {
    // SAFETY: a helper without arguments, available to XDP and TC.
    let raw = unsafe { bpf_ktime_get_tai_ns() };
    let negative_dt = raw < cfg.epoch_ns;
    let dt = if negative_dt {
        cfg.epoch_ns - raw
    } else {
        raw - cfg.epoch_ns
    };
    let ppb = u64::from(cfg.drift_ppb_abs);
    let drift = (dt / 1_000_000_000) * ppb + (dt % 1_000_000_000) * ppb / 1_000_000_000;
    let drift_negative = negative_dt != (cfg.drift_negative != 0);
    let t = if drift_negative {
        raw.wrapping_sub(drift)
    } else {
        raw.wrapping_add(drift)
    };
    t.wrapping_add(cfg.offset_ns as u64)
}

#[inline(always)]
fn count(rx: u64, tx: u64, skipped: u64) {
    if let Some(c) = CLOCK_COUNTERS.get_ptr_mut(0) {
        // SAFETY: per-CPU slot, only this CPU writes it while the program runs.
        unsafe {
            (*c).rx_stamped += rx;
            (*c).tx_stamped += tx;
            (*c).skipped += skipped;
        }
    }
}

/// XDP ingress: writes t2 (request) or t4 (response) into the probe.
#[inline(always)]
pub fn stamp_xdp_ingress(ctx: &XdpContext, frame: &ParsedFrame) {
    let Some(cfg) = config_for(frame) else {
        return;
    };
    if !stampable(frame) {
        count(0, 0, 1);
        return;
    }
    let l4 = (frame.l4_offset & 0x7f) as usize;
    let (data, end) = (ctx.data(), ctx.data_end());
    if data + l4 + UDP_HLEN + PROBE_LEN > end {
        count(0, 0, 1);
        return;
    }
    let udp = (data + l4) as *mut u8;
    let payload = (data + l4 + UDP_HLEN) as *mut u8;
    // SAFETY: `[udp, payload + PROBE_LEN)` lies inside the packet (checked
    // against data_end above); XDP may read and write packet data.
    unsafe {
        let csum = [*udp.add(6), *udp.add(7)];
        let magic = (payload as *const [u8; 4]).read_unaligned();
        if csum != [0, 0]
            || u32::from_be_bytes(magic) != PROBE_MAGIC
            || *payload.add(PROBE_OFF_VERSION) != PROBE_VERSION
        {
            count(0, 0, 1);
            return;
        }
        let Some(slot) = slot_for(*payload.add(PROBE_OFF_KIND), false) else {
            return;
        };
        let now = host_time(cfg).to_be_bytes();
        (payload.add(stamp_offset(STAMP_SET_KERNEL, slot)) as *mut [u8; 8]).write_unaligned(now);
        let flags = payload.add(PROBE_OFF_FLAGS) as *mut [u8; 2];
        let f = u16::from_be_bytes(flags.read_unaligned()) | (FLAG_KERNEL_T1 << slot);
        flags.write_unaligned(f.to_be_bytes());
    }
    count(1, 0, 0);
}

/// TC egress: writes t1 (request) or t3 (response) into the probe.
///
/// Called by `tc_egress` before shaping, so the stamp is taken when the
/// datagram enters the egress hook; queueing in the qdisc after it is not
/// measured (the clock class is meant to be shaped for low latency).
#[inline(always)]
pub fn stamp_tc_egress(ctx: &TcContext, frame: &ParsedFrame) {
    let Some(cfg) = config_for(frame) else {
        return;
    };
    if !stampable(frame) {
        count(0, 0, 1);
        return;
    }
    let l4 = (frame.l4_offset & 0x7f) as usize;
    let payload = l4 + UDP_HLEN;
    let Ok(csum) = ctx.load::<[u8; 2]>(l4 + 6) else {
        count(0, 0, 1);
        return;
    };
    let Ok(head) = ctx.load::<[u8; 8]>(payload) else {
        count(0, 0, 1);
        return;
    };
    let magic = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    if csum != [0, 0] || magic != PROBE_MAGIC || head[PROBE_OFF_VERSION] != PROBE_VERSION {
        count(0, 0, 1);
        return;
    }
    let Some(slot) = slot_for(head[PROBE_OFF_KIND], true) else {
        return;
    };
    let now = host_time(cfg).to_be_bytes();
    let flags = u16::from_be_bytes([head[PROBE_OFF_FLAGS], head[PROBE_OFF_FLAGS + 1]])
        | (FLAG_KERNEL_T1 << slot);
    let stored = ctx
        .store(payload + stamp_offset(STAMP_SET_KERNEL, slot), &now, 0)
        .and_then(|()| ctx.store(payload + PROBE_OFF_FLAGS, &flags.to_be_bytes(), 0));
    match stored {
        Ok(()) => count(0, 1, 0),
        Err(_) => count(0, 0, 1),
    }
}
