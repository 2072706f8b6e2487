//! `cargo xtask bench tls`: what mutual TLS costs.
//!
//! 1. Certificates for the run, made by the project's own `causeway certs`
//!    (a CA per domain, a certificate per host) under `target/tls-bench/`.
//! 2. `causeway-tls-bench`: seal + open GB/s on one core per TLS 1.3 cipher
//!    suite, through a rustls connection pair in memory.
//! 3. With root: `causeway-allreduce-bench` (4 KiB and 64 MiB) on the
//!    two-domain testbed (`wan40` by default) in plaintext and with
//!    `CAUSEWAY_TLS=wan` (userspace rustls, `CAUSEWAY_KTLS=off`; and kTLS,
//!    `CAUSEWAY_KTLS=on`, when this kernel has the `tls` module), the modes
//!    interleaved run by run in one invocation, 3 runs of 1 warm-up + 5
//!    iterations each. The time of an operation is taken across ranks as in
//!    `bench allreduce`; per run the median over iterations, then the median
//!    and the spread over runs. Targets: 64 MiB at ≥ 95 % of the plaintext
//!    goodput, 4 KiB within 1 ms of plaintext.
//! 4. `--vm [6.1|6.12|7.x]`: the host kernel has no `tls` module, so the
//!    three modes, kTLS included, run inside a qemu guest instead
//!    ([`crate::bench_tls_vm`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::{cmd, testbed::Testbed};

pub(crate) const SIZES: &str = "4K,64M";
pub(crate) const RUNS: usize = 3;
const MASTER_PORT: &str = "29560";

/// One way of running the allreduce: its name and its extra environment.
pub(crate) struct Mode {
    pub name: &'static str,
    pub env: &'static [(&'static str, &'static str)],
}

pub(crate) const PLAIN: Mode = Mode {
    name: "plaintext",
    env: &[("CAUSEWAY_TLS", "off")],
};
pub(crate) const USERSPACE: Mode = Mode {
    name: "TLS (rustls)",
    env: &[("CAUSEWAY_TLS", "wan"), ("CAUSEWAY_KTLS", "off")],
};
pub(crate) const KERNEL: Mode = Mode {
    name: "TLS (kTLS)",
    env: &[("CAUSEWAY_TLS", "wan"), ("CAUSEWAY_KTLS", "on")],
};

pub fn run(extra: &[String]) -> Result<()> {
    if let Some(i) = extra.iter().position(|a| a == "--vm") {
        return crate::bench_tls_vm::run(extra.get(i + 1).map(String::as_str));
    }
    let profiles: Vec<String> = if extra.is_empty() {
        vec!["wan40".into()]
    } else {
        extra.to_vec()
    };
    cmd::build_wan_bench_bins()?;
    let dir = cmd::root().join("target/tls-bench");
    let _ = std::fs::remove_dir_all(&dir);
    let domains = [0u64, 1];
    let one = Pki::make(&dir.join("cpu"), &[(0, domains[0])])?;
    println!("load before the record layer bench: {}", load());
    crate::progress::run_child(
        Command::new(cmd::bin_path("causeway-tls-bench", true))
            .args(["--mib", "256", "--runs", "5"])
            .envs(one.env(0)),
        "bench tls: record layer",
    )?;
    if !cmd::is_root() {
        eprintln!("bench: the allreduce part builds network namespaces: run as root for it");
        return Ok(());
    }
    let mut modes = vec![PLAIN, USERSPACE];
    if kernel_tls() {
        modes.push(KERNEL);
    } else {
        println!(
            "kTLS: this kernel has no `tls` module (modprobe tls failed): its row is left out"
        );
    }
    let bar = crate::progress::steps((profiles.len() * RUNS * modes.len()) as u64, "bench tls");
    for profile in &profiles {
        let bed = Testbed::up("tlsbench", profile)?;
        crate::bench_allreduce::tune_hosts(&bed)?;
        let hosts: Vec<(usize, u64)> = bed.hosts.iter().map(|h| h.domain).enumerate().collect();
        let pki = Pki::make(&dir.join(profile), &hosts)?;
        let start = load();
        // times[mode][run] = per size (bytes, median s)
        let mut times: Vec<Vec<Vec<(u64, f64)>>> = vec![Vec::new(); modes.len()];
        for run in 0..RUNS {
            for (m, mode) in modes.iter().enumerate() {
                crate::progress::now(
                    &bar,
                    format!("{profile}: run {} of {RUNS}: {}", run + 1, mode.name),
                );
                times[m].push(allreduce(&bed, &pki, mode)?);
                bar.inc(1);
            }
        }
        println!(
            "\nallreduce f32, 2 domains x 2 hosts, {profile} ({:.0} Mbit/s, RTT {:.0} ms), {RUNS} runs of 1 warm-up + 5 iterations, modes interleaved; load {start} at the start, {} at the end",
            bed.rate_mbit,
            2.0 * bed.delay_ms,
            load()
        );
        print_table(&modes, &times);
    }
    Ok(())
}

/// Mode `m`'s time for `bytes` in each run of `times[mode][run] = per size
/// (bytes, median s)`.
pub(crate) fn per_run(times: &[Vec<Vec<(u64, f64)>>], m: usize, bytes: u64) -> Vec<f64> {
    times[m]
        .iter()
        .filter_map(|r| r.iter().find(|(b, _)| *b == bytes).map(|(_, t)| *t))
        .collect()
}

/// The table of `times[mode][run] = per size (bytes, median s)`, mode 0
/// being plaintext, with the targets' verdicts.
pub(crate) fn print_table(modes: &[Mode], times: &[Vec<Vec<(u64, f64)>>]) {
    println!("| size | mode | median s | [min–max] over runs | goodput vs plaintext | − plaintext ms | target |");
    println!("|---:|---|---:|---|---:|---:|---|");
    let sizes: Vec<u64> = times[0][0].iter().map(|(b, _)| *b).collect();
    for bytes in sizes {
        let per_run = |m: usize| per_run(times, m, bytes);
        let plain = median(&per_run(0));
        for (m, mode) in modes.iter().enumerate() {
            let (t, lo, hi) = spread(&per_run(m));
            let target = match (m, bytes >= 1 << 20) {
                (0, _) => "–".to_string(),
                (_, true) => verdict(plain / t >= 0.95, "≥ 95 %"),
                (_, false) => verdict(t - plain <= 1e-3, "≤ 1 ms"),
            };
            println!(
                "| {} | {} | {t:.4} | [{lo:.4}–{hi:.4}] | {:.1} % | {:+.2} | {target} |",
                crate::bench_allreduce::human(bytes),
                mode.name,
                100.0 * plain / t,
                (t - plain) * 1e3
            );
        }
    }
}

fn verdict(met: bool, what: &str) -> String {
    format!("{what}: {}", if met { "met" } else { "MISSED" })
}

/// Whether this kernel can do kTLS: `modprobe tls` (quietly), then the
/// module's statistics file.
fn kernel_tls() -> bool {
    let _ = Command::new("modprobe")
        .args(["-q", "tls"])
        .stderr(std::process::Stdio::null())
        .status();
    Path::new("/proc/net/tls_stat").exists()
}

/// The run's certificates: a CA per domain (`d<domain>`), one certificate
/// per rank's host (`h<rank>`), every CA in one bundle.
pub(crate) struct Pki {
    dir: PathBuf,
    hosts: Vec<(usize, u64)>,
}

impl Pki {
    pub(crate) fn make(dir: &Path, hosts: &[(usize, u64)]) -> Result<Self> {
        let causeway = cmd::bin_path("causeway", true);
        let mut bundle = String::new();
        let mut domains: Vec<u64> = hosts.iter().map(|(_, d)| *d).collect();
        domains.sort_unstable();
        domains.dedup();
        for d in &domains {
            let ca = dir.join(format!("ca-d{d}"));
            cmd::run(
                Command::new(&causeway)
                    .args(["certs", "init-ca", "--domain", &format!("d{d}"), "--dir"])
                    .arg(&ca),
            )?;
            bundle += &std::fs::read_to_string(ca.join("ca.pem")).context("reading a CA")?;
        }
        std::fs::write(dir.join("cas.pem"), bundle)?;
        for (rank, d) in hosts {
            cmd::run(
                Command::new(&causeway)
                    .args(["certs", "issue", "--ca-dir"])
                    .arg(dir.join(format!("ca-d{d}")))
                    .args(["--host", &format!("h{rank}"), "--out"])
                    .arg(dir.join("hosts")),
            )?;
        }
        Ok(Pki {
            dir: dir.to_path_buf(),
            hosts: hosts.to_vec(),
        })
    }

    /// The environment of rank `rank`: its host id and TLS files.
    pub(crate) fn env(&self, rank: usize) -> Vec<(String, String)> {
        let file = |name: String| self.dir.join(name).display().to_string();
        let domain = self.hosts.iter().find(|(r, _)| *r == rank).map(|(_, d)| *d);
        vec![
            ("CAUSEWAY_HOST_ID".into(), format!("h{rank}")),
            (
                "CAUSEWAY_DOMAIN".into(),
                format!("d{}", domain.unwrap_or(0)),
            ),
            (
                "CAUSEWAY_TLS_CERT".into(),
                file(format!("hosts/h{rank}.pem")),
            ),
            (
                "CAUSEWAY_TLS_KEY".into(),
                file(format!("hosts/h{rank}.key")),
            ),
            ("CAUSEWAY_TLS_CA".into(), file("cas.pem".into())),
        ]
    }
}

/// Per size, the median over iterations of (last rank's return − last
/// rank's call), seconds.
fn allreduce(bed: &Testbed, pki: &Pki, mode: &Mode) -> Result<Vec<(u64, f64)>> {
    let bin = cmd::bin_path("causeway-allreduce-bench", true);
    let mut children = Vec::new();
    for rank in 0..bed.hosts.len() {
        let mut c = bed.rank_command(rank, MASTER_PORT, &bin);
        c.args(["--sizes", SIZES, "--iters", "5", "--warmup", "1"])
            .envs(pki.env(rank))
            .envs(mode.env.iter().copied());
        children.push(c.spawn().with_context(|| format!("starting rank {rank}"))?);
    }
    // iters[rank] = the `iters` lines of that rank
    let mut iters: Vec<Vec<Value>> = Vec::new();
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "{}: rank {rank} failed ({}): {}",
                mode.name,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        iters.push(iters_lines(&String::from_utf8_lossy(&out.stdout)));
    }
    op_times(mode.name, &iters)
}

/// The `iters` lines of one rank's output.
pub(crate) fn iters_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "iters")
        .collect()
}

/// Per size, the median over iterations of (last rank's return − last
/// rank's call), seconds, from every rank's `iters` lines.
pub(crate) fn op_times(mode: &str, iters: &[Vec<Value>]) -> Result<Vec<(u64, f64)>> {
    let Some(first) = iters.first() else {
        bail!("{mode}: no rank's output");
    };
    let sizes: Vec<u64> = first.iter().filter_map(|v| v["bytes"].as_u64()).collect();
    sizes
        .into_iter()
        .map(|bytes| {
            let ranks: Vec<&Value> = iters
                .iter()
                .filter_map(|r| r.iter().find(|v| v["bytes"].as_u64() == Some(bytes)))
                .collect();
            if ranks.len() != iters.len() {
                bail!("{mode}: a rank has no times of {bytes} bytes");
            }
            let t = crate::bench_allreduce::across_ranks(&ranks).with_context(|| {
                format!("{mode}: per-rank times of {bytes} bytes are incomplete")
            })?;
            Ok((bytes, t))
        })
        .collect()
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// (median, min, max) of `v`.
pub(crate) fn spread(v: &[f64]) -> (f64, f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    (median(v), lo, hi)
}

pub(crate) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
