//! Link parameters of one emulated direction, and partial updates to them.

use serde::{Deserialize, Serialize};

/// Parameters of one direction of an emulated link.
///
/// Rates count Ethernet frame bytes as the emulator sees them (destination MAC
/// to the end of the payload: no preamble, inter-frame gap or FCS).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkParams {
    /// One-way propagation delay, nanoseconds.
    pub delay_ns: u64,
    /// Jitter: each frame's delay is drawn uniformly in `delay ± jitter`
    /// (never below zero). Without `reorder`, frames still leave in order.
    pub jitter_ns: u64,
    /// Link rate in bits per second; 0 = unlimited (no serialization delay).
    pub rate_bps: u64,
    /// Probability that a frame is lost, in [0, 1].
    pub loss: f64,
    /// Drop-tail limit of the bottleneck queue, bytes of frames waiting to be serialized.
    pub queue_bytes: u64,
    /// Probability that a frame skips the delay line (leaves right after
    /// serialization, ahead of its predecessors), in [0, 1].
    pub reorder: f64,
    /// false = the link is cut: every frame is dropped.
    pub up: bool,
}

impl Default for LinkParams {
    fn default() -> Self {
        Self {
            delay_ns: 0,
            jitter_ns: 0,
            rate_bps: 0,
            loss: 0.0,
            queue_bytes: 4 * 1024 * 1024,
            reorder: 0.0,
            up: true,
        }
    }
}

/// Invalid link parameters.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParamsError {
    #[error("loss must be a probability in [0, 1], got {0}")]
    Loss(f64),
    #[error("reorder must be a probability in [0, 1], got {0}")]
    Reorder(f64),
    #[error("queue_bytes must be at least one maximum frame (65535 bytes), got {0}")]
    Queue(u64),
    #[error("delay {delay_ns} ns or jitter {jitter_ns} ns is above the 60 s limit")]
    Delay { delay_ns: u64, jitter_ns: u64 },
    #[error("rate {0} bit/s is below the 8000 bit/s minimum (use 0 for unlimited)")]
    Rate(u64),
}

const MAX_DELAY_NS: u64 = 60_000_000_000;

impl LinkParams {
    /// Check every field; a link is only ever configured with validated parameters.
    pub fn validate(&self) -> Result<(), ParamsError> {
        if !(0.0..=1.0).contains(&self.loss) {
            return Err(ParamsError::Loss(self.loss));
        }
        if !(0.0..=1.0).contains(&self.reorder) {
            return Err(ParamsError::Reorder(self.reorder));
        }
        if self.queue_bytes < 65_535 {
            return Err(ParamsError::Queue(self.queue_bytes));
        }
        if self.delay_ns > MAX_DELAY_NS || self.jitter_ns > MAX_DELAY_NS {
            return Err(ParamsError::Delay {
                delay_ns: self.delay_ns,
                jitter_ns: self.jitter_ns,
            });
        }
        if self.rate_bps != 0 && self.rate_bps < 8000 {
            return Err(ParamsError::Rate(self.rate_bps));
        }
        Ok(())
    }

    /// Convenience constructor: delay in ms, rate in Mbit/s, loss probability.
    pub fn wan(delay_ms: f64, rate_mbit: f64, loss: f64) -> Self {
        let rate_bps = (rate_mbit * 1e6).round() as u64;
        let delay_ns = (delay_ms * 1e6).round() as u64;
        Self {
            delay_ns,
            rate_bps,
            loss,
            queue_bytes: default_queue_bytes(rate_bps, delay_ns),
            ..Self::default()
        }
    }

    /// Apply a partial update and validate the result; on error `self` is unchanged.
    pub fn patched(&self, patch: &ParamsPatch) -> Result<Self, ParamsError> {
        let mut p = *self;
        if let Some(v) = patch.delay_ns {
            p.delay_ns = v;
        }
        if let Some(v) = patch.jitter_ns {
            p.jitter_ns = v;
        }
        if let Some(v) = patch.rate_bps {
            p.rate_bps = v;
        }
        if let Some(v) = patch.loss {
            p.loss = v;
        }
        if let Some(v) = patch.queue_bytes {
            p.queue_bytes = v;
        }
        if let Some(v) = patch.reorder {
            p.reorder = v;
        }
        if let Some(v) = patch.up {
            p.up = v;
        }
        p.validate()?;
        Ok(p)
    }
}

/// A queue that holds one round trip's worth of bytes at the link rate (the
/// classic "one BDP" buffer, so a single TCP flow can fill the link), at least 256 KiB.
pub fn default_queue_bytes(rate_bps: u64, one_way_delay_ns: u64) -> u64 {
    let rtt_ns = 2 * one_way_delay_ns as u128;
    let bdp = (rate_bps as u128 * rtt_ns / 8 / 1_000_000_000) as u64;
    bdp.max(256 * 1024)
}

/// A partial update of [`LinkParams`]: fields left `None` keep their value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamsPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reorder: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up: Option<bool>,
}

impl ParamsPatch {
    /// Patch that sets every field to the values of `p`.
    pub fn all(p: &LinkParams) -> Self {
        Self {
            delay_ns: Some(p.delay_ns),
            jitter_ns: Some(p.jitter_ns),
            rate_bps: Some(p.rate_bps),
            loss: Some(p.loss),
            queue_bytes: Some(p.queue_bytes),
            reorder: Some(p.reorder),
            up: Some(p.up),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_bad_field() {
        let ok = LinkParams::wan(20.0, 200.0, 0.0);
        assert_eq!(ok.validate(), Ok(()));
        let bad = LinkParams { loss: 1.5, ..ok };
        assert_eq!(bad.validate(), Err(ParamsError::Loss(1.5)));
        let bad = LinkParams {
            reorder: -0.1,
            ..ok
        };
        assert_eq!(bad.validate(), Err(ParamsError::Reorder(-0.1)));
        let bad = LinkParams {
            queue_bytes: 100,
            ..ok
        };
        assert_eq!(bad.validate(), Err(ParamsError::Queue(100)));
        let bad = LinkParams { rate_bps: 10, ..ok };
        assert_eq!(bad.validate(), Err(ParamsError::Rate(10)));
        let bad = LinkParams {
            loss: f64::NAN,
            ..ok
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn patch_changes_only_given_fields_and_rejects_bad_values_whole() {
        let base = LinkParams::wan(20.0, 200.0, 0.0);
        let p = base
            .patched(&ParamsPatch {
                up: Some(false),
                rate_bps: Some(1_000_000),
                ..Default::default()
            })
            .unwrap();
        assert!(!p.up);
        assert_eq!(p.rate_bps, 1_000_000);
        assert_eq!(p.delay_ns, base.delay_ns);
        let err = base.patched(&ParamsPatch {
            loss: Some(2.0),
            up: Some(false),
            ..Default::default()
        });
        assert_eq!(err, Err(ParamsError::Loss(2.0)));
    }

    #[test]
    fn patch_json_rejects_unknown_fields() {
        let p: ParamsPatch = serde_json::from_str(r#"{"delay_ns": 5}"#).unwrap();
        assert_eq!(p.delay_ns, Some(5));
        assert!(serde_json::from_str::<ParamsPatch>(r#"{"delay": 5}"#).is_err());
    }

    #[test]
    fn default_queue_is_one_bdp() {
        // 200 Mbit/s, 20 ms one way → RTT 40 ms → 1 MB.
        assert_eq!(default_queue_bytes(200_000_000, 20_000_000), 1_000_000);
        assert_eq!(default_queue_bytes(1_000_000, 1_000), 256 * 1024);
    }
}
