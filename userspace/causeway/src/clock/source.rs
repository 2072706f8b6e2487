//! The host timescale and the synthetic clock error used for ground-truth
//! tests; the timestamp sources themselves are [`Source`]
//! (`causeway_core::clock::source`, re-exported here).
//!
//! Every stamp of a host is on one timescale: CLOCK_TAI in nanoseconds,
//! passed through the host's [`SyncClock`].

use bpf_maps::clock::ClockStampConfig;
use serde::{Deserialize, Serialize};

pub use causeway_core::clock::source::Source;

/// This host's clock as Causeway sees it: CLOCK_TAI plus an optional
/// synthetic error `offset + drift · (t − epoch)`. The error is off
/// (identity) unless configured; tests turn it on so that hosts sharing one
/// real clock (network namespaces) have a known ground truth. The kernel
/// applies the same transform to its stamps ([`SyncClock::stamp_config`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncClock {
    pub offset_ns: i64,
    /// Parts per 10⁹; ±100 ppm = ±100 000.
    pub drift_ppb: i64,
    /// Raw CLOCK_TAI time at which the drift term is zero.
    pub epoch_ns: u64,
}

/// Largest synthetic drift accepted, ppb (±1000 ppm).
pub const MAX_SYNTHETIC_DRIFT_PPB: i64 = 1_000_000;

impl SyncClock {
    /// No synthetic error.
    pub const IDENTITY: SyncClock = SyncClock {
        offset_ns: 0,
        drift_ppb: 0,
        epoch_ns: 0,
    };

    /// The host clock at raw CLOCK_TAI `raw`. Same integer arithmetic as
    /// the kernel side (`ebpf/src/clock_probe.rs`): whole seconds and the
    /// remainder scaled separately so that nothing overflows.
    pub fn apply(&self, raw: u64) -> u64 {
        let negative_dt = raw < self.epoch_ns;
        let dt = raw.abs_diff(self.epoch_ns);
        let ppb = self.drift_ppb.unsigned_abs();
        let drift = (dt / 1_000_000_000) * ppb + (dt % 1_000_000_000) * ppb / 1_000_000_000;
        let drift_negative = negative_dt != (self.drift_ppb < 0);
        let t = if drift_negative {
            raw.wrapping_sub(drift)
        } else {
            raw.wrapping_add(drift)
        };
        t.wrapping_add_signed(self.offset_ns)
    }

    /// The host clock now.
    pub fn now(&self) -> u64 {
        self.apply(raw_tai_now())
    }

    /// The kernel stamping configuration for `port` with this transform.
    pub fn stamp_config(&self, port: u16) -> ClockStampConfig {
        ClockStampConfig {
            port: u32::from(port),
            drift_ppb_abs: self.drift_ppb.unsigned_abs().min(u64::from(u32::MAX)) as u32,
            drift_negative: u32::from(self.drift_ppb < 0),
            _reserved: 0,
            offset_ns: self.offset_ns,
            epoch_ns: self.epoch_ns,
        }
    }
}

/// CLOCK_TAI now, ns.
pub fn raw_tai_now() -> u64 {
    timespec_ns(nix::time::clock_gettime(nix::time::ClockId::CLOCK_TAI))
}

fn timespec_ns(ts: nix::Result<nix::sys::time::TimeSpec>) -> u64 {
    // CLOCK_TAI and CLOCK_REALTIME cannot fail on Linux ≥ 3.10.
    let ts = ts.unwrap_or_else(|e| panic!("clock_gettime failed: {e}"));
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// CLOCK_TAI − CLOCK_REALTIME, whole seconds (the kernel's TAI offset,
/// 0 unless a time daemon set it), in ns: converts SO_TIMESTAMPING stamps.
pub fn tai_minus_realtime_ns() -> i64 {
    let real = timespec_ns(nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME));
    let tai = raw_tai_now();
    let diff = tai as i128 - real as i128;
    ((diff + 500_000_000).div_euclid(1_000_000_000) * 1_000_000_000) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_off_by_default() {
        assert_eq!(SyncClock::default(), SyncClock::IDENTITY);
        assert_eq!(
            SyncClock::IDENTITY.apply(1_790_000_000_123_456_789),
            1_790_000_000_123_456_789
        );
    }

    #[test]
    fn offset_and_drift_match_floating_point_reference() {
        let epoch = 1_790_000_000_000_000_000u64;
        for drift_ppb in [-100_000i64, -1, 0, 7, 100_000, MAX_SYNTHETIC_DRIFT_PPB] {
            for offset_ns in [-50_000_000i64, 0, 3_700_000] {
                let c = SyncClock {
                    offset_ns,
                    drift_ppb,
                    epoch_ns: epoch,
                };
                for dt in [
                    -3_600_000_000_123i64,
                    -1,
                    0,
                    999_999_999,
                    86_400_000_000_007,
                ] {
                    let raw = epoch.wrapping_add_signed(dt);
                    let expect = dt as f64 * drift_ppb as f64 * 1e-9 + offset_ns as f64;
                    let got = c.apply(raw) as i128 - raw as i128;
                    assert!(
                        (got as f64 - expect).abs() <= 1.0,
                        "{c:?} dt {dt}: {got} vs {expect}"
                    );
                }
            }
        }
    }

    #[test]
    fn stamp_config_carries_the_transform() {
        let c = SyncClock {
            offset_ns: -5,
            drift_ppb: -20_000,
            epoch_ns: 9,
        };
        let k = c.stamp_config(7339);
        assert_eq!(
            (
                k.port,
                k.drift_ppb_abs,
                k.drift_negative,
                k.offset_ns,
                k.epoch_ns
            ),
            (7339, 20_000, 1, -5, 9)
        );
    }

    #[test]
    fn tai_offset_is_whole_seconds_and_small() {
        let d = tai_minus_realtime_ns();
        assert_eq!(d % 1_000_000_000, 0);
        assert!(
            d.abs() <= 100_000_000_000,
            "TAI − UTC of {d} ns is implausible"
        );
    }
}
