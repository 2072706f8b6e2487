//! The GCRA (generic cell rate algorithm) arithmetic of the egress token
//! bucket and of its EDT (earliest departure time) pacing mode ([`pace`]): the one copy, compiled into the TC program (`ebpf/src/shaper.rs`)
//! and into the userspace model (`userspace/causeway/src/shaper/bucket.rs`,
//! which documents the algorithm and the kernel's compare-and-swap loop).
//!
//! Verifier-shaped: no loops, no division, no panicking operation (the
//! inputs are clamped so that no expression overflows), everything inlined.

use crate::shaper::{MAX_CHARGED_LEN, NS_PER_BYTE_SHIFT};

/// Largest `ns_per_byte_q16` used: `MAX_CHARGED_LEN * q16` stays inside a
/// `u64` (userspace never writes more: the slowest valid rate is ~2^36).
pub const MAX_NS_PER_BYTE_Q16: u64 = u64::MAX >> 21;

/// The outcome for one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Within the rate; the bucket's `tat` becomes `new_tat`.
    Conform { new_tat: u64 },
    /// Over the limit; `tat` is unchanged.
    OverLimit,
}

/// Transmission time of a `len`-byte frame at `ns_per_byte_q16`, ns.
#[inline(always)]
pub fn frame_cost(len: u32, ns_per_byte_q16: u64) -> u64 {
    let len = if len > MAX_CHARGED_LEN {
        MAX_CHARGED_LEN
    } else {
        len
    };
    let q16 = if ns_per_byte_q16 > MAX_NS_PER_BYTE_Q16 {
        MAX_NS_PER_BYTE_Q16
    } else {
        ns_per_byte_q16
    };
    (len as u64 * q16) >> NS_PER_BYTE_SHIFT
}

/// The GCRA decision for a `len`-byte frame at `now` on a bucket whose
/// theoretical arrival time is `tat`, with tolerance `burst_ns`.
///
/// A frame conforms while the bucket holds any credit (`tat - now` below
/// the tolerance) and is then charged in full: the bucket may go up to one
/// frame into debt, which the following frames repay. So a GSO super-frame
/// is never refused whole when the bucket could take part of it, and the
/// long-run rate stays exact.
#[inline(always)]
pub fn decide(tat: u64, now: u64, len: u32, ns_per_byte_q16: u64, burst_ns: u64) -> Decision {
    let cost = frame_cost(len, ns_per_byte_q16);
    let start = if tat > now { tat } else { now };
    let wait = start - now;
    if wait == 0 || wait < burst_ns {
        Decision::Conform {
            new_tat: start.saturating_add(cost),
        }
    } else {
        Decision::OverLimit
    }
}

/// The outcome for one frame of a paced (EDT) class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// Leaves at `tstamp` (written to `skb->tstamp`, held there by `fq`);
    /// the class's `tat` becomes `new_tat`.
    Send { tstamp: u64, new_tat: u64 },
    /// Its departure would be `horizon_ns` or more after its earliest
    /// one: dropped, `tat` is unchanged.
    BeyondHorizon,
}

/// The EDT decision for a `len`-byte frame at `now` whose own departure
/// time is `earliest` (`skb->tstamp` as it arrives: TCP's pacing time, or
/// 0), on a class whose `tat` is the departure time of its next byte.
///
/// The frame's earliest departure `base` is `earliest` when that lies in
/// `(now, now + horizon_ns)` and `now` otherwise (0, an instant passed, or
/// a stamp on another clock, such as a `SO_TXTIME` `CLOCK_TAI` one, which
/// must not drag `tat` along). It leaves at `tstamp = max(tat, base)` and
/// the class's next byte at `tstamp + cost`: exactly the GCRA decision of
/// [`decide`] at time `base`, with the horizon as the tolerance, so a class
/// sends at most its rate over any interval (plus one frame), a GSO frame
/// is charged by its wire bytes, and a frame is dropped only when the
/// class's backlog reaches the horizon.
#[inline(always)]
pub fn pace(
    tat: u64,
    now: u64,
    earliest: u64,
    len: u32,
    ns_per_byte_q16: u64,
    horizon_ns: u64,
) -> Pacing {
    let base = if earliest > now && earliest - now < horizon_ns {
        earliest
    } else {
        now
    };
    match decide(tat, base, len, ns_per_byte_q16, horizon_ns) {
        Decision::Conform { new_tat } => Pacing::Send {
            tstamp: if tat > base { tat } else { base },
            new_tat,
        },
        Decision::OverLimit => Pacing::BeyondHorizon,
    }
}
