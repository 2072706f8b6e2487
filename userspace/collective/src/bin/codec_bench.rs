//! Codec throughput and ratio: encode + decode GB/s on one core (this thread)
//! for every WAN codec, over a buffer cut into frames as the engine cuts them,
//! and the size each codec leaves of real gradients (`--grads FILE`, f32 LE as
//! `causeway-train --dump-grads` writes them). Prints a markdown table; used
//! by `cargo xtask bench codecs`.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use causeway_collective::codec::{CodecSpec, Rounding};
use causeway_collective::{cli, DType};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const USAGE: &str = "causeway-codec-bench [--mib 16] [--frame-kib 128] [--runs 5] [--grads FILE]\n\
  Encode + decode throughput per codec on one core, and compressed size of --grads.";

fn specs() -> Vec<CodecSpec> {
    vec![
        CodecSpec::Bf16,
        CodecSpec::Fp16,
        CodecSpec::Int8 {
            block: 256,
            rounding: Rounding::Nearest,
        },
        CodecSpec::Int8 {
            block: 256,
            rounding: Rounding::Stochastic,
        },
        CodecSpec::TopK {
            per_million: 10_000,
        },
        CodecSpec::Lz4,
        CodecSpec::Zstd { level: 1 },
        CodecSpec::Zstd { level: 3 },
    ]
}

/// Encoded frames, back to back in one reused buffer.
#[derive(Default)]
struct Arena {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

/// Seconds to encode and to decode `data` in frames of `frame` bytes; encoded bytes.
fn once(spec: CodecSpec, data: &[u8], frame: usize, a: &mut Arena) -> Result<(f64, f64, usize)> {
    let c = spec.codec()?.context("a codec")?;
    a.bytes.clear();
    a.ends.clear();
    // Each frame is encoded into one reused scratch, as the engine does, and
    // kept (untimed) for the decode pass.
    let mut scratch = Vec::with_capacity(frame + 64);
    let mut enc = 0.0;
    for (i, chunk) in data.chunks(frame).enumerate() {
        scratch.clear();
        let t = Instant::now();
        c.encode(chunk, DType::F32, i as u64, &mut scratch)?;
        enc += t.elapsed().as_secs_f64();
        a.bytes.extend_from_slice(&scratch);
        a.ends.push(a.bytes.len());
    }
    let mut dst = vec![0u8; frame];
    let t = Instant::now();
    let mut at = 0;
    for (&end, chunk) in a.ends.iter().zip(data.chunks(frame)) {
        c.decode(&a.bytes[at..end], DType::F32, &mut dst[..chunk.len()])?;
        at = end;
    }
    let dec = t.elapsed().as_secs_f64();
    Ok((enc, dec, a.bytes.len()))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> std::process::ExitCode {
    causeway_core::cli_main::run(|| {
        causeway_collective::cli::init_logging();
        run()
    })
}

fn run() -> Result<()> {
    let args = cli::Args::parse(&["mib", "frame-kib", "runs", "grads"], USAGE)?;
    let mib: usize = args.num("mib", 16)?;
    let frame: usize = args.num::<usize>("frame-kib", 128)? << 10;
    let runs: usize = args.num("runs", 5)?;
    if runs == 0 || frame == 0 || mib == 0 {
        bail!("--mib, --frame-kib and --runs must be positive");
    }
    let grads = match args.get("grads") {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("read {p}"))?),
        None => None,
    };
    // Throughput input: the real gradients tiled, else gradient-like noise
    // (normal values, a few large ones).
    let n = mib << 18;
    let data: Vec<u8> = match &grads {
        Some(g) if g.len() >= 4 => g.iter().copied().cycle().take(4 * n).collect(),
        _ => {
            let mut rng = StdRng::seed_from_u64(7);
            (0..n)
                .flat_map(|_| {
                    let v: f32 = rng.gen_range(-1.0f32..1.0) * rng.gen_range(0.0f32..1.0).powi(4);
                    v.to_le_bytes()
                })
                .collect()
        }
    };
    println!(
        "codecs on one core: {mib} MiB of f32 in {} KiB frames, {runs} runs (median, [min–max] of encode+decode)",
        frame >> 10
    );
    println!("| codec | encode+decode GB/s | [min–max] | encode GB/s | decode GB/s | size / raw | size / raw on the training run's gradients |");
    println!("|---|---:|---|---:|---:|---:|---:|");
    let gb = data.len() as f64 / 1e9;
    for spec in specs() {
        let (mut both, mut enc, mut dec) = (Vec::new(), Vec::new(), Vec::new());
        let mut arena = Arena::default();
        once(spec, &data, frame, &mut arena)?; // warm-up
        let mut size = 0;
        for _ in 0..runs {
            let (e, d, s) = once(spec, &data, frame, &mut arena)?;
            both.push(gb / (e + d));
            enc.push(gb / e);
            dec.push(gb / d);
            size = s;
        }
        let lo = both.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = both.iter().copied().fold(0.0, f64::max);
        let real = match &grads {
            Some(g) => {
                let g = &g[..g.len() / 4 * 4];
                let (_, _, s) = once(spec, g, frame, &mut Arena::default())?;
                format!("{:.4}", s as f64 / g.len() as f64)
            }
            None => "–".into(),
        };
        println!(
            "| {spec} | {:.2} | [{lo:.2}–{hi:.2}] | {:.2} | {:.2} | {:.4} | {real} |",
            median(&mut both),
            median(&mut enc),
            median(&mut dec),
            size as f64 / data.len() as f64,
        );
    }
    Ok(())
}
