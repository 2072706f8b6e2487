//! The pure scheduling core of one emulated link direction.
//!
//! No clocks and no sockets: every call takes the current time (`now`, in
//! nanoseconds on any monotonic clock) as an argument, so the behaviour is
//! deterministic for a given seed and sequence of calls and is tested with a
//! virtual clock.
//!
//! A frame arriving at `now` goes through, in order:
//! 1. **link state**: a cut link drops it (`dropped_down`);
//! 2. **drop-tail queue**: the bytes still waiting for the serializer
//!    (`(tx_free_at − now) × rate`) plus this frame must fit in `queue_bytes`,
//!    else it is dropped (`dropped_queue`);
//! 3. **serializer**: it starts when the previous frame has finished and
//!    occupies the link for `len × 8 / rate` (a virtual-time departure schedule:
//!    frames leave one by one at the link rate, never in bursts);
//! 4. **random loss**: with probability `loss` it is lost on the wire, after
//!    having used its link time (`dropped_loss`);
//! 5. **delay line**: it leaves `delay ± jitter` after its serialization ends; a
//!    frame never leaves before its predecessor unless it was picked (with
//!    probability `reorder`) to skip the delay line.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

use crate::params::LinkParams;
use crate::rng::SplitMix64;

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub received: u64,
    pub received_bytes: u64,
    pub forwarded: u64,
    pub forwarded_bytes: u64,
    pub dropped_loss: u64,
    pub dropped_queue: u64,
    pub dropped_down: u64,
}

impl Counters {
    pub fn dropped(&self) -> u64 {
        self.dropped_loss + self.dropped_queue + self.dropped_down
    }
}

/// What happened to an arriving frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted; it leaves at `depart`.
    Scheduled {
        depart: u64,
    },
    DroppedDown,
    DroppedQueue,
    DroppedLoss,
}

struct Entry<T> {
    depart: u64,
    seq: u64,
    len: u32,
    frame: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.depart, self.seq) == (other.depart, other.seq)
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.depart, self.seq).cmp(&(other.depart, other.seq))
    }
}

/// Frames held at once (memory bound for unlimited-rate links); arrivals beyond it
/// count as queue drops.
pub const MAX_FRAMES_IN_FLIGHT: usize = 1 << 18;

/// One direction of an emulated link, holding frames of type `T`.
pub struct LinkCore<T> {
    params: LinkParams,
    rng: SplitMix64,
    line: BinaryHeap<Reverse<Entry<T>>>,
    seq: u64,
    tx_free_at: u64,
    last_depart: u64,
    counters: Counters,
}

impl<T> LinkCore<T> {
    /// `params` must have been validated ([`LinkParams::validate`]).
    pub fn new(params: LinkParams, seed: u64) -> Self {
        Self {
            params,
            rng: SplitMix64::new(seed),
            line: BinaryHeap::new(),
            seq: 0,
            tx_free_at: 0,
            last_depart: 0,
            counters: Counters::default(),
        }
    }

    pub fn params(&self) -> &LinkParams {
        &self.params
    }

    /// Replace the parameters; frames already scheduled keep their departure time.
    pub fn set_params(&mut self, params: LinkParams) {
        self.params = params;
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Frames currently held (queued or in the delay line).
    pub fn in_flight(&self) -> usize {
        self.line.len()
    }

    /// Bytes waiting for the serializer at `now`.
    pub fn backlog_bytes(&self, now: u64) -> u64 {
        if self.params.rate_bps == 0 {
            return 0;
        }
        let wait_ns = self.tx_free_at.saturating_sub(now) as u128;
        (wait_ns * self.params.rate_bps as u128 / 8 / 1_000_000_000) as u64
    }

    fn serialization_ns(&self, len: u32) -> u64 {
        if self.params.rate_bps == 0 {
            return 0;
        }
        let bits_ns = len as u128 * 8 * 1_000_000_000;
        bits_ns.div_ceil(self.params.rate_bps as u128) as u64
    }

    fn sampled_delay(&mut self) -> u64 {
        let (d, j) = (self.params.delay_ns, self.params.jitter_ns);
        if j == 0 {
            return d;
        }
        let offset = (self.rng.next_f64() * (2 * j) as f64) as u64; // in [0, 2j)
        (d + offset).saturating_sub(j)
    }

    /// A frame of `len` bytes arrives at `now`.
    pub fn on_arrival(&mut self, now: u64, frame: T, len: u32) -> Verdict {
        self.counters.received += 1;
        self.counters.received_bytes += u64::from(len);
        if !self.params.up {
            self.counters.dropped_down += 1;
            return Verdict::DroppedDown;
        }
        if self.backlog_bytes(now) + u64::from(len) > self.params.queue_bytes
            || self.line.len() >= MAX_FRAMES_IN_FLIGHT
        {
            self.counters.dropped_queue += 1;
            return Verdict::DroppedQueue;
        }
        let start = self.tx_free_at.max(now);
        let serialized = start + self.serialization_ns(len);
        self.tx_free_at = serialized;
        if self.rng.chance(self.params.loss) {
            self.counters.dropped_loss += 1;
            return Verdict::DroppedLoss;
        }
        let delay = self.sampled_delay();
        let depart = if self.params.reorder > 0.0 && self.rng.chance(self.params.reorder) {
            serialized
        } else {
            let d = (serialized + delay).max(self.last_depart);
            self.last_depart = d;
            d
        };
        self.seq += 1;
        self.line.push(Reverse(Entry {
            depart,
            seq: self.seq,
            len,
            frame,
        }));
        Verdict::Scheduled { depart }
    }

    /// Departure time of the next frame to leave, if any.
    pub fn next_departure(&self) -> Option<u64> {
        self.line.peek().map(|Reverse(e)| e.depart)
    }

    /// The next frame whose departure time is ≤ `now`, with its length.
    pub fn pop_due(&mut self, now: u64) -> Option<(T, u32)> {
        if self.next_departure()? > now {
            return None;
        }
        let Reverse(e) = self.line.pop()?;
        self.counters.forwarded += 1;
        self.counters.forwarded_bytes += u64::from(e.len);
        Some((e.frame, e.len))
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
