//! Command-line link parameters, shared by `causeway-wanem` and `causeway-netsim`.

use anyhow::{Context, Result};
use causeway_netsim::params::default_queue_bytes;
use causeway_netsim::LinkParams;
use clap::Args;

/// One direction's (or both directions') link parameters.
#[derive(Debug, Clone, Args)]
pub struct LinkArgs {
    /// One-way delay, milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub delay_ms: f64,
    /// Jitter, milliseconds (uniform ± around the delay; order is kept unless --reorder).
    #[arg(long, default_value_t = 0.0)]
    pub jitter_ms: f64,
    /// Rate in Mbit/s of Ethernet frame bytes; 0 = unlimited.
    #[arg(long, default_value_t = 0.0)]
    pub rate_mbit: f64,
    /// Random loss probability in [0, 1] (e.g. 0.001 = 0.1 %).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Drop-tail queue limit in bytes (default: one RTT × rate, at least 256 KiB).
    #[arg(long)]
    pub queue_bytes: Option<u64>,
    /// Probability that a frame skips the delay line (reordering).
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
}

impl LinkArgs {
    pub fn to_params(&self) -> Result<LinkParams> {
        anyhow::ensure!(
            self.delay_ms >= 0.0 && self.jitter_ms >= 0.0,
            "--delay-ms and --jitter-ms must be ≥ 0"
        );
        anyhow::ensure!(self.rate_mbit >= 0.0, "--rate-mbit must be ≥ 0");
        let rate_bps = (self.rate_mbit * 1e6).round() as u64;
        let delay_ns = (self.delay_ms * 1e6).round() as u64;
        let p = LinkParams {
            delay_ns,
            jitter_ns: (self.jitter_ms * 1e6).round() as u64,
            rate_bps,
            loss: self.loss,
            queue_bytes: self
                .queue_bytes
                .unwrap_or_else(|| default_queue_bytes(rate_bps, delay_ns)),
            reorder: self.reorder,
            up: true,
        };
        p.validate().context("link parameters")?;
        Ok(p)
    }
}
