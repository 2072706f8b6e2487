//! `cargo xtask bench torch [PROFILE...] [--runs N] [--steps N]`: the example
//! DDP training (`userspace/python/examples/train.py`, 17 MiB of gradients)
//! on the two-domain testbed, `causeway` vs `gloo` backend, same seed, same
//! run. Each rank is a `torchrun --nnodes 4 --nproc-per-node 1` agent in its
//! host namespace; `causeway+bf16` is the causeway backend with the compressed
//! DDP hook (bf16 across domains). Prints per backend the median step time (median and range
//! over the runs), steps and time to the target accuracy, final accuracy, and
//! Gloo's step time divided by Causeway's.

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::{cmd, python, testbed::Testbed};

const MASTER_PORT: &str = "29510";
/// (label, backend, codec of the compressed DDP hook).
const BACKENDS: [(&str, &str, Option<&str>); 3] = [
    ("causeway", "causeway", None),
    ("causeway+bf16", "causeway", Some("bf16")),
    ("gloo", "gloo", None),
];

struct Args {
    profiles: Vec<String>,
    runs: usize,
    steps: usize,
}

fn parse(extra: &[String]) -> Result<Args> {
    let mut a = Args {
        profiles: Vec::new(),
        runs: 3,
        steps: 24,
    };
    let mut it = extra.iter();
    while let Some(x) = it.next() {
        let mut num = |name: &str| -> Result<usize> {
            it.next()
                .with_context(|| format!("{name} needs a value"))?
                .parse()
                .with_context(|| format!("{name} needs a number"))
        };
        match x.as_str() {
            "--runs" => a.runs = num("--runs")?.max(1),
            "--steps" => a.steps = num("--steps")?.max(2),
            p => a.profiles.push(p.to_string()),
        }
    }
    if a.profiles.is_empty() {
        a.profiles = vec!["wan40".into(), "lossy80".into()];
    }
    Ok(a)
}

pub fn run(extra: &[String]) -> Result<()> {
    if !cmd::is_root() {
        bail!("the torch bench builds network namespaces: run it as root");
    }
    let args = parse(extra)?;
    let py = python::python()?;
    python::install_package(&py)?;
    cmd::run(cmd::cargo().args(["build", "--release", "-p", "causeway-netsim", "--bins"]))?;
    let script = python::package_dir().join("examples").join("train.py");
    let bar = crate::progress::steps(
        (args.profiles.len() * args.runs * BACKENDS.len()) as u64,
        "bench torch",
    );
    for profile in &args.profiles {
        let bed = Testbed::up("torch", profile)?;
        crate::bench_allreduce::tune_hosts(&bed)?;
        let mut results: Vec<(&str, Vec<Value>)> = Vec::new();
        for (label, _, _) in BACKENDS {
            results.push((label, Vec::new()));
        }
        // Interleaved runs: a change in the machine's load hits both backends.
        for run in 0..args.runs {
            for ((label, out), (_, backend, codec)) in results.iter_mut().zip(BACKENDS) {
                crate::progress::now(
                    &bar,
                    format!("{profile}: run {} of {}: {label}", run + 1, args.runs),
                );
                out.push(train(&bed, &py, &script, (backend, codec), args.steps)?);
                bar.inc(1);
            }
        }
        print_table(profile, &bed, &results, args.steps);
        check(profile, &results)?;
    }
    Ok(())
}

/// One training run on every host; rank 0's summary.
fn train(
    bed: &Testbed,
    py: &std::path::Path,
    script: &std::path::Path,
    (backend, codec): (&str, Option<&str>),
    steps: usize,
) -> Result<Value> {
    let world = bed.hosts.len().to_string();
    let mut children = Vec::new();
    for rank in 0..bed.hosts.len() {
        let mut c = bed.rank_command(rank, MASTER_PORT, py);
        c.args(["-m", "torch.distributed.run", "--nnodes", &world])
            .args(["--nproc-per-node", "1", "--node-rank", &rank.to_string()])
            .args([
                "--master-addr",
                &bed.hosts[0].ip,
                "--master-port",
                MASTER_PORT,
            ])
            .arg(script)
            .args(["--backend", backend, "--steps", &steps.to_string()])
            .args(["--eval-every", "3"])
            .args(codec.map(|c| ["--compress", c]).into_iter().flatten())
            .env("GLOO_SOCKET_IFNAME", "eth0")
            .env("OMP_NUM_THREADS", "1");
        children.push(c.spawn().with_context(|| format!("starting rank {rank}"))?);
    }
    let mut summary = None;
    let mut failed = Vec::new();
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: String = err.lines().rev().take(15).collect::<Vec<_>>().join("\n");
            failed.push(format!("rank {rank} ({}): {tail}", out.status));
        }
        if rank == 0 {
            summary = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|v| v["event"] == "summary");
        }
    }
    if !failed.is_empty() {
        bail!("{backend} training failed: {}", failed.join("\n"));
    }
    summary.context("rank 0 printed no summary")
}

fn stats(runs: &[Value], key: &str) -> (f64, f64, f64) {
    let mut v: Vec<f64> = runs.iter().filter_map(|r| r[key].as_f64()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// Every variant must have trained the same model as Gloo: the same final
/// accuracy on every run, and parameters that agree to float reordering
/// (exact reduction) or to the codec's rounding (bf16 hook).
fn check(profile: &str, results: &[(&str, Vec<Value>)]) -> Result<()> {
    let runs = |label: &str| {
        results
            .iter()
            .find(|(n, _)| *n == label)
            .map(|(_, r)| r.as_slice())
            .unwrap_or_default()
    };
    let field = |r: &Value, key: &str| r[key].as_f64().unwrap_or(f64::NAN);
    let reference = runs("gloo")
        .first()
        .context("bench torch: no gloo run to check against")?;
    let (acc, sum) = (
        field(reference, "final_accuracy"),
        field(reference, "parameter_sum"),
    );
    for (label, tolerance) in [("gloo", 1e-6), ("causeway", 1e-6), ("causeway+bf16", 1e-3)] {
        for r in runs(label) {
            let (a, p) = (field(r, "final_accuracy"), field(r, "parameter_sum"));
            let rel = ((p - sum) / sum).abs();
            let same = (a - acc).abs() <= 0.01 && rel <= tolerance; // false on NaN
            if !same {
                bail!(
                    "bench torch: {profile}: {label} ended at accuracy {a} and parameter sum {p}, \
                     gloo at {acc} and {sum} (relative {rel:.1e}, allowed {tolerance:.0e})"
                );
            }
        }
    }
    Ok(())
}

fn print_table(profile: &str, bed: &Testbed, results: &[(&str, Vec<Value>)], steps: usize) {
    let grad = results
        .first()
        .and_then(|(_, r)| r.first())
        .and_then(|s| s["gradient_bytes"].as_u64())
        .unwrap_or(0);
    let target = results
        .first()
        .and_then(|(_, r)| r.first())
        .and_then(|s| s["target_accuracy"].as_f64())
        .unwrap_or(f64::NAN);
    println!(
        "\nDDP training, 2 domains x 2 hosts, profile {profile} ({:.0} Mbit/s, RTT {:.0} ms), {:.1} MiB of float32 gradients, {steps} steps, {} runs per backend (median [min-max] over runs; step time = median over a run's steps after the first)",
        bed.rate_mbit,
        2.0 * bed.delay_ms,
        grad as f64 / (1 << 20) as f64,
        results.first().map_or(0, |(_, r)| r.len())
    );
    println!("| backend | step s | steps to {target:.2} accuracy | time to accuracy s | final accuracy | parameter sum |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (backend, runs) in results {
        let (m, lo, hi) = stats(runs, "median_step_s");
        let (tm, tlo, thi) = stats(runs, "time_to_target_s");
        let to = runs
            .first()
            .and_then(|r| r["steps_to_target"].as_u64())
            .map_or("not reached".into(), |s| s.to_string());
        let acc = runs
            .first()
            .and_then(|r| r["final_accuracy"].as_f64())
            .unwrap_or(f64::NAN);
        let sum = runs
            .first()
            .and_then(|r| r["parameter_sum"].as_f64())
            .unwrap_or(f64::NAN);
        println!(
            "| {backend} | {m:.3} [{lo:.3}-{hi:.3}] | {to} | {tm:.1} [{tlo:.1}-{thi:.1}] | {acc:.4} | {sum:.6} |"
        );
    }
    let step = |b: &str| {
        results
            .iter()
            .find(|(n, _)| *n == b)
            .map(|(_, r)| stats(r, "median_step_s").0)
            .unwrap_or(f64::NAN)
    };
    println!(
        "gloo step time / causeway step time: {:.2}x (with the bf16 hook: {:.2}x)",
        step("gloo") / step("causeway"),
        step("gloo") / step("causeway+bf16")
    );
}
