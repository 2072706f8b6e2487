//! WAN path steering at TC ingress of a gateway's LAN side: the frame's flow
//! is looked up in `CW_PATH_FLOWS`; when it names a path that is up in
//! `CW_PATH_TABLE`, `skb->mark` becomes that path's mark, which a routing
//! rule (`fwmark` → table) turns into the path. Set at ingress because the
//! forwarding route is chosen right after it. Every frame passes.
//!
//! Not steered (counted in `PATH_UNSTEERED_SLOT`, mark untouched): frames the
//! parser cannot read, later fragments (they carry no ports, so their flow
//! is unknown), frames of no listed flow, and flows whose path is unknown or
//! down. A frame read only in part is keyed on what was read: the protocol
//! the parser ended on, ports 0 when it could not read them. The userspace
//! reference is `causeway_core::paths::steer`.

use aya_ebpf::{bindings::TC_ACT_UNSPEC, programs::TcContext};
use bpf_maps::paths::{
    FlowKey, PathCounters, FAMILY_V4, FAMILY_V6, MAX_PATHS, PATH_UNSTEERED_SLOT, PATH_UP,
};

use crate::{
    maps::{PATH_COUNT, PATH_FLOWS, PATH_TABLE},
    parse::{parse_frame, ParsedFrame, FLAG_LATER_FRAGMENT},
};

/// `TCX_NEXT`: the frame continues (to the next program, then the stack).
const PASS: i32 = TC_ACT_UNSPEC;

#[inline(always)]
pub fn tc_steer(ctx: &TcContext) -> i32 {
    let len = u64::from(ctx.len());
    let Ok(frame) = parse_frame(ctx.data(), ctx.data_end(), ctx.len() as usize) else {
        count(PATH_UNSTEERED_SLOT, len);
        return PASS;
    };
    match mark_of(&frame) {
        Some((path, mark)) => {
            // SAFETY: `skb` is the __sk_buff the kernel passed in; TC
            // programs may write its `mark`.
            unsafe { (*ctx.skb.skb).mark = mark };
            count(path, len);
        }
        None => count(PATH_UNSTEERED_SLOT, len),
    }
    PASS
}

/// The path and mark of the frame's flow, when it is steered.
#[inline(always)]
fn mark_of(frame: &ParsedFrame) -> Option<(u32, u32)> {
    if frame.flags & FLAG_LATER_FRAGMENT != 0 {
        return None;
    }
    let key = flow_key(frame);
    // SAFETY: a hash lookup; the value is copied out at once.
    let path = unsafe { PATH_FLOWS.get(&key) }.copied()?;
    if path >= MAX_PATHS {
        return None;
    }
    let entry = PATH_TABLE.get(path)?;
    (entry.flags & PATH_UP != 0).then_some((path, entry.mark))
}

#[inline(always)]
fn flow_key(frame: &ParsedFrame) -> FlowKey {
    let mut key = FlowKey {
        src_port: frame.src_port,
        dst_port: frame.dst_port,
        proto: frame.proto,
        family: if frame.ip_version == 4 {
            FAMILY_V4
        } else {
            FAMILY_V6
        },
        ..FlowKey::default()
    };
    // The parser keeps addresses as wire bytes in 4-byte words.
    key.src = words_to_bytes(&frame.src_addr);
    key.dst = words_to_bytes(&frame.dst_addr);
    key
}

#[inline(always)]
fn words_to_bytes(w: &[u32; 4]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&w[0].to_ne_bytes());
    b[4..8].copy_from_slice(&w[1].to_ne_bytes());
    b[8..12].copy_from_slice(&w[2].to_ne_bytes());
    b[12..16].copy_from_slice(&w[3].to_ne_bytes());
    b
}

#[inline(always)]
fn count(slot: u32, bytes: u64) {
    if let Some(c) = PATH_COUNT.get_ptr_mut(slot) {
        // SAFETY: a per-CPU slot, touched only by this CPU, and TC programs
        // are not re-entered on one CPU.
        unsafe {
            let c: *mut PathCounters = c;
            (*c).packets += 1;
            (*c).bytes += bytes;
        }
    }
}
