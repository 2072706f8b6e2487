//! TC egress: classify with the same parser and rules as XDP ingress, then
//! per class: token bucket with an over-limit action, DSCP rewrite and
//! `skb->priority` (an HTB class id) so that the qdisc finishes the job.
//!
//! Over-limit actions: drop; ECN CE-mark for ECT (or already CE) frames
//! (frames that are not ECN-capable are left to the qdisc, which enforces
//! the ceiling by queueing: a drop here, before the qdisc, would stall a
//! TCP sender until its retransmission timer); or demote to the
//! configured class (its DSCP and priority; it is counted as sent there but
//! not charged to that class's bucket, the qdisc limits it). Non-IP and
//! unparseable frames pass untouched, counted in `UNCLASSIFIED_SLOT`; their
//! priority is left alone so the qdisc's default class takes them.
//!
//! Paced classes (`SHAPE_FLAG_EDT`, under the `fq` qdisc) are not policed:
//! each frame gets a departure time in `skb->tstamp` from the class's
//! schedule (`shaper::pace_frame`), which `fq` holds it to; a frame that
//! would leave beyond the class's horizon is dropped (the policy allows
//! no other over-limit action with pacing).
//!
//! Frames are charged and counted at their wire length (see [`wire_len`]),
//! the same length HTB charges, so bucket and qdisc agree on GSO frames.

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    programs::TcContext,
};
use bpf_maps::{
    counters::UNCLASSIFIED_SLOT,
    shaper::{
        ShaperClassConfig, OVER_DEMOTE, OVER_ECN_MARK, SHAPE_FLAG_BUCKET, SHAPE_FLAG_DSCP,
        SHAPE_FLAG_EDT, SHAPE_FLAG_PRIORITY,
    },
};

use crate::{
    classify::classify,
    parse::{parse_frame, ParsedFrame},
    shaper::{admit, class_config, count, pace_frame, Outcome},
};

/// Returned for frames that continue: `TCX_NEXT` (the next program on the
/// hook, if any, then the qdisc).
const PASS: i32 = TC_ACT_UNSPEC;
const DROP: i32 = TC_ACT_SHOT;
/// ECN field value "congestion experienced".
const ECN_CE: u8 = 0b11;
/// Offset of the IPv4 header checksum from the IP header.
const IPV4_CSUM_OFFSET: usize = 10;

/// Bytes a frame occupies on the wire: `wire_len` (the qdisc's packet
/// length, which counts the headers of every segment of a GSO frame, set
/// before the egress hook runs), or `len` when that is larger.
#[inline(always)]
fn wire_len(ctx: &TcContext) -> u32 {
    let len = ctx.len();
    // SAFETY: `skb` is the __sk_buff the kernel passed in; `wire_len` is
    // readable by TC programs.
    let wire = unsafe { (*ctx.skb.skb).wire_len };
    if wire > len {
        wire
    } else {
        len
    }
}

#[inline(always)]
pub fn tc_egress(ctx: &TcContext) -> i32 {
    let len = wire_len(ctx);
    let frame = match parse_frame(ctx.data(), ctx.data_end(), ctx.len() as usize) {
        Ok(frame) => frame,
        Err(why) => {
            count(
                UNCLASSIFIED_SLOT,
                UNCLASSIFIED_SLOT,
                u64::from(len),
                Outcome::Sent,
            );
            crate::log::unparsed(ctx, crate::log::Hook::Egress, why, u64::from(len));
            return PASS;
        }
    };
    crate::clock_probe::stamp_tc_egress(ctx, &frame);
    let class = classify(&frame).class;
    let Some(cfg) = class_config(class) else {
        count(class, class, u64::from(len), Outcome::Sent);
        return PASS;
    };
    let Ok(tos) = TosBytes::load(ctx, &frame) else {
        count(class, class, u64::from(len), Outcome::Sent);
        return PASS;
    };

    let mut out: &ShaperClassConfig = cfg;
    let mut out_class = class;
    let mut outcome = Outcome::Sent;
    let mut ecn = tos.ecn();
    let bucket = cfg.flags & SHAPE_FLAG_BUCKET != 0;
    if bucket && cfg.flags & SHAPE_FLAG_EDT != 0 {
        // SAFETY: `skb` is the __sk_buff the kernel passed in; TC programs
        // may read and write its `tstamp`.
        let earliest = unsafe { (*ctx.skb.skb).tstamp };
        match pace_frame(class, len, earliest, cfg) {
            // SAFETY: as above.
            Some(tstamp) => unsafe { (*ctx.skb.skb).tstamp = tstamp },
            None => outcome = Outcome::Dropped,
        }
    } else if bucket && !admit(class, len, cfg) {
        outcome = Outcome::Dropped;
        if cfg.over_action == OVER_ECN_MARK {
            outcome = Outcome::Unmarked;
            if ecn != 0 {
                ecn = ECN_CE;
                outcome = Outcome::Marked;
            }
        } else if cfg.over_action == OVER_DEMOTE {
            if let Some(demoted) = class_config(cfg.demote_class) {
                out = demoted;
                out_class = cfg.demote_class;
                outcome = Outcome::Demoted;
            }
        }
    }
    if outcome == Outcome::Dropped {
        count(class, class, u64::from(len), outcome);
        crate::log::shaper_drop(ctx, class, len);
        return DROP;
    }

    let dscp = if out.flags & SHAPE_FLAG_DSCP != 0 {
        (out.dscp & 0x3f) as u8
    } else {
        tos.dscp()
    };
    // A failed rewrite leaves the frame as it was; it still goes out.
    let _ = tos.rewrite(ctx, &frame, dscp, ecn);
    if out.flags & SHAPE_FLAG_PRIORITY != 0 {
        // SAFETY: `skb` is the __sk_buff the kernel passed in; TC programs
        // may write its `priority` field.
        unsafe { (*ctx.skb.skb).priority = out.priority };
    }
    count(class, out_class, u64::from(len), outcome);
    PASS
}

/// The first two bytes of the IP header, which hold the DSCP and ECN bits.
#[derive(Clone, Copy)]
struct TosBytes {
    bytes: [u8; 2],
    v4: bool,
}

impl TosBytes {
    #[inline(always)]
    fn load(ctx: &TcContext, frame: &ParsedFrame) -> Result<Self, i64> {
        let bytes = ctx.load::<[u8; 2]>(frame.l3_offset as usize)?;
        Ok(Self {
            bytes,
            v4: frame.ip_version == 4,
        })
    }

    /// The IPv4 TOS byte or the IPv6 traffic class.
    #[inline(always)]
    fn traffic_class(&self) -> u8 {
        if self.v4 {
            self.bytes[1]
        } else {
            (self.bytes[0] << 4) | (self.bytes[1] >> 4)
        }
    }

    #[inline(always)]
    fn ecn(&self) -> u8 {
        self.traffic_class() & 0b11
    }

    #[inline(always)]
    fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// Writes `dscp`/`ecn` into the frame; fixes the IPv4 header checksum
    /// (IPv6 has none, and neither field is in the L4 pseudo-header).
    #[inline(always)]
    fn rewrite(&self, ctx: &TcContext, frame: &ParsedFrame, dscp: u8, ecn: u8) -> Result<(), i64> {
        let tc = (dscp << 2) | (ecn & 0b11);
        if tc == self.traffic_class() {
            return Ok(());
        }
        let new = if self.v4 {
            [self.bytes[0], tc]
        } else {
            [
                (self.bytes[0] & 0xf0) | (tc >> 4),
                (tc << 4) | (self.bytes[1] & 0x0f),
            ]
        };
        let l3 = frame.l3_offset as usize;
        ctx.store(l3, &new, 0)?;
        if self.v4 {
            let from = u16::from_ne_bytes(self.bytes) as u64;
            let to = u16::from_ne_bytes(new) as u64;
            ctx.l3_csum_replace(l3 + IPV4_CSUM_OFFSET, from, to, 2)?;
        }
        Ok(())
    }
}
