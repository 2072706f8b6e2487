//! A virtual network and two virtual clocks for exercising the estimator
//! with ground truth: the estimator's tests and the clock bench drive it.
//!
//! True time is an `f64` of nanoseconds since the start of the run; clock
//! readings add a large epoch so that they look like real `CLOCK_TAI` values.

use super::estimator::Sample;

/// Readings start near 2026 in CLOCK_TAI nanoseconds.
pub const EPOCH_NS: u64 = 1_790_000_000_000_000_000;

/// Small deterministic PRNG (SplitMix64): runs are reproducible by seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// Extra one-way delay on top of the base delay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Jitter {
    None,
    /// Uniform in [0, max_ns).
    Uniform {
        max_ns: f64,
    },
    /// Exponential with this mean (queueing-like, long tail).
    Exponential {
        mean_ns: f64,
    },
}

impl Jitter {
    fn draw(&self, rng: &mut Rng) -> f64 {
        match *self {
            Jitter::None => 0.0,
            Jitter::Uniform { max_ns } => rng.unit() * max_ns,
            Jitter::Exponential { mean_ns } => rng.exp(mean_ns),
        }
    }
}

/// Bursts (a two-state Gilbert–Elliott chain stepped once per probe): in a
/// burst, probes are lost with `loss` probability and the survivors queue
/// behind `extra_delay_ns` (uniform 0..extra) more in both directions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bursts {
    pub enter: f64,
    pub leave: f64,
    pub loss: f64,
    pub extra_delay_ns: f64,
}

/// The path between the two hosts and the responder's behaviour.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Path {
    pub base_fwd_ns: f64,
    pub base_back_ns: f64,
    pub jitter_fwd: Jitter,
    pub jitter_back: Jitter,
    /// Independent loss probability per direction.
    pub loss: f64,
    pub bursts: Option<Bursts>,
    /// Responder's hold time between t2 and t3.
    pub hold_ns: f64,
}

impl Path {
    /// Symmetric path with `rtt_ns` and the same jitter both ways.
    pub fn symmetric(rtt_ns: f64, jitter: Jitter) -> Self {
        Path {
            base_fwd_ns: rtt_ns / 2.0,
            base_back_ns: rtt_ns / 2.0,
            jitter_fwd: jitter,
            jitter_back: jitter,
            loss: 0.0,
            bursts: None,
            hold_ns: 20_000.0,
        }
    }

    /// 40 ms RTT, exponential jitter of mean 2 ms forward and uniform
    /// 0–0.1 ms back (the tests' and the bench's asymmetric scenario).
    pub fn wan40_asymmetric() -> Self {
        let mut p = Path::symmetric(40e6, Jitter::None);
        p.jitter_fwd = Jitter::Exponential { mean_ns: 2e6 };
        p.jitter_back = Jitter::Uniform { max_ns: 0.1e6 };
        p
    }

    /// 40 ms RTT, uniform 0–1 ms jitter, 10 % loss, and bursts (entered with
    /// 2 %, left with 10 % per probe) of 50 % loss and 20 ms extra delay.
    pub fn wan40_lossy_bursts() -> Self {
        let mut p = Path::symmetric(40e6, Jitter::Uniform { max_ns: 1e6 });
        p.loss = 0.1;
        p.bursts = Some(Bursts {
            enter: 0.02,
            leave: 0.1,
            loss: 0.5,
            extra_delay_ns: 20e6,
        });
        p
    }
}

/// A clock that reads `EPOCH + true + offset + drift·true`, rounded to ns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VirtualClock {
    pub offset_ns: f64,
    pub drift_ppm: f64,
}

impl VirtualClock {
    pub fn read(&self, true_ns: f64) -> u64 {
        let v = true_ns + self.offset_ns + self.drift_ppm * 1e-6 * true_ns;
        EPOCH_NS.wrapping_add_signed(v.round() as i64)
    }
    /// True time at which this clock reads `reading`.
    pub fn true_at(&self, reading: u64) -> f64 {
        let v = reading.wrapping_sub(EPOCH_NS) as i64 as f64;
        (v - self.offset_ns) / (1.0 + self.drift_ppm * 1e-6)
    }
}

/// Two clocks joined by a [`Path`]; `exchange` runs one probe.
#[derive(Clone, Debug)]
pub struct Sim {
    pub rng: Rng,
    pub path: Path,
    pub local: VirtualClock,
    pub remote: VirtualClock,
    in_burst: bool,
}

impl Sim {
    pub fn new(seed: u64, path: Path, local: VirtualClock, remote: VirtualClock) -> Self {
        Sim {
            rng: Rng::new(seed),
            path,
            local,
            remote,
            in_burst: false,
        }
    }

    /// One probe sent at true time `send_ns`; `None` if lost.
    pub fn exchange(&mut self, send_ns: f64) -> Option<Sample> {
        if let Some(b) = self.path.bursts {
            let flip = if self.in_burst { b.leave } else { b.enter };
            if self.rng.unit() < flip {
                self.in_burst = !self.in_burst;
            }
        }
        let burst = self.path.bursts.filter(|_| self.in_burst);
        let mut lost = self.rng.unit() < self.path.loss || self.rng.unit() < self.path.loss;
        let mut extra = [0.0, 0.0];
        if let Some(b) = burst {
            lost |= self.rng.unit() < b.loss;
            extra = [
                self.rng.unit() * b.extra_delay_ns,
                self.rng.unit() * b.extra_delay_ns,
            ];
        }
        let fwd = self.path.base_fwd_ns + self.path.jitter_fwd.draw(&mut self.rng) + extra[0];
        let back = self.path.base_back_ns + self.path.jitter_back.draw(&mut self.rng) + extra[1];
        if lost {
            return None;
        }
        let t2_true = send_ns + fwd;
        let t3_true = t2_true + self.path.hold_ns;
        Some(Sample {
            t1: self.local.read(send_ns),
            t2: self.remote.read(t2_true),
            t3: self.remote.read(t3_true),
            t4: self.local.read(t3_true + back),
        })
    }

    /// The remote clock minus the local clock when the local clock reads `local`.
    pub fn true_offset(&self, local: u64) -> f64 {
        let t = self.local.true_at(local);
        let remote = self.remote.read(t);
        (remote as i128 - local as i128) as f64
    }
}
