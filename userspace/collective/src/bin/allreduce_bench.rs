//! Allreduce benchmark worker: run one per rank with torchrun's variables, e.g.
//! `RANK=0 WORLD_SIZE=4 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 CAUSEWAY_DOMAIN=east
//! causeway-allreduce-bench --sizes 1mb,16mb --iters 5`. Rank 0 prints one JSON line
//! per size: median time, algbw and busbw (bytes × 2(n-1)/n / time), the same
//! fields as `bench/gloo_allreduce.py` prints for PyTorch's Gloo; every rank
//! prints an `iters` line with its wall-clock call and return times (the
//! warm-up iterations' separately) and the process CPU time (all threads)
//! its timed calls took.
//!
//! `--op broadcast` times a broadcast from rank 0 instead: with 2 ranks, a
//! one-way stream of `CAUSEWAY_CHUNK_BYTES` messages from rank 0 to rank 1
//! (`cargo xtask bench rdma`'s point-to-point stream); every rank must end
//! with rank 0's input.
//!
//! Every result is checked, outside the timed part: with a lossless WAN codec
//! (`CAUSEWAY_WAN_CODEC` none, lz4, zstd) each element must be exactly the sum
//! of the ranks' inputs, or the worker fails naming the element; a lossy codec
//! cannot be checked exactly, and the JSON says `"checked": false`.

use std::time::Instant;

use anyhow::{Context, Result};
use causeway_collective::cli;
use causeway_collective::{CommBuf, Communicator, Options, ReduceOp};
use serde_json::json;

const USAGE: &str = "causeway-allreduce-bench [--sizes 64kb,1mb,16mb] [--iters 5] [--warmup 1] [--op allreduce|broadcast] [--buffer owned|caller|registered]\n\
  Sizes are bytes of f32 per rank (64kb = 65536). --buffer: the async calls on an owned Vec (default),\n\
  the blocking calls on the caller's Vec, or on a CommBuf (env CAUSEWAY_BENCH_BUFFER too).\n\
  Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, CAUSEWAY_DOMAIN and the CAUSEWAY_* options.\n\
  Rank 0 prints JSON lines.";

/// Which memory the operations run on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Buffer {
    /// `allreduce_async(Vec)`: the engine owns the buffer during the call.
    Owned,
    /// `allreduce(&mut [f32])` on a plain `Vec`: lent to the engine.
    Caller,
    /// The same on a `CommBuf` (registered once for RDMA).
    Registered,
}

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
    let args = cli::Args::parse(&["sizes", "iters", "warmup", "op", "buffer"], USAGE)?;
    let kind = args
        .get("buffer")
        .map(str::to_string)
        .or_else(|| std::env::var("CAUSEWAY_BENCH_BUFFER").ok())
        .unwrap_or_else(|| "owned".into());
    let kind = match kind.as_str() {
        "owned" => Buffer::Owned,
        "caller" => Buffer::Caller,
        "registered" => Buffer::Registered,
        other => anyhow::bail!("--buffer {other}: owned, caller or registered\n{USAGE}"),
    };
    let broadcast = match args.get("op").unwrap_or("allreduce") {
        "allreduce" => false,
        "broadcast" => true,
        other => anyhow::bail!("--op {other}: allreduce or broadcast\n{USAGE}"),
    };
    let sizes: Vec<usize> = args
        .get("sizes")
        .unwrap_or("64kb,1mb,16mb")
        .split(',')
        .map(cli::parse_size)
        .collect::<Result<_>>()
        .context("--sizes")?;
    let iters: usize = args.num("iters", 5)?;
    let warmup: usize = args.num("warmup", 1)?;
    let t0 = Instant::now();
    let comm = Communicator::from_env().context("joining the communicator")?;
    // The communicator has accepted these options (and reported a refusal to
    // the other ranks): only the codec is read again here.
    let checked = Options::from_env()
        .context("the CAUSEWAY_* options")?
        .wan_codec
        .is_lossless();
    let (r, n) = (comm.rank(), comm.world_size());
    let init_s = t0.elapsed().as_secs_f64();
    let wan_probe_mbit = 8.0 / comm.cost_model().inter_domain.beta / 1e6;
    if r == 0 {
        let m = comm.cost_model();
        let link = |c: causeway_collective::schedule::sim::LinkCost| json!({"alpha_us": c.alpha * 1e6, "gbit_s": 8.0 / c.beta / 1e9});
        cli::outln(
            json!({"impl": "causeway", "event": "init", "world": n, "init_s": t0.elapsed().as_secs_f64(),
            "cost": {"host": link(m.intra_host), "domain": link(m.intra_domain), "wan": link(m.inter_domain)}}),
        )?;
    }
    for &bytes in &sizes {
        let elems = (bytes / 4).max(1);
        let input = |k: usize| {
            if broadcast && r != 0 {
                -1.0
            } else {
                (k % 7) as f32
            }
        };
        let mut buf: Vec<f32> = (0..elems).map(input).collect();
        let mut registered =
            (kind == Buffer::Registered).then(|| CommBuf::from_vec(std::mem::take(&mut buf)));
        let mut times = Vec::with_capacity(iters);
        let (mut starts, mut ends) = (Vec::new(), Vec::new());
        let (mut warm_starts, mut warm_ends) = (Vec::new(), Vec::new());
        let mut cpu_s = 0.0;
        for i in 0..warmup + iters {
            comm.barrier().context("barrier")?;
            let (t, start, cpu) = (Instant::now(), unix_ns(), process_cpu_s()?);
            match (kind, &mut registered) {
                (Buffer::Owned, _) => {
                    buf = if broadcast {
                        comm.broadcast_async(buf, 0)
                            .context("broadcast")?
                            .wait()
                            .context("broadcast")?
                    } else {
                        comm.allreduce_async(buf, ReduceOp::Sum)
                            .wait()
                            .context("allreduce")?
                    };
                }
                (_, reg) => {
                    let b: &mut [f32] = match reg {
                        Some(r) => r,
                        None => &mut buf,
                    };
                    if broadcast {
                        comm.broadcast(b, 0).context("broadcast")?;
                    } else {
                        comm.allreduce(b, ReduceOp::Sum).context("allreduce")?;
                    }
                }
            }
            if i >= warmup {
                cpu_s += process_cpu_s()? - cpu;
                times.push(t.elapsed().as_secs_f64());
                starts.push(start);
                ends.push(unix_ns());
            } else {
                warm_starts.push(start);
                warm_ends.push(unix_ns());
            }
            let b: &mut [f32] = match &mut registered {
                Some(r) => r,
                None => &mut buf,
            };
            if broadcast {
                check_broadcast(b).with_context(|| format!("{bytes} bytes, iteration {i}"))?;
                b.iter_mut().enumerate().for_each(|(k, x)| *x = input(k));
            } else {
                if checked {
                    check(b, i, n).with_context(|| format!("{bytes} bytes, iteration {i}"))?;
                }
                b.iter_mut().for_each(|x| *x = 1.0);
            }
        }
        let in_order = times.clone();
        times.sort_by(f64::total_cmp);
        let median = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
        let algbw = (elems * 4) as f64 / median / 1e9;
        let busbw = algbw * 2.0 * (n as f64 - 1.0) / n as f64;
        // Every rank's call and return times on the wall clock: on one machine
        // (the testbed) the harness can line the ranks up.
        cli::outln(
            json!({"impl": "causeway", "event": "iters", "op": if broadcast { "broadcast" } else { "allreduce" }, "rank": r, "bytes": elems * 4,
            "start_unix_ns": starts, "end_unix_ns": ends, "times_s": in_order,
            "warmup_start_unix_ns": warm_starts, "warmup_end_unix_ns": warm_ends,
            "cpu_s": cpu_s}),
        )?;
        if r == 0 {
            // What the kernel says of the WAN path after this size (rank 0's
            // bulk connections; `Communicator::link_estimates`).
            let link = comm.link_estimates().map(|e| estimate_json(&e));
            let per_path: Vec<_> = comm
                .path_estimates()
                .iter()
                .map(|e| e.as_ref().map(estimate_json))
                .collect();
            cli::outln(
                json!({"impl": "causeway", "world": n, "bytes": elems * 4, "link_estimate": link, "path_estimates": per_path, "dtype": "float32", "iters": iters,
                "median_s": median, "min_s": times.first(), "max_s": times.last(),
                "algbw_GBps": algbw, "busbw_GBps": busbw, "times_s": in_order, "checked": checked,
                "init_s": init_s, "wan_probe_mbit": wan_probe_mbit,
                "stripe_bytes_per_path": causeway_collective::stripe::counters().bytes_per_path,
                "stripe_resent_bytes": causeway_collective::stripe::counters().resent_bytes,
                "stripe_split_frames": causeway_collective::stripe::counters().split_frames,
                "stripe_path_down": causeway_collective::stripe::counters().path_down,
                "algorithm": format!("{:?}", comm.allreduce_algorithm::<f32>(elems))}),
            )?;
        }
    }
    Ok(())
}

/// A WAN estimate as the bench prints it.
fn estimate_json(e: &causeway_collective::LinkEstimate) -> serde_json::Value {
    json!({
    "rate_mbit": e.rate_bps / 1e6, "goodput_mbit": e.goodput_bps / 1e6,
    "rtt_ms": e.rtt.as_secs_f64() * 1e3, "min_rtt_ms": e.min_rtt.as_secs_f64() * 1e3,
    "samples": e.samples, "retransmits": e.retransmits, "losses": e.losses,
    "loss_based_cc": e.loss_based,
    "pacing_mbit_per_conn": e.pacing_per_socket.map(|p| p as f64 * 8e-6)})
}

/// The result of iteration `iter` on `n` ranks: each rank put in `k % 7` at
/// element k in the first iteration and 1 in the others, so element k must be
/// `n · (k % 7)` or `n` (small integers: exact in f32 whatever the order).
fn check(result: &[f32], iter: usize, n: usize) -> Result<()> {
    let want = |k: usize| n as f32 * if iter == 0 { (k % 7) as f32 } else { 1.0 };
    match result
        .iter()
        .enumerate()
        .find(|&(k, &x)| x.to_bits() != want(k).to_bits())
    {
        None => Ok(()),
        Some((k, x)) => anyhow::bail!("wrong result: element {k} is {x}, want {}", want(k)),
    }
}

/// The result of a broadcast from rank 0, whose input had `k % 7` at element k.
fn check_broadcast(result: &[f32]) -> Result<()> {
    match result
        .iter()
        .enumerate()
        .find(|&(k, &x)| x.to_bits() != ((k % 7) as f32).to_bits())
    {
        None => Ok(()),
        Some((k, x)) => anyhow::bail!("wrong broadcast: element {k} is {x}, want {}", k % 7),
    }
}

/// CPU time of this process (every thread: the engine's included), seconds.
fn process_cpu_s() -> Result<f64> {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .context("clock_gettime(CLOCK_PROCESS_CPUTIME_ID)")?;
    Ok(t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
