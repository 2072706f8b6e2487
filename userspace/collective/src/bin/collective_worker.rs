//! A rank that runs allreduces on known data and checks every result; used by the
//! fault and testbed tests. Reads torchrun's variables (`RANK`, `WORLD_SIZE`,
//! `MASTER_ADDR`, `MASTER_PORT`) and `CAUSEWAY_*` options from the environment.
//!
//! Prints one JSON line per completed iteration and a final line (with the peak
//! resident set, `peak_rss_bytes`); exits 0 when all
//! results were right, 3 on a collective error (the line names the blamed peer).
//! With `--shrink-iters M`, a collective error is followed by `shrink()` (a
//! `shrunk` line, or `shrink_error` and exit 5) and M more checked allreduces
//! on the survivors.

use std::time::Instant;

use anyhow::{bail, Result};
use causeway_collective::cli;
use causeway_collective::{CollectiveError, Communicator, ReduceOp};
use serde_json::json;

const USAGE: &str = "causeway-collective-worker [--elems N] [--iters K] [--op sum|max] [--shrink-iters M]\n\
  Runs K allreduces of N f32 per rank on known data, checks each result.\n\
  With M > 0, an allreduce error is followed by shrink() and M checked allreduces on the survivors.\n\
  Example: RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 causeway-collective-worker --elems 1000";

fn main() -> std::process::ExitCode {
    causeway_core::cli_main::run(|| {
        // The engine writes to its TCP connections with writev, which raises
        // SIGPIPE when a peer has gone: keep it ignored, so that a dead peer
        // is an error naming it rather than a silent end of this process.
        causeway_core::cli_main::ignore_sigpipe();
        causeway_collective::cli::init_logging();
        run()
    })
}

fn run() -> Result<()> {
    let args = cli::Args::parse(&["elems", "iters", "op", "shrink-iters"], USAGE)?;
    let elems: usize = args.num("elems", 1 << 16)?;
    let iters: usize = args.num("iters", 3)?;
    let shrink_iters: usize = args.num("shrink-iters", 0)?;
    let op = match args.get("op").unwrap_or("sum") {
        "sum" => ReduceOp::Sum,
        "max" => ReduceOp::Max,
        o => bail!("--op {o}: expected sum or max"),
    };
    let t = Instant::now();
    let mut comm = match Communicator::from_env() {
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
    if let Some(e) = allreduces(&comm, elems, iters, op)? {
        if shrink_iters == 0 {
            std::process::exit(3);
        }
        let t = Instant::now();
        let next = match comm.shrink() {
            Ok(c) => c,
            Err(e) => {
                cli::outln(json!({"event": "shrink_error", "rank": r, "error": e.to_string()}))?;
                std::process::exit(5);
            }
        };
        let old = comm.allreduce(&mut [1.0f32], op);
        cli::outln(
            json!({"event": "shrunk", "old_rank": r, "rank": next.rank(), "world": next.world_size(),
            "epoch": next.epoch(), "lost": next.membership().lost, "domains": next.topology().domains().len(),
            "took_s": t.elapsed().as_secs_f64(), "old_comm": format!("{old:?}"),
            "failed_with": e.to_string(), "failed_peer": e.peer()}),
        )?;
        comm = next;
        if allreduces(&comm, elems, shrink_iters, op)?.is_some() {
            std::process::exit(3);
        }
    }
    cli::outln(json!({"event": "done", "rank": comm.rank(), "peak_rss_bytes": peak_rss_bytes()}))?;
    Ok(())
}

/// `iters` checked allreduces, one line each; `Some` after a collective error
/// (printed); exits 4 on a wrong value.
fn allreduces(
    comm: &Communicator,
    elems: usize,
    iters: usize,
    op: ReduceOp,
) -> Result<Option<CollectiveError>> {
    let (r, n) = (comm.rank(), comm.world_size());
    for it in 0..iters {
        // Small integers: every sum is exact, so the check is exact too.
        let mut v: Vec<f32> = (0..elems).map(|i| ((i + r * 7 + it) % 13) as f32).collect();
        let t = Instant::now();
        if let Err(e) = comm.allreduce(&mut v, op) {
            cli::outln(
                json!({"event": "error", "rank": r, "iter": it, "error": e.to_string(), "peer": e.peer(), "after_s": t.elapsed().as_secs_f64(), "rdma": rdma_states()}),
            )?;
            return Ok(Some(e));
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
        let s = t.elapsed().as_secs_f64();
        let c = causeway_collective::stripe::counters();
        cli::outln(
            json!({"event": "iter", "rank": r, "epoch": comm.epoch(), "iter": it, "s": s,
            "stripe": format!("{c:?}"),
            "bytes_per_path": c.bytes_per_path, "weights": c.weights,
            "resent_bytes": c.resent_bytes, "path_down": c.path_down}),
        )?;
    }
    Ok(None)
}

/// The state of each RDMA connection (empty without the `rdma` feature or
/// RDMA links): what a stalled transfer was waiting for.
fn rdma_states() -> Vec<String> {
    #[cfg(feature = "rdma")]
    {
        causeway_collective::transport::rdma::states()
    }
    #[cfg(not(feature = "rdma"))]
    {
        Vec::new()
    }
}

/// The process's peak resident set (`VmHWM` of /proc/self/status), when readable.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
