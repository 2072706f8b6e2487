//! A small data-parallel training run: logistic regression on a synthetic,
//! seeded dataset, full-batch gradient descent, the gradient averaged with
//! `allreduce_with` and the codec under test across domains. Used by the
//! convergence test on the namespace testbed and by `cargo xtask bench codecs`
//! (its gradients are the "real gradients" the lossless ratios are measured on).
//!
//! Every rank holds its own shard of the data (seeded by rank); the model
//! (`--dim` weights and a bias) starts at zero on every rank and stays
//! identical on all of them, because every rank applies the same, bit-identical
//! averaged gradient. Prints JSON lines: `ready`, `loss` every `--report`
//! steps, `done` with the final loss over the whole dataset (computed with an
//! uncompressed allreduce), and exits 3 on a collective error.

use std::io::Write as _;
use std::time::Instant;

use anyhow::{Context, Result};
use causeway_collective::codec::CodecSpec;
use causeway_collective::{cli, CallOptions, Communicator, ReduceOp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

const USAGE: &str = "causeway-train [--codec SPEC] [--feedback 0|1] [--steps N] [--lr X] [--dim D] [--samples N] [--report K] [--dump-grads FILE]\n\
  Data-parallel logistic regression; the averaged gradient crosses domains with --codec\n\
  (none, bf16, fp16, int8, topk:1%, lz4, zstd; CAUSEWAY_WAN_CODEC when not given),\n\
  with error feedback when --feedback 1. --dump-grads: rank 0 appends its raw gradients (f32 LE).";

/// Rows of features and labels of one rank's shard.
struct Shard {
    x: Vec<f32>,
    y: Vec<f32>,
    dim: usize,
}

fn normal(rng: &mut StdRng) -> f32 {
    let u: f32 = rng.gen_range(f32::EPSILON..1.0);
    let v: f32 = rng.gen();
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
}

fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}

/// `samples` rows of `dim` features (feature j scaled by 1/(1 + j/32), so that
/// gradient magnitudes differ widely across coordinates), labels drawn from a
/// fixed true model shared by every rank.
fn shard(rank: usize, samples: usize, dim: usize) -> Shard {
    let mut truth_rng = StdRng::seed_from_u64(0x5eed);
    let truth: Vec<f32> = (0..dim).map(|_| 2.0 * normal(&mut truth_rng)).collect();
    let mut rng = StdRng::seed_from_u64(1000 + rank as u64);
    let mut x = Vec::with_capacity(samples * dim);
    let mut y = Vec::with_capacity(samples);
    for _ in 0..samples {
        let row: Vec<f32> = (0..dim)
            .map(|j| normal(&mut rng) / (1.0 + j as f32 / 32.0))
            .collect();
        let z: f32 = row.iter().zip(&truth).map(|(a, b)| a * b).sum::<f32>() / 4.0;
        y.push(if rng.gen::<f32>() < sigmoid(z) {
            1.0
        } else {
            0.0
        });
        x.extend(row);
    }
    Shard { x, y, dim }
}

/// L2 penalty on the weights (not the bias): the objective is strongly convex,
/// so every codec that converges at all converges to the same optimum.
const L2: f32 = 0.001;

/// Mean log-loss of `w` (weights then bias) on the shard plus the L2 penalty, and its gradient.
fn loss_and_grad(s: &Shard, w: &[f32], grad: &mut [f32]) -> f64 {
    grad.fill(0.0);
    let n = s.y.len();
    let mut loss = 0f64;
    for (row, &y) in s.x.chunks_exact(s.dim).zip(&s.y) {
        let z: f32 = row.iter().zip(w).map(|(a, b)| a * b).sum::<f32>() + w[s.dim];
        let p = sigmoid(z);
        loss += f64::from(-(y * p.max(1e-7).ln() + (1.0 - y) * (1.0 - p).max(1e-7).ln()));
        let e = (p - y) / n as f32;
        for (g, a) in grad.iter_mut().zip(row) {
            *g += e * a;
        }
        grad[s.dim] += e;
    }
    let mut penalty = 0f64;
    for (g, wi) in grad.iter_mut().zip(&w[..s.dim]) {
        *g += L2 * wi;
        penalty += f64::from(0.5 * L2 * wi * wi);
    }
    loss / n as f64 + penalty
}

/// The loss over every rank's data (uncompressed allreduce of the local means).
fn global_loss(comm: &Communicator, s: &Shard, w: &[f32]) -> Result<f64> {
    let mut scratch = vec![0f32; w.len()];
    let mut l = [loss_and_grad(s, w, &mut scratch)];
    comm.allreduce_with(&mut l, ReduceOp::Avg, &CallOptions::codec(CodecSpec::None))?;
    Ok(l[0])
}

fn main() -> std::process::ExitCode {
    causeway_core::cli_main::run(|| {
        causeway_core::cli_main::ignore_sigpipe();
        causeway_collective::cli::init_logging();
        run()
    })
}

fn run() -> Result<()> {
    let keys = [
        "codec",
        "feedback",
        "steps",
        "lr",
        "dim",
        "samples",
        "report",
        "dump-grads",
    ];
    let args = cli::Args::parse(&keys, USAGE)?;
    let steps: usize = args.num("steps", 400)?;
    let dim: usize = args.num("dim", 1024)?;
    let samples: usize = args.num("samples", 512)?;
    let report: usize = args.num("report", 50)?;
    let feedback = args.num::<u8>("feedback", 1)? != 0;
    let lr: f32 = args
        .get("lr")
        .unwrap_or("2")
        .parse()
        .context("--lr: a number")?;
    let mut opts = CallOptions::default();
    if let Some(c) = args.get("codec") {
        opts.codec = Some(CodecSpec::parse(c).with_context(|| format!("--codec {c}"))?);
    }
    if feedback {
        opts = opts.with_feedback(0);
    }
    let t = Instant::now();
    let comm = match Communicator::from_env() {
        Ok(c) => c,
        Err(e) => {
            cli::outln(json!({"event": "error", "stage": "init", "error": e.to_string()}))?;
            std::process::exit(3);
        }
    };
    let r = comm.rank();
    let data = shard(r, samples, dim);
    let mut dump = match args.get("dump-grads") {
        Some(p) if r == 0 => Some(std::fs::File::create(p).with_context(|| format!("create {p}"))?),
        _ => None,
    };
    cli::outln(
        json!({"event": "ready", "rank": r, "domain": comm.domain_of(r),
        "codec": opts.codec.map(|c| c.to_string()), "feedback": feedback, "init_s": t.elapsed().as_secs_f64()}),
    )?;
    let mut w = vec![0f32; dim + 1];
    let mut g = vec![0f32; dim + 1];
    let t = Instant::now();
    for step in 0..steps {
        loss_and_grad(&data, &w, &mut g);
        if let Some(f) = dump.as_mut() {
            let bytes: Vec<u8> = g.iter().flat_map(|v| v.to_le_bytes()).collect();
            f.write_all(&bytes).context("write gradients")?;
        }
        if let Err(e) = comm.allreduce_with(&mut g, ReduceOp::Avg, &opts) {
            cli::outln(
                json!({"event": "error", "rank": r, "step": step, "error": e.to_string(), "peer": e.peer()}),
            )?;
            std::process::exit(3);
        }
        for (wi, gi) in w.iter_mut().zip(&g) {
            *wi -= lr * gi;
        }
        if report > 0 && (step + 1) % report == 0 {
            let loss = global_loss(&comm, &data, &w)?;
            cli::outln(json!({"event": "loss", "rank": r, "step": step + 1, "loss": loss}))?;
        }
    }
    let loss = global_loss(&comm, &data, &w)?;
    let checksum = w
        .iter()
        .fold(0u64, |h, v| h.rotate_left(5) ^ u64::from(v.to_bits()));
    cli::outln(
        json!({"event": "done", "rank": r, "steps": steps, "loss": loss,
        "weights_hash": format!("{checksum:016x}"), "train_s": t.elapsed().as_secs_f64()}),
    )?;
    Ok(())
}
