//! The egress token bucket: a pure, deterministic model of the kernel's
//! per-class GCRA (generic cell rate algorithm), with time as a parameter.
//!
//! The arithmetic (`frame_cost`, `decide`) is `bpf_maps::gcra`, the one copy
//! that `ebpf/src/shaper.rs` also runs on every frame; the TestRun tests
//! check that the kernel's decisions and the model's agree.
//!
//! # The algorithm
//! A class with rate `r` bytes/s and burst `b` bytes keeps one `u64`, the
//! *theoretical arrival time* `tat` (ns): the time at which the bucket would
//! be full again if nothing more were sent. A frame of `len` bytes costs
//! `cost = len * ns_per_byte_q16 >> 16` ns. At time `now`:
//!
//! ```text
//! start = max(tat, now)          // an idle bucket refills to full, no more
//! wait  = start - now            // how far ahead of the rate the class is
//! conforming  iff  wait == 0  or  wait < burst_ns
//! if conforming: tat = start + cost (saturating)
//! ```
//!
//! `burst_ns` is the tolerance: the time `b` bytes plus the qdisc's own
//! burst (`bpf_maps::shaper::qdisc_burst_bytes`) take at rate `r`. The
//! program counts frames as they enter the qdisc (HTB at the same
//! ceiling), which itself sends up to its burst ahead of the rate; a
//! tolerance of `b` alone would leave no room for any backlog in the qdisc
//! once the qdisc's burst is as large as `b` (at 200 Mbit/s and above with
//! the default burst), and every frame queued there would be over the
//! limit: with `drop`, TCP's sends fail locally until nothing is in flight
//! and it waits for its probe timer (≥ 200 ms), ~4 % of the rate. So a
//! class idle for a long time may send the tolerance at once and then `r`
//! bytes/s; `b` is the backlog it may build in the qdisc.
//!
//! A frame conforms while the bucket has any credit left and is charged in
//! full, so the bucket may go one frame into debt: a GSO super-frame
//! (charged at its wire length, every segment's headers included) is never
//! refused whole when the bucket could take part of it, and the long-run
//! rate stays exact. No expression can overflow: `start - now` cannot
//! underflow, the cost is computed from clamped inputs, and the addition
//! saturates. Over-limit frames do not change `tat`.
//!
//! # Why the kernel's update is not racy
//! Several CPUs transmit at once, so `tat` lives in one shared (not per-CPU)
//! array slot and is updated by a compare-and-swap loop:
//!
//! ```text
//! repeat at most MAX_CAS_ATTEMPTS times:
//!     seen = load(tat)
//!     match decide(seen, now, len):
//!         over limit      -> return over limit          (nothing written)
//!         conform(new)    -> if cas(tat, seen, new) succeeds: return conform
//! return over limit                                      (contention)
//! ```
//!
//! The decision is a pure function of the value `seen`, and it is published
//! only if `tat` still holds `seen`: every successful update is applied to
//! exactly the state it was computed from, so the concurrent history equals
//! some serial order of the admitted frames (linearizable at the CAS), and
//! the serial guarantees (rate, burst) hold across CPUs. A failed CAS means
//! another CPU's frame was admitted, so the system always makes progress
//! (lock-free); the attempt bound exists for the verifier and errs on the
//! safe side (a frame that keeps losing is treated as over the limit, never
//! admitted unaccounted). `tat` only grows through CAS, so a value seen
//! twice is the same state (no ABA hazard). Clocks read on different CPUs
//! may disagree slightly; `max(tat, now)` makes a `now` behind `tat` harmless.
//!
//! # Pacing (EDT)
//! A class with `pacing = "edt"` ([`BucketParams::edt`]) keeps the same
//! `tat`, read as the departure time of the class's next byte: a frame
//! leaves at `max(tat, base)` (written to `skb->tstamp`; the `fq` qdisc
//! holds it until then) and moves `tat` on by its cost, where `base` is the
//! frame's own earliest departure (TCP's pacing stamp when one lies within
//! the horizon, else `now`). That is [`decide`] at time `base` with the
//! horizon as the tolerance (`bpf_maps::gcra::pace`); a frame that would
//! leave a horizon or more after `base` is dropped. Frames are delayed,
//! not refused, so TCP sees a longer RTT instead of local drops.

use std::sync::atomic::{AtomicU64, Ordering};

use bpf_maps::shaper::{qdisc_burst_bytes, MAX_CAS_ATTEMPTS, NS_PER_BYTE_SHIFT};

/// Slowest accepted rate, bits per second.
pub const MIN_RATE_BITS: u64 = 8_000;
/// Fastest accepted rate, bits per second (1 Tbit/s).
pub const MAX_RATE_BITS: u64 = 1_000_000_000_000;
/// Longest accepted burst, as transmission time at the rate (10 s).
pub const MAX_BURST_NS: u64 = 10_000_000_000;
/// Shortest and longest accepted EDT horizon, ns (1 ms, 10 s: `fq`'s own
/// default horizon).
pub const EDT_HORIZON_RANGE_NS: std::ops::RangeInclusive<u64> = 1_000_000..=10_000_000_000;

const NS_PER_SEC: u128 = 1_000_000_000;

/// A validated (rate, burst) pair in the kernel's fixed-point form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketParams {
    rate_bits: u64,
    burst_bytes: u64,
    ns_per_byte_q16: u64,
    burst_ns: u64,
    /// Paced (EDT): `burst_ns` is the horizon.
    edt: bool,
}

/// Why a rate or burst was refused.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum BucketError {
    #[error("rate {rate_bits} bit/s is out of range ({MIN_RATE_BITS}..={MAX_RATE_BITS} bit/s)")]
    RateOutOfRange { rate_bits: u64 },
    #[error("burst {burst_bytes} bytes is smaller than one frame of {min_bytes} bytes (MTU plus link header)")]
    BurstBelowFrame { burst_bytes: u64, min_bytes: u64 },
    #[error("burst {burst_bytes} bytes takes longer than 10 s to send at {rate_bits} bit/s")]
    BurstTooLong { burst_bytes: u64, rate_bits: u64 },
    #[error("edt horizon {horizon_ns} ns is out of range (1 ms ..= 10 s)")]
    HorizonOutOfRange { horizon_ns: u64 },
}

impl BucketParams {
    /// Validates `rate_bits` (bit/s) and `burst_bytes`; the burst must hold
    /// at least one frame of `min_frame_bytes`.
    pub fn new(
        rate_bits: u64,
        burst_bytes: u64,
        min_frame_bytes: u64,
    ) -> Result<Self, BucketError> {
        if !(MIN_RATE_BITS..=MAX_RATE_BITS).contains(&rate_bits) {
            return Err(BucketError::RateOutOfRange { rate_bits });
        }
        if burst_bytes < min_frame_bytes {
            return Err(BucketError::BurstBelowFrame {
                burst_bytes,
                min_bytes: min_frame_bytes,
            });
        }
        let ns_per_byte_q16 = ns_per_byte_q16(rate_bits);
        let to_ns = |bytes| bytes_to_ns(bytes, ns_per_byte_q16);
        if to_ns(burst_bytes) > u128::from(MAX_BURST_NS) {
            return Err(BucketError::BurstTooLong {
                burst_bytes,
                rate_bits,
            });
        }
        Ok(Self {
            rate_bits,
            burst_bytes,
            ns_per_byte_q16,
            burst_ns: to_ns(burst_bytes.saturating_add(qdisc_burst_bytes(rate_bits, burst_bytes)))
                as u64,
            edt: false,
        })
    }

    /// A paced (EDT) class at `rate_bits` that drops frames which would
    /// leave `horizon_ns` or more after their earliest departure.
    /// `burst_bytes` reports what the horizon holds at the rate.
    pub fn edt(rate_bits: u64, horizon_ns: u64) -> Result<Self, BucketError> {
        if !(MIN_RATE_BITS..=MAX_RATE_BITS).contains(&rate_bits) {
            return Err(BucketError::RateOutOfRange { rate_bits });
        }
        if !EDT_HORIZON_RANGE_NS.contains(&horizon_ns) {
            return Err(BucketError::HorizonOutOfRange { horizon_ns });
        }
        Ok(Self {
            rate_bits,
            burst_bytes: (u128::from(rate_bits) * u128::from(horizon_ns) / (8 * NS_PER_SEC)) as u64,
            ns_per_byte_q16: ns_per_byte_q16(rate_bits),
            burst_ns: horizon_ns,
            edt: true,
        })
    }

    /// Whether the class is paced (EDT) rather than policed.
    pub fn is_edt(&self) -> bool {
        self.edt
    }

    pub fn rate_bits(&self) -> u64 {
        self.rate_bits
    }
    pub fn burst_bytes(&self) -> u64 {
        self.burst_bytes
    }
    pub fn ns_per_byte_q16(&self) -> u64 {
        self.ns_per_byte_q16
    }
    pub fn burst_ns(&self) -> u64 {
        self.burst_ns
    }
}

/// ns per byte = 8e9 / rate_bits, rounded to nearest in 48.16 fixed point
/// (`rate_bits` is at least `MIN_RATE_BITS`).
fn ns_per_byte_q16(rate_bits: u64) -> u64 {
    let rate = u128::from(rate_bits.max(1));
    let q = ((8 * NS_PER_SEC) << NS_PER_BYTE_SHIFT) + rate / 2;
    (q / rate) as u64
}

/// Transmission time of `bytes` at `ns_per_byte_q16`, ns.
fn bytes_to_ns(bytes: u64, ns_per_byte_q16: u64) -> u128 {
    (u128::from(bytes) * u128::from(ns_per_byte_q16)) >> NS_PER_BYTE_SHIFT
}

#[cfg(test)]
impl BucketParams {
    /// The same rate with a tolerance of exactly the burst, no qdisc burst
    /// on top: the GCRA tests count frames against it.
    pub(crate) fn without_qdisc_burst(mut self) -> Self {
        self.burst_ns = bytes_to_ns(self.burst_bytes, self.ns_per_byte_q16) as u64;
        self
    }
}

pub use bpf_maps::gcra::{decide, frame_cost, pace, Decision, Pacing};

/// A bucket shared by threads, updated by the kernel's CAS loop; the
/// userspace stand-in for one `CW_EG_BUCKETS` slot.
#[derive(Debug, Default)]
pub struct SharedBucket {
    tat: AtomicU64,
}

impl SharedBucket {
    pub fn new(tat: u64) -> Self {
        Self {
            tat: AtomicU64::new(tat),
        }
    }

    pub fn tat(&self) -> u64 {
        self.tat.load(Ordering::Acquire)
    }

    /// Whether a `len`-byte frame sent at `now` conforms; updates the bucket
    /// when it does.
    pub fn admit(&self, now: u64, len: u32, p: &BucketParams) -> bool {
        for _ in 0..MAX_CAS_ATTEMPTS {
            let seen = self.tat.load(Ordering::Acquire);
            match decide(seen, now, len, p.ns_per_byte_q16, p.burst_ns) {
                Decision::OverLimit => return false,
                Decision::Conform { new_tat } => {
                    if self
                        .tat
                        .compare_exchange(seen, new_tat, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return true;
                    }
                }
            }
        }
        false
    }
}

impl SharedBucket {
    /// The departure time of a `len`-byte frame sent at `now` whose own
    /// departure time is `earliest`, on a paced class; updates the bucket.
    /// `None`: beyond the horizon (the kernel drops it).
    pub fn pace(&self, now: u64, earliest: u64, len: u32, p: &BucketParams) -> Option<u64> {
        for _ in 0..MAX_CAS_ATTEMPTS {
            let seen = self.tat.load(Ordering::Acquire);
            match pace(seen, now, earliest, len, p.ns_per_byte_q16, p.burst_ns) {
                Pacing::BeyondHorizon => return None,
                Pacing::Send { tstamp, new_tat } => {
                    if self
                        .tat
                        .compare_exchange(seen, new_tat, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return Some(tstamp);
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
#[path = "bucket_tests.rs"]
mod tests;
