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

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::{cmd, testbed::Testbed};

/// (codec, encoded size / raw) of the allreduce part; the ratios are the
/// codecs' fixed ones (headers per 128 KiB frame included).
const WAN_CODECS: [(&str, f64); 4] = [
    ("none", 1.0),
    ("bf16", 0.5),
    ("int8", (256.0 + 4.0) / 1024.0),
    ("topk:1%", 0.02),
];
const BYTES: &str = "64M";
const MASTER_PORT: &str = "29540";

pub fn run(extra: &[String]) -> Result<()> {
    let profiles: Vec<String> = if extra.is_empty() {
        vec!["wan40".into(), "lossy80".into()]
    } else {
        extra.to_vec()
    };
    cmd::run(cmd::cargo().args([
        "build",
        "--release",
        "-p",
        "causeway-netsim",
        "-p",
        "causeway-collective",
        "--bins",
    ]))?;
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
    cmd::run(
        Command::new(cmd::bin_path("causeway-codec-bench", true))
            .args(["--mib", "16", "--runs", "5", "--grads"])
            .arg(&grads),
    )?;
    if !cmd::is_root() {
        eprintln!("bench: the allreduce part builds network namespaces: run as root for it");
        return Ok(());
    }
    for profile in &profiles {
        let bed = Testbed::up("cbench", profile)?;
        for h in &bed.hosts {
            cmd::run(Command::new("ip").args([
                "netns",
                "exec",
                &h.netns,
                "sysctl",
                "-q",
                "-w",
                "net.ipv4.tcp_slow_start_after_idle=0",
            ]))?;
        }
        let bound = 64.0 * 1024.0 * 1024.0 * 8.0 / (bed.rate_mbit * 1e6);
        println!(
            "\nallreduce 64 MiB f32, 2 domains x 2 hosts, {profile} ({:.0} Mbit/s, RTT {:.0} ms), 1 warm-up + 5 iterations, load at start {}",
            bed.rate_mbit,
            2.0 * bed.delay_ms,
            load()
        );
        println!("| codec | median s | [min–max] s | size / raw | bound for that size s | vs bound | vs none |");
        println!("|---|---:|---|---:|---:|---:|---:|");
        let mut none = f64::NAN;
        for (codec, ratio) in WAN_CODECS {
            let t = allreduce(&bed, codec)?;
            if codec == "none" {
                none = t.1;
            }
            println!(
                "| {codec} | {:.3} | [{:.3}–{:.3}] | {ratio:.3} | {:.3} | {:.2}x | {:.2}x |",
                t.1,
                t.0,
                t.2,
                bound * ratio,
                t.1 / (bound * ratio),
                none / t.1
            );
        }
    }
    Ok(())
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// (min, median, max) over iterations of (last rank's return − last rank's call).
fn allreduce(bed: &Testbed, codec: &str) -> Result<(f64, f64, f64)> {
    let bin = cmd::bin_path("causeway-allreduce-bench", true);
    let mut children = Vec::new();
    for rank in 0..bed.hosts.len() {
        let mut c = bed.rank_command(rank, MASTER_PORT, &bin);
        c.args(["--sizes", BYTES, "--iters", "5", "--warmup", "1"])
            .env("CAUSEWAY_WAN_CODEC", codec);
        children.push(c.spawn().with_context(|| format!("starting rank {rank}"))?);
    }
    let mut ranks = Vec::new();
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "{codec}: rank {rank} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let iters = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["event"] == "iters")
            .with_context(|| format!("{codec}: rank {rank} printed no iterations"))?;
        let series = |k: &str| -> Option<Vec<f64>> {
            iters[k].as_array()?.iter().map(Value::as_f64).collect()
        };
        ranks.push((
            series("start_unix_ns").context("start times")?,
            series("end_unix_ns").context("end times")?,
        ));
    }
    let n = ranks[0].0.len();
    if n == 0 || ranks.iter().any(|(s, e)| s.len() != n || e.len() != n) {
        bail!("{codec}: per-rank iteration times are incomplete");
    }
    let last = |i: usize, end: bool| {
        ranks
            .iter()
            .map(|(s, e)| if end { e[i] } else { s[i] })
            .fold(f64::MIN, f64::max)
    };
    let mut t: Vec<f64> = (0..n)
        .map(|i| (last(i, true) - last(i, false)) / 1e9)
        .collect();
    t.sort_by(f64::total_cmp);
    Ok((t[0], t[n / 2], t[n - 1]))
}
