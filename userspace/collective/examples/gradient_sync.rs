//! A training-like gradient sync: what a data-parallel training process does
//! with Causeway, without a model framework. Each step "computes" gradients
//! bucket by bucket (like a backward pass, last layer first), starts an
//! asynchronous allreduce of each bucket as soon as it is ready (overlapping
//! communication with the remaining compute), waits for all of them, and
//! applies an SGD update. Gradients are small integers, so every sum is exact
//! and each step is checked exactly; at the end every rank's parameters must
//! be bit-identical.
//!
//! Reads torchrun's variables (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
//! `MASTER_PORT`) and `CAUSEWAY_DOMAIN`. Prints one JSON line per event.
//!
//! ```text
//! RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
//!   cargo run --release -p causeway-collective --example gradient_sync -- --gradient 8mb --steps 5
//! ```

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use causeway_collective::{Communicator, ReduceOp};
use causeway_core::units;
use serde_json::json;

struct Args {
    /// Gradient size per step, bytes of f32.
    gradient_bytes: usize,
    steps: usize,
    /// Gradient buckets per step (DDP-style).
    buckets: usize,
    /// Simulated compute per bucket.
    compute: Duration,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        gradient_bytes: 16 << 20,
        steps: 10,
        buckets: 4,
        compute: Duration::from_millis(20),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let count = || -> Result<usize> {
            (value.parse()).with_context(|| format!("{flag} {value}: not a number"))
        };
        match flag.as_str() {
            // Sizes and durations with units (causeway_core::units): 16mb, 20ms.
            "--gradient" => {
                let bytes = units::parse_bytes(&value).context("--gradient")?;
                a.gradient_bytes = usize::try_from(bytes).context("--gradient")?;
            }
            "--steps" => a.steps = count()?,
            "--buckets" => a.buckets = count()?.max(1),
            "--compute" => a.compute = units::parse_duration(&value).context("--compute")?,
            other => {
                bail!("unknown option {other} (expected --gradient, --steps, --buckets, --compute)")
            }
        }
    }
    Ok(a)
}

/// The gradient of element `i` on `rank` at `step`: a small integer.
fn grad(rank: usize, step: usize, i: usize) -> f32 {
    ((i * 31 + rank * 7 + step * 3) % 17) as f32
}

/// Busy "compute" for `compute` that also fills the bucket.
fn backward(bucket: &mut [f32], offset: usize, rank: usize, step: usize, compute: Duration) {
    let until = Instant::now() + compute;
    for (k, g) in bucket.iter_mut().enumerate() {
        *g = grad(rank, step, offset + k);
    }
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

fn main() -> std::process::ExitCode {
    causeway_core::cli_main::run(|| {
        // The engine's writev to a peer that has gone must fail, not raise SIGPIPE.
        causeway_core::cli_main::ignore_sigpipe();
        run()
    })
}

fn run() -> Result<()> {
    let args = parse_args()?;
    let t0 = Instant::now();
    let comm = Communicator::from_env()
        .context("joining the job (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")?;
    let (rank, world) = (comm.rank(), comm.world_size());
    let elems = (args.gradient_bytes / 4).max(1);
    let per_bucket = elems.div_ceil(args.buckets);
    println!(
        "{}",
        json!({"event": "ready", "rank": rank, "world": world, "domain": comm.domain_of(rank),
               "algorithm": format!("{:?}", comm.allreduce_algorithm::<f32>(per_bucket)),
               "bytes_per_step": elems * 4, "init_s": t0.elapsed().as_secs_f64()})
    );
    let mut params = vec![0f32; elems];
    let lr = 0.5f32;
    for step in 0..args.steps {
        let t = Instant::now();
        let mut handles = Vec::with_capacity(args.buckets);
        // Backward pass: last bucket first, each allreduce starts while the
        // next bucket is still being computed.
        for b in (0..args.buckets).rev() {
            let start = (b * per_bucket).min(elems);
            let end = ((b + 1) * per_bucket).min(elems);
            let mut bucket = vec![0f32; end - start];
            backward(&mut bucket, start, rank, step, args.compute);
            handles.push((start, comm.allreduce_async(bucket, ReduceOp::Sum)));
        }
        let mut comm_wait = Duration::ZERO;
        for (start, h) in handles {
            let w = Instant::now();
            let summed = h
                .wait()
                .with_context(|| format!("step {step}: allreduce of bucket at {start}"))?;
            comm_wait += w.elapsed();
            for (k, g) in summed.iter().enumerate() {
                let i = start + k;
                let want: f32 = (0..world).map(|r| grad(r, step, i)).sum();
                if *g != want {
                    bail!("step {step}: element {i} summed to {g}, expected {want}");
                }
                params[i] -= lr * g / world as f32;
            }
        }
        println!(
            "{}",
            json!({"event": "step", "rank": rank, "step": step, "s": t.elapsed().as_secs_f64(),
                   "exposed_comm_s": comm_wait.as_secs_f64()})
        );
    }
    // Every rank must hold bit-identical parameters.
    let digest = params.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, p| {
        (h ^ u64::from(p.to_bits())).wrapping_mul(0x100_0000_01b3)
    });
    let halves = [(digest >> 32) as u32 as i64, (digest & 0xffff_ffff) as i64];
    let mut all = vec![0i64; 2 * world];
    comm.allgather(&halves, &mut all)
        .context("comparing parameter digests")?;
    let consistent = all.chunks(2).all(|c| c == halves);
    println!(
        "{}",
        json!({"event": "done", "rank": rank, "digest": format!("{digest:016x}"), "consistent": consistent,
                           "total_s": t0.elapsed().as_secs_f64()})
    );
    if !consistent {
        bail!("parameters differ between ranks: {all:?}");
    }
    Ok(())
}
