//! A rank that runs allreduces on known data and checks every result; used by the
//! fault and testbed tests. Reads torchrun's variables (`RANK`, `WORLD_SIZE`,
//! `MASTER_ADDR`, `MASTER_PORT`) and `CAUSEWAY_*` options from the environment.
//!
//! Prints one JSON line per completed iteration and a final line (with the peak
//! resident set, `peak_rss_bytes`); exits 0 when all
//! results were right, 3 on a collective error (the line names the blamed peer).

use std::time::Instant;

use anyhow::{bail, Result};
use causeway_collective::cli;
use causeway_collective::{Communicator, ReduceOp};
use serde_json::json;

const USAGE: &str = "causeway-collective-worker [--elems N] [--iters K] [--op sum|max]\n\
  Runs K allreduces of N f32 per rank on known data, checks each result.\n\
  Example: RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 causeway-collective-worker --elems 1000";

fn main() -> std::process::ExitCode {
    causeway_core::cli_main::run(|| {
        // The engine writes to its TCP connections with writev, which raises
        // SIGPIPE when a peer has gone: keep it ignored, so that a dead peer
        // is an error naming it rather than a silent end of this process.
        causeway_core::cli_main::ignore_sigpipe();
        run()
    })
}

fn run() -> Result<()> {
    let args = cli::Args::parse(&["elems", "iters", "op"], USAGE)?;
    let elems: usize = args.num("elems", 1 << 16)?;
    let iters: usize = args.num("iters", 3)?;
    let op = match args.get("op").unwrap_or("sum") {
        "sum" => ReduceOp::Sum,
        "max" => ReduceOp::Max,
        o => bail!("--op {o}: expected sum or max"),
    };
    let t = Instant::now();
    let comm = match Communicator::from_env() {
        Ok(c) => c,
        Err(e) => {
            cli::outln(
                json!({"event": "error", "stage": "init", "error": e.to_string(), "peer": e.peer()}),
            )?;
            std::process::exit(3);
        }
    };
    let (r, n) = (comm.rank(), comm.world_size());
    cli::outln(
        json!({"event": "ready", "rank": r, "world": n, "domain": comm.domain_of(r),
        "algorithm": format!("{:?}", comm.allreduce_algorithm::<f32>(elems)), "init_s": t.elapsed().as_secs_f64()}),
    )?;
    for it in 0..iters {
        // Small integers: every sum is exact, so the check is exact too.
        let mut v: Vec<f32> = (0..elems).map(|i| ((i + r * 7 + it) % 13) as f32).collect();
        let t = Instant::now();
        if let Err(e) = comm.allreduce(&mut v, op) {
            cli::outln(
                json!({"event": "error", "rank": r, "iter": it, "error": e.to_string(), "peer": e.peer(), "after_s": t.elapsed().as_secs_f64()}),
            )?;
            std::process::exit(3);
        }
        let want = |i: usize| -> f32 {
            let vals = (0..n).map(|q| ((i + q * 7 + it) % 13) as f32);
            if op == ReduceOp::Sum {
                vals.sum()
            } else {
                vals.fold(f32::MIN, f32::max)
            }
        };
        if let Some(i) = (0..elems).find(|&i| v[i] != want(i)) {
            cli::outln(
                json!({"event": "wrong", "rank": r, "iter": it, "index": i, "got": v[i], "want": want(i)}),
            )?;
            std::process::exit(4);
        }
        cli::outln(
            json!({"event": "iter", "rank": r, "iter": it, "s": t.elapsed().as_secs_f64()}),
        )?;
    }
    cli::outln(json!({"event": "done", "rank": r, "peak_rss_bytes": peak_rss_bytes()}))?;
    Ok(())
}

/// The process's peak resident set (`VmHWM` of /proc/self/status), when readable.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
