//! XDP ingress: parse, apply the policy's unclassified action and admission,
//! classify, count, and drop what a rule says to drop.
//!
//! Order for one frame (mirrored by `userspace/core/src/classifier/reference.rs`):
//! 1. Unparseable: counted in `UNCLASSIFIED_SLOT` and under its reason;
//!    dropped when the set has `POLICY_UNCLASSIFIED_DROP` or
//!    `POLICY_ADMISSION` (admission drops what it cannot prove admitted),
//!    except non-IP frames (ARP, LLDP), which always pass.
//! 2. Parsed only in part (IP length past the frame's end, IPv6 extension
//!    chain unfinished, L4 header cut): with `POLICY_UNCLASSIFIED_DROP`
//!    dropped and counted like 1; otherwise classified on the bytes present.
//! 3. Admission (`POLICY_ADMISSION`, see `admission.rs`): a drop is counted
//!    only under its reason, in no class.
//! 4. Rules: counted in the class; a partly parsed frame also under its reason.

use aya_ebpf::{
    bindings::xdp_action, helpers::generated::bpf_xdp_get_buff_len, programs::XdpContext,
};
use bpf_maps::{
    classifier::{POLICY_ADMISSION, POLICY_UNCLASSIFIED_DROP, VERDICT_DROP},
    counters::{
        REASON_BAD_HEADER, REASON_EXT_CHAIN, REASON_L4_TRUNCATED, REASON_LENGTH_OVERRUN,
        REASON_NOT_IP, REASON_TRUNCATED, REASON_VLAN_DEPTH, UNCLASSIFIED_SLOT,
    },
};

use crate::{
    classify::{active, classify_with},
    counters::{count_ingress, count_reason},
    parse::{
        parse_common, parse_frame, ParseError, ParsedFrame, FLAG_EXT_UNFINISHED, FLAG_L4_TRUNCATED,
        FLAG_LENGTH_OVERRUN,
    },
};

/// Whole frame length, including the fragments of a multi-buffer frame.
#[inline(always)]
fn frame_len(ctx: &XdpContext) -> u64 {
    // SAFETY: `ctx.ctx` is the xdp_md the kernel passed to this program.
    unsafe { bpf_xdp_get_buff_len(ctx.ctx) }
}

/// Parses the frame and returns its length in bytes.
///
/// The length helper costs about as much as the rest of a cached
/// classification (a call, ~13 ns here), so it is called only when the
/// linear data is not enough: the frame is first parsed against its linear
/// length, which is complete only when the whole IP datagram lies in the
/// linear data; then the frame is counted at that length (a driver puts bytes in
/// fragments only past a full linear buffer, so a well-formed frame whose
/// datagram ended in the linear data has none). Otherwise (a jumbo
/// multi-buffer frame, or a malformed one) the full length is asked for and
/// the frame parsed against it.
#[inline(always)]
fn parse(ctx: &XdpContext) -> (Result<ParsedFrame, ParseError>, u64) {
    let (data, data_end) = (ctx.data(), ctx.data_end());
    let linear = data_end - data;
    if let Some(frame) = parse_common(data, data_end) {
        return (Ok(frame), linear as u64);
    }
    let first = parse_frame(data, data_end, linear);
    if let Ok(frame) = &first {
        if frame.flags & FLAG_LENGTH_OVERRUN == 0 {
            return (first, linear as u64);
        }
    }
    let full = frame_len(ctx);
    if full as usize == linear {
        return (first, full);
    }
    (parse_frame(data, data_end, full as usize), full)
}

/// The reason of a frame that was parsed only in part, if it was.
#[inline(always)]
fn partial(frame: &ParsedFrame) -> Option<u32> {
    if frame.flags & FLAG_LENGTH_OVERRUN != 0 {
        Some(REASON_LENGTH_OVERRUN)
    } else if frame.flags & FLAG_EXT_UNFINISHED != 0 {
        Some(REASON_EXT_CHAIN)
    } else if frame.flags & FLAG_L4_TRUNCATED != 0 {
        Some(REASON_L4_TRUNCATED)
    } else {
        None
    }
}

#[inline(always)]
fn verdict(drop: bool) -> u32 {
    if drop {
        xdp_action::XDP_DROP
    } else {
        xdp_action::XDP_PASS
    }
}

#[inline(always)]
pub fn xdp_ingress(ctx: &XdpContext) -> u32 {
    let (parsed, len) = parse(ctx);
    let config = active();
    let policy = config.policy;
    let frame = match parsed {
        Ok(frame) => frame,
        Err(why) => {
            let reason = match why {
                ParseError::NotIp => REASON_NOT_IP,
                ParseError::Truncated => REASON_TRUNCATED,
                ParseError::BadHeader => REASON_BAD_HEADER,
                ParseError::VlanDepth => REASON_VLAN_DEPTH,
            };
            let drop = reason != REASON_NOT_IP
                && policy & (POLICY_UNCLASSIFIED_DROP | POLICY_ADMISSION) != 0;
            count_ingress(UNCLASSIFIED_SLOT, len, drop);
            count_reason(reason, len, drop);
            crate::log::unparsed(ctx, crate::log::Hook::Ingress, why, len);
            return verdict(drop);
        }
    };
    let partial = partial(&frame);
    if let Some(reason) = partial {
        if policy & POLICY_UNCLASSIFIED_DROP != 0 {
            count_ingress(UNCLASSIFIED_SLOT, len, true);
            count_reason(reason, len, true);
            return xdp_action::XDP_DROP;
        }
    }
    crate::clock_probe::stamp_xdp_ingress(ctx, &frame);
    if !config.present {
        count_ingress(bpf_maps::classifier::DEFAULT_CLASS, len, false);
        return xdp_action::XDP_PASS;
    }
    if policy & POLICY_ADMISSION != 0 {
        if let Some(reason) = crate::admission::check(&frame, config) {
            count_reason(reason, len, true);
            return xdp_action::XDP_DROP;
        }
    }
    let class = classify_with(&frame, config);
    let drop = class.verdict == VERDICT_DROP;
    count_ingress(class.class, len, drop);
    if let Some(reason) = partial {
        count_reason(reason, len, drop);
    }
    verdict(drop)
}
