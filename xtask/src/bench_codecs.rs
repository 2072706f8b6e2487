//! `cargo xtask bench codecs`: what WAN compression costs and buys.
//!
//! 1. Real gradients: `causeway-train` alone (a one-rank world on loopback)
//!    dumps every step's gradient (f32) to `target/codec-bench/grads.f32`.
//! 2. `causeway-codec-bench`: encode + decode GB/s on one core per codec,
//!    and the size each codec leaves of those gradients (lz4 / zstd ratio).
//! 3. With root: the 64 MiB allreduce of `causeway-allreduce-bench` on the
//!    two-domain testbed (`wan40`, `lossy80` by default), once per codec
//!    (`CAUSEWAY_WAN_CODEC`), side by side in one run; the time is taken
//!    across ranks as in `bench allreduce`, and compared with the lower
//!    bound for the compressed size: each WAN direction carries the encoded
//!    buffer once, T ≥ S·r·8/B (r = the codec's size / raw).

use std::process::Command;

use anyhow::{Context, Result};

use crate::bench_tls::load;
use crate::{bench_allreduce, cmd, testbed::Testbed};

/// (codec, encoded size / raw) of the allreduce part; the ratios are the
/// codecs' fixed ones (headers per 128 KiB frame included).
const WAN_CODECS: [(&str, f64); 4] = [
    ("none", 1.0),
    ("bf16", 0.5),
    ("int8", (256.0 + 4.0) / 1024.0),
    ("topk:1%", 0.02),
];
const BYTES: &str = "64M";

pub fn run(extra: &[String]) -> Result<()> {
    let profiles: Vec<String> = if extra.is_empty() {
        vec!["wan40".into(), "lossy80".into()]
    } else {
        extra.to_vec()
    };
    cmd::build_wan_bench_bins()?;
    let dir = cmd::root().join("target/codec-bench");
    std::fs::create_dir_all(&dir)?;
    let grads = dir.join("grads.f32");
    cmd::run(
        Command::new(cmd::bin_path("causeway-train", true))
            .args(["--report", "0", "--dump-grads"])
            .arg(&grads)
            .envs([
                ("RANK", "0"),
                ("WORLD_SIZE", "1"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "29539"),
                ("CAUSEWAY_PROBE", "0"),
            ]),
    )
    .context("causeway-train --dump-grads")?;
    println!("load before the codec bench: {}", load());
    crate::progress::run_child(
        Command::new(cmd::bin_path("causeway-codec-bench", true))
            .args(["--mib", "16", "--runs", "5", "--grads"])
            .arg(&grads),
        "bench codecs",
    )?;
    if !cmd::is_root() {
        eprintln!("bench: the allreduce part builds network namespaces: run as root for it");
        return Ok(());
    }
    let bar = crate::progress::steps(
        (profiles.len() * WAN_CODECS.len()) as u64,
        "bench codecs: allreduce",
    );
    for profile in &profiles {
        let bed = Testbed::up("cbench", profile)?;
        bench_allreduce::tune_hosts(&bed)?;
        let bound = 64.0 * 1024.0 * 1024.0 * 8.0 / (bed.rate_mbit * 1e6);
        println!(
            "\nallreduce 64 MiB f32, 2 domains x 2 hosts, {profile} ({:.0} Mbit/s, RTT {:.0} ms), 1 warm-up + 5 iterations, load at start {}",
            bed.rate_mbit,
            2.0 * bed.delay_ms,
            load()
        );
        println!("| codec | median s | [min–max] s | size / raw | bound for that size s | vs bound | vs none | load after |");
        println!("|---|---:|---|---:|---:|---:|---:|---|");
        let mut none = f64::NAN;
        for (codec, ratio) in WAN_CODECS {
            crate::progress::now(&bar, format!("{profile}: {codec}"));
            let (lo, t, hi) = allreduce(&bed, codec)?;
            bar.inc(1);
            if codec == "none" {
                none = t;
            }
            println!(
                "| {codec} | {t:.3} | [{lo:.3}–{hi:.3}] | {ratio:.3} | {:.3} | {:.2}x | {:.2}x | {} |",
                bound * ratio,
                t / (bound * ratio),
                none / t,
                load()
            );
        }
    }
    Ok(())
}

/// (min, median, max) over iterations of (last rank's return − last rank's
/// call), through `bench allreduce`'s runner.
fn allreduce(bed: &Testbed, codec: &str) -> Result<(f64, f64, f64)> {
    let bin = cmd::bin_path("causeway-allreduce-bench", true);
    let rows = bench_allreduce::run_world(bed, |_| {
        let mut c = Command::new(&bin);
        c.args(["--sizes", BYTES, "--iters", "5", "--warmup", "1"])
            .env("CAUSEWAY_WAN_CODEC", codec);
        c
    })
    .with_context(|| format!("allreduce with {codec}"))?;
    let row = rows
        .first()
        .with_context(|| format!("{codec}: no result"))?;
    let t = |k: &str| row[k].as_f64().with_context(|| format!("{codec}: no {k}"));
    Ok((t("time_min_s")?, t("time_s")?, t("time_max_s")?))
}
