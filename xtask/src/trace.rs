//! `cargo xtask trace DIR [-o merged.json] [--assume-bound NS]`: merges the
//! ranks' `CAUSEWAY_TRACE` files (`DIR/rank-*.json`) onto rank 0's clock
//! ([`crate::trace_merge`]), writes one Chrome trace / Perfetto JSON file and
//! prints each rank's offset and bound, the WAN codec's work per rank and
//! operation against transfer ([`crate::trace_codec`]) and the causality check
//! (an error when a chunk arrives before it was sent, beyond the bounds).

use std::path::PathBuf;

use anyhow::{bail, Context};

use crate::trace_codec::codec_use;
use crate::trace_merge::{merge, read_ranks};

#[derive(clap::Args)]
pub struct TraceArgs {
    /// The directory `CAUSEWAY_TRACE` named.
    dir: PathBuf,
    /// Where to write the merged trace (default: DIR/merged.json).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Take this bound (ns) where a rank's clock offset is unknown (no agent),
    /// e.g. 0 when every rank ran on one host; unknown pairs are not checked otherwise.
    #[arg(long)]
    assume_bound: Option<f64>,
}

pub fn run(args: &TraceArgs) -> anyhow::Result<()> {
    let ranks = read_ranks(&args.dir).map_err(anyhow::Error::msg)?;
    if ranks.is_empty() {
        bail!("no rank-*.json files in {}", args.dir.display());
    }
    let (merged, c) = merge(&ranks, args.assume_bound);
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| args.dir.join("merged.json"));
    std::fs::write(&out, serde_json::to_string(&merged)?)
        .with_context(|| format!("writing {}", out.display()))?;
    for r in merged["metadata"]["ranks"].as_array().into_iter().flatten() {
        println!(
            "rank {}: offset {} ns, bound {} ({})",
            r["rank"],
            r["offset_ns"],
            r["bound_ns"]
                .as_f64()
                .map_or("unknown".to_string(), |b| format!("{b:.0} ns")),
            r["how"].as_str().unwrap_or("")
        );
    }
    let events = merged["traceEvents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for u in codec_use(&events) {
        println!(
            "rank {} op {}: {:.1} ms; encode {:.1} ms over {} chunks, {:.1} ms of it ({:.0} %) with an earlier chunk in flight; decode {:.1} ms",
            u.rank,
            u.op,
            u.op_ms,
            u.encode_ms,
            u.chunks,
            u.overlapped_ms,
            100.0 * u.overlapped_ms / u.encode_ms.max(f64::MIN_POSITIVE),
            u.decode_ms
        );
    }
    println!(
        "{} chunks matched ({} checked, {} sends and {} receipts unmatched), smallest slack {:?} ns; wrote {}",
        c.matched, c.checked, c.unmatched_sends, c.unmatched_recvs, c.min_slack_ns, out.display()
    );
    if let Some((what, by)) = c.violations.first() {
        bail!(
            "{} chunks arrived before they were sent beyond the bound, e.g. {what} by {by:.0} ns",
            c.violations.len()
        );
    }
    Ok(())
}
