//! Command-line link parameters, shared by `causeway-wanem` and `causeway-netsim`.
//!
//! Rates, sizes and durations are written with units and read by the one
//! parser of `causeway_core::units`: `--rate 200mbit`, `--delay 20ms`,
//! `--queue 1mb`.

use std::time::Duration;

use anyhow::{Context, Result};
use causeway_core::units::{self, UnitError};
use causeway_netsim::params::default_queue_bytes;
use causeway_netsim::LinkParams;
use clap::Args;

/// One direction's (or both directions') link parameters.
#[derive(Debug, Clone, Args)]
pub struct LinkArgs {
    /// One-way delay, with a unit (e.g. 20ms, 1.5ms, 200us).
    #[arg(long, default_value = "0ms")]
    pub delay: String,
    /// Jitter, with a unit (uniform ± around the delay; order is kept unless --reorder).
    #[arg(long, default_value = "0ms")]
    pub jitter: String,
    /// Rate of Ethernet frame bits (e.g. 200mbit, 1gbit); default: unlimited.
    #[arg(long, default_value = "unlimited")]
    pub rate: String,
    /// Random loss probability in [0, 1] (e.g. 0.001 = 0.1 %).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Drop-tail queue limit (e.g. 1mb, 256kb; default: one RTT × rate, at least 256 KiB).
    #[arg(long)]
    pub queue: Option<String>,
    /// Probability that a frame skips the delay line (reordering).
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
}

impl LinkArgs {
    pub fn to_params(&self) -> Result<LinkParams> {
        let rate_bps = parse_link_rate(&self.rate).context("--rate")?;
        let delay_ns = duration_ns(&self.delay).context("--delay")?;
        let queue = self
            .queue
            .as_deref()
            .map(units::parse_bytes)
            .transpose()
            .context("--queue")?;
        let p = LinkParams {
            delay_ns,
            jitter_ns: duration_ns(&self.jitter).context("--jitter")?,
            rate_bps,
            loss: self.loss,
            queue_bytes: queue.unwrap_or_else(|| default_queue_bytes(rate_bps, delay_ns)),
            reorder: self.reorder,
            up: true,
        };
        p.validate().context("link parameters")?;
        Ok(p)
    }
}

/// A link rate: `unlimited` (0 bit/s in [`LinkParams`]) or a rate such as `200mbit`.
pub fn parse_link_rate(s: &str) -> Result<u64, UnitError> {
    if s.trim().eq_ignore_ascii_case("unlimited") {
        return Ok(0);
    }
    units::parse_rate_bps(s)
}

/// A duration such as `20ms` in whole nanoseconds (saturating at `u64::MAX`).
pub fn duration_ns(s: &str) -> Result<u64, UnitError> {
    units::parse_duration(s).map(nanos)
}

/// `d` in whole nanoseconds, saturating at `u64::MAX`.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
