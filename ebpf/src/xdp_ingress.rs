//! XDP ingress: parse, classify, count, and drop what a rule says to drop.
//!
//! Non-IP and unparseable frames pass untouched and are counted in
//! `UNCLASSIFIED_SLOT`; frames that match no rule pass in `DEFAULT_CLASS`.

use aya_ebpf::{
    bindings::xdp_action, helpers::generated::bpf_xdp_get_buff_len, programs::XdpContext,
};
use bpf_maps::classifier::VERDICT_DROP;

use crate::{
    classify::classify,
    counters::{count_ingress, count_unclassified},
    parse::parse_frame,
};

/// Whole frame length, including the fragments of a multi-buffer frame.
#[inline(always)]
fn frame_len(ctx: &XdpContext) -> u64 {
    // SAFETY: `ctx.ctx` is the xdp_md the kernel passed to this program.
    unsafe { bpf_xdp_get_buff_len(ctx.ctx) }
}

#[inline(always)]
pub fn xdp_ingress(ctx: &XdpContext) -> u32 {
    let len = frame_len(ctx);
    let Ok(frame) = parse_frame(ctx.data(), ctx.data_end(), len as usize) else {
        count_unclassified(len);
        return xdp_action::XDP_PASS;
    };
    crate::clock_probe::stamp_xdp_ingress(ctx, &frame);
    let class = classify(&frame);
    let drop = class.verdict == VERDICT_DROP;
    count_ingress(class.class, len, drop);
    if drop {
        xdp_action::XDP_DROP
    } else {
        xdp_action::XDP_PASS
    }
}
