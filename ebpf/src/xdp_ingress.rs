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
    parse::{parse_frame, ParseError, ParsedFrame},
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
/// length, which succeeds only when the whole IP datagram lies in the linear
/// data; then the frame is counted at that length (a driver puts bytes in
/// fragments only past a full linear buffer, so a well-formed frame whose
/// datagram ended in the linear data has none). Otherwise (a jumbo
/// multi-buffer frame, or an unparseable one) the full length is asked for and
/// the frame parsed against it.
#[inline(always)]
fn parse(ctx: &XdpContext) -> (Result<ParsedFrame, ParseError>, u64) {
    let (data, data_end) = (ctx.data(), ctx.data_end());
    let linear = data_end - data;
    let first = parse_frame(data, data_end, linear);
    if first.is_ok() {
        return (first, linear as u64);
    }
    let full = frame_len(ctx);
    if full as usize == linear {
        return (first, full);
    }
    (parse_frame(data, data_end, full as usize), full)
}

#[inline(always)]
pub fn xdp_ingress(ctx: &XdpContext) -> u32 {
    let (parsed, len) = parse(ctx);
    let frame = match parsed {
        Ok(frame) => frame,
        Err(why) => {
            count_unclassified(len);
            crate::log::unparsed(ctx, crate::log::Hook::Ingress, why, len);
            return xdp_action::XDP_PASS;
        }
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
