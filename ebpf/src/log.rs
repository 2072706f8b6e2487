//! Log records through aya-log, off unless userspace sets `CLS_FLAG_LOG`
//! in this interface's classifier config (`causeway log --on`).
//!
//! Only rare paths log (unparseable frames, shaper drops): the switch is
//! read there, first, so the cost when logging is off is that one array
//! lookup on those paths and nothing on a classified frame. When on, each
//! event writes at most `LOG_RECORDS_PER_WINDOW` records per second and CPU
//! (a per-CPU window in `CW_LOG_RATE`); the next record says how many
//! were left out.

use core::ptr::read_volatile;

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::map, maps::PerCpuArray, EbpfContext};
use aya_log_ebpf::info;
use bpf_maps::{
    classifier::CLS_FLAG_LOG,
    log::{
        LogRate, LOG_EVENTS, LOG_EVENT_EGRESS_BAD_HEADER, LOG_EVENT_EGRESS_NOT_IP,
        LOG_EVENT_EGRESS_TRUNCATED, LOG_EVENT_INGRESS_BAD_HEADER, LOG_EVENT_INGRESS_NOT_IP,
        LOG_EVENT_INGRESS_TRUNCATED, LOG_EVENT_SHAPER_DROP, LOG_RECORDS_PER_WINDOW, LOG_WINDOW_NS,
    },
};

use crate::{maps::CLS_CONFIG, parse::ParseError};

/// Per-CPU rate limit of each event.
#[map(name = "CW_LOG_RATE")]
static LOG_RATE: PerCpuArray<LogRate> = PerCpuArray::with_max_entries(LOG_EVENTS, 0);

/// Which hook saw an unparseable frame.
#[derive(Clone, Copy)]
pub enum Hook {
    Ingress,
    Egress,
}

/// Whether this interface's programs log (one array lookup).
#[inline(always)]
fn enabled() -> bool {
    match CLS_CONFIG.get(0) {
        Some(config) => {
            // SAFETY: a valid map value; a plain load of a field userspace
            // writes with one store.
            let flags = unsafe { read_volatile(&config.flags) };
            flags & CLS_FLAG_LOG != 0
        }
        None => false,
    }
}

/// Takes a record of `event`'s budget on this CPU: the number of events
/// left out since the last record, or `None` when the budget is spent.
#[inline(always)]
fn admit(event: u32) -> Option<u32> {
    let slot = LOG_RATE.get_ptr_mut(event)?;
    // SAFETY: the helper has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: a per-CPU slot: only this CPU touches it, and a program is
    // not re-entered on one CPU while it runs.
    let rate = unsafe { &mut *slot };
    if now.wrapping_sub(rate.window_start_ns) >= LOG_WINDOW_NS {
        rate.window_start_ns = now;
        rate.records = 0;
    }
    if rate.records >= LOG_RECORDS_PER_WINDOW {
        rate.suppressed = rate.suppressed.wrapping_add(1);
        return None;
    }
    rate.records += 1;
    let suppressed = rate.suppressed;
    rate.suppressed = 0;
    Some(suppressed)
}

/// A frame the parser gave up on.
#[inline(always)]
pub fn unparsed<C: EbpfContext>(ctx: &C, hook: Hook, why: ParseError, len: u64) {
    if !enabled() {
        return;
    }
    let (event, reason) = match (hook, why) {
        (Hook::Ingress, ParseError::Truncated) => (LOG_EVENT_INGRESS_TRUNCATED, "truncated"),
        (Hook::Ingress, ParseError::NotIp) => (LOG_EVENT_INGRESS_NOT_IP, "not-ip"),
        (Hook::Ingress, ParseError::BadHeader) => (LOG_EVENT_INGRESS_BAD_HEADER, "bad-header"),
        (Hook::Egress, ParseError::Truncated) => (LOG_EVENT_EGRESS_TRUNCATED, "truncated"),
        (Hook::Egress, ParseError::NotIp) => (LOG_EVENT_EGRESS_NOT_IP, "not-ip"),
        (Hook::Egress, ParseError::BadHeader) => (LOG_EVENT_EGRESS_BAD_HEADER, "bad-header"),
        // Shares the not-ip budget (it was logged as not-ip before it had a name).
        (Hook::Ingress, ParseError::VlanDepth) => (LOG_EVENT_INGRESS_NOT_IP, "vlan-depth"),
        (Hook::Egress, ParseError::VlanDepth) => (LOG_EVENT_EGRESS_NOT_IP, "vlan-depth"),
    };
    let Some(suppressed) = admit(event) else {
        return;
    };
    let hook = match hook {
        Hook::Ingress => "ingress",
        Hook::Egress => "egress",
    };
    info!(
        ctx,
        "unclassified {} frame: {}, {} bytes ({} more since the last record)",
        hook,
        reason,
        len,
        suppressed
    );
}

/// A frame the shaper dropped (class over its limit with `drop`).
#[inline(always)]
pub fn shaper_drop<C: EbpfContext>(ctx: &C, class: u32, len: u32) {
    if !enabled() {
        return;
    }
    let Some(suppressed) = admit(LOG_EVENT_SHAPER_DROP) else {
        return;
    };
    info!(
        ctx,
        "shaper dropped a frame of class {}, {} bytes ({} more since the last record)",
        class,
        len,
        suppressed
    );
}
