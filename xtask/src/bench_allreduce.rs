//! `cargo xtask bench allreduce`: Causeway vs PyTorch Gloo, same testbed,
//! same run. For each WAN profile it brings up 2 domains x 2 hosts, runs
//! `causeway-allreduce-bench` and `gloo_allreduce.py` as four ranks each (one
//! per host namespace, torchrun's variables), and prints per size the median
//! time, algbw and busbw (NCCL's definitions), the ratio to the WAN lower
//! bound (each WAN direction must carry S bytes: T >= S*8/B) and to the RTT,
//! the first (warm-up) iteration, the WAN emulator's queue drops, CPU
//! seconds per GB, whether every result was checked exactly, and Gloo's time
//! divided by ours. Before the ranks, iperf3 measures what the WAN carries
//! with both directions busy ([`crate::link_ceiling`]); each time is also
//! given against that ceiling (S*8 / the slower direction's iperf3 rate).
//! Each size runs in its own world (one start-up per size), so its drops and
//! its first iteration are its own. `--no-gloo` runs
//! Causeway alone (no Python environment needed).
//!
//! The time of one operation is taken across ranks, not at rank 0 alone: from
//! the moment the last rank called allreduce to the moment the last rank got
//! its result (all ranks run on this machine, so their wall clocks agree).
//! Rank 0's own view depends on how far apart the preceding barrier let the
//! ranks go, which is up to a one-way WAN delay either way.
//!
//! `--bin PATH` runs that `causeway-allreduce-bench` instead of the
//! workspace's (e.g. a copy built at an earlier commit, for before/after runs).
//!
//! `--ebpf`: Causeway alone, with the eBPF programs attached to the gateways'
//! WAN ports and without, interleaved ([`crate::bench_allreduce_ebpf`]).

use std::{path::Path, process::Command};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::{cmd, gloo, link_ceiling::Ceiling, plot, progress, testbed::Testbed};

pub(crate) const SIZES: &str = "4K,64K,1M,16M,64M";
pub(crate) const MASTER_PORT: &str = "29500";

pub fn run(extra: &[String]) -> Result<()> {
    if !cmd::is_root() {
        bail!("the allreduce bench builds network namespaces: run it as root");
    }
    if extra.iter().any(|a| a == "--ebpf") {
        let profiles: Vec<String> = extra.iter().filter(|a| *a != "--ebpf").cloned().collect();
        return crate::bench_allreduce_ebpf::run(&profiles);
    }
    let Args {
        sizes,
        iters,
        bin,
        rest: extra,
    } = parse_args(extra)?;
    let no_gloo = extra.iter().any(|a| a == "--no-gloo");
    let extra: Vec<String> = extra.into_iter().filter(|a| a != "--no-gloo").collect();
    let profiles: Vec<String> = if extra.is_empty() {
        vec!["wan40".into(), "lossy80".into(), "lossy120".into()]
    } else {
        extra
    };
    // Without Gloo (`--no-gloo`) no Python environment is needed.
    let python = if no_gloo { None } else { Some(gloo::python()?) };
    cmd::build_wan_bench_bins()?;
    let ours = bin.unwrap_or_else(|| cmd::bin_path("causeway-allreduce-bench", true));
    let script = cmd::root().join("userspace/collective/bench/gloo_allreduce.py");
    // The ranks' output is captured: only the testbed's commands and the
    // tables print, with the bar stepping aside.
    let steps = if no_gloo { 1 } else { 2 };
    let bar = progress::steps(steps * profiles.len() as u64, "bench allreduce");
    for profile in &profiles {
        bar.set_message(format!("{profile}: testbed up"));
        let bed = bar.suspend(|| -> Result<Testbed> {
            let bed = Testbed::up("bench", profile)?;
            tune_hosts(&bed)?;
            Ok(bed)
        })?;
        bar.set_message(format!("{profile}: iperf3 both ways"));
        let ceiling = match crate::link_ceiling::measure(&bed) {
            Ok(c) => Some(c),
            Err(e) => {
                progress::say(&bar, &format!("bench: {profile}: no iperf3 ceiling: {e:#}"));
                None
            }
        };
        progress::say(&bar, &format!("bench: profile {profile}: causeway"));
        bar.set_message(format!("{profile}: causeway, 4 ranks"));
        let c = per_size(&bed, &sizes, |size| {
            let mut c = Command::new(&ours);
            c.args(["--sizes", size, "--iters", &iters, "--warmup", "1"]);
            c
        })?;
        bar.inc(1);
        let g = match &python {
            Some(python) => {
                progress::say(&bar, &format!("bench: profile {profile}: gloo"));
                bar.set_message(format!("{profile}: gloo, 4 ranks"));
                let g = per_size(&bed, &sizes, |size| {
                    gloo_command(python, &script, size, &iters)
                })?;
                bar.inc(1);
                g
            }
            None => Vec::new(),
        };
        bar.suspend(|| {
            if let Some(k) = ceiling {
                println!(
                    "iperf3, one TCP flow each way at once (5 s after 1 s): {:.0} Mbit/s d0->d1, {:.0} d1->d0 ({:.2}x the bound at the slower)",
                    k.d0_to_d1_mbit,
                    k.d1_to_d0_mbit,
                    bed.rate_mbit / k.mbit()
                );
            }
            print_table(profile, &bed, &iters, ceiling, &c, &g);
            if let Some(first) = c.first() {
                println!(
                    "causeway start-up: {:.2} s to a joined communicator; its WAN probe measured {:.1} Mbit/s (the path: {:.0})",
                    first["init_s"].as_f64().unwrap_or(f64::NAN),
                    first["wan_probe_mbit"].as_f64().unwrap_or(f64::NAN),
                    bed.rate_mbit
                );
            }
            if let Some(e) = c.last().map(|row| &row["link_estimate"]).filter(|e| !e.is_null()) {
                let f = |k: &str| e[k].as_f64().unwrap_or(f64::NAN);
                println!(
                    "causeway link estimate (rank 0's kernel, after the last size): {:.1} Mbit/s on the wire ({:+.1} % of the path), RTT {:.1} ms, min RTT {:.1} ms ({:+.1} % of {:.0} ms), {} retransmits ({} lost), paced at {} per connection, {} congestion control",
                    f("rate_mbit"),
                    (f("rate_mbit") / bed.rate_mbit - 1.0) * 100.0,
                    f("rtt_ms"),
                    f("min_rtt_ms"),
                    (f("min_rtt_ms") / (2.0 * bed.delay_ms) - 1.0) * 100.0,
                    2.0 * bed.delay_ms,
                    e["retransmits"],
                    e["losses"],
                    e["pacing_mbit_per_conn"].as_f64().map_or("no cap".into(), |p| format!("{p:.1} Mbit/s")),
                    if e["loss_based_cc"].as_bool().unwrap_or(false) { "loss-based" } else { "model-based" },
                );
            }
            println!("load {}", crate::bench_tls::load());
        });
        let svg = plot::plots_dir().join(format!(
            "allreduce_{}.svg",
            crate::testbed::profile_file_name(profile)
        ));
        plot::render(&busbw_chart(profile, &bed, &c, &g), &svg)?;
        progress::say(&bar, &format!("bench: plot {}", svg.display()));
        bar.set_message(format!("{profile}: testbed down"));
        bar.suspend(|| drop(bed));
    }
    bar.finish_and_clear();
    Ok(())
}

/// Runs one world per size (`command(size)` on every rank), so that each
/// size's rows carry the WAN emulator's queue drops during that world
/// (`queue_drops`: warm-up and timed iterations, both directions) and its
/// first iteration is the first operation after start-up.
fn per_size(bed: &Testbed, sizes: &str, command: impl Fn(&str) -> Command) -> Result<Vec<Value>> {
    let mut rows = Vec::new();
    for size in sizes.split(',') {
        let before = bed.queue_drops();
        let mut got = run_world(bed, |_| command(size))?;
        let drops = bed
            .queue_drops()
            .zip(before)
            .map(|(a, b)| a.saturating_sub(b));
        for row in &mut got {
            if let Some(d) = drops {
                row["queue_drops"] = d.into();
            }
        }
        rows.extend(got);
    }
    Ok(rows)
}

/// Both implementations keep their connections across operations and idle
/// between them (the barrier): without this, Linux restarts every WAN flow from
/// its initial window after an idle RTO. Set in every host namespace, so it
/// applies to Gloo and Causeway alike.
pub(crate) fn tune_hosts(bed: &Testbed) -> Result<()> {
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
    Ok(())
}

fn gloo_command(python: &Path, script: &Path, sizes: &str, iters: &str) -> Command {
    let mut c = Command::new(python);
    c.arg(script)
        .args(["--sizes", sizes, "--iters", iters, "--warmup", "1"]);
    c
}

/// The bench's own arguments.
struct Args {
    /// `--sizes LIST` (default [`SIZES`]).
    sizes: String,
    /// `--iters N` (default 5).
    iters: String,
    /// `--bin PATH`: a `causeway-allreduce-bench` to run instead of the
    /// workspace's (e.g. one built at an earlier commit, for before/after).
    bin: Option<std::path::PathBuf>,
    /// The rest: profiles and flags handled by the caller.
    rest: Vec<String>,
}

fn parse_args(extra: &[String]) -> Result<Args> {
    let (mut sizes, mut iters, mut rest) = (SIZES.to_string(), "5".to_string(), Vec::new());
    let mut bin = None;
    let mut it = extra.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--sizes" => sizes = it.next().context("--sizes needs a list, e.g. 64K,64M")?.clone(),
            "--iters" => iters = it.next().context("--iters needs a number")?.clone(),
            "--bin" => {
                bin = Some(it.next().context("--bin needs a path to causeway-allreduce-bench")?.into())
            }
            "--help" | "-h" => bail!(
                "usage: cargo xtask bench allreduce [--ebpf] [--no-gloo] [--sizes {SIZES}] [--iters 5] [--bin PATH] [PROFILE...] (profiles: wan40 lossy80 lossy120 gig10, or explicit paths as in `causeway-netsim up --path`, e.g. delay=15ms,rate=300mbit,loss=0.002; default wan40 lossy80 lossy120)"
            ),
            _ => rest.push(a.clone()),
        }
    }
    Ok(Args {
        sizes,
        iters,
        bin,
        rest,
    })
}

/// Runs one rank per host (the program, arguments and environment of
/// `command(rank)` inside the host's namespace); returns rank 0's JSON lines
/// with a `bytes` field, each with `time_s`, `time_min_s` and `time_max_s`
/// (median, min and max over iterations, [`iteration_times`]), `first_s`
/// (the first warm-up iteration, when the workers report it) and
/// `cpu_s_per_gb` (every rank's process CPU time in its timed calls over
/// every rank's payload bytes, when they report it).
pub(crate) fn run_world(bed: &Testbed, command: impl Fn(usize) -> Command) -> Result<Vec<Value>> {
    let mut children = Vec::new();
    for rank in 0..bed.hosts.len() {
        let inner = command(rank);
        let mut c = bed.rank_command(rank, MASTER_PORT, std::path::Path::new(inner.get_program()));
        c.args(inner.get_args())
            .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .env("GLOO_SOCKET_IFNAME", "eth0")
            .env("OMP_NUM_THREADS", "1");
        children.push(c.spawn().with_context(|| format!("starting rank {rank}"))?);
    }
    let mut summaries = Vec::new();
    let mut iters = Vec::new();
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "rank {rank} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        for v in String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get("bytes").is_some())
        {
            if v["event"] == "iters" {
                iters.push(v);
            } else if rank == 0 {
                summaries.push(v);
            }
        }
    }
    for row in &mut summaries {
        let bytes = row["bytes"].as_u64();
        let mine: Vec<&Value> = iters
            .iter()
            .filter(|v| v["bytes"].as_u64() == bytes)
            .collect();
        let t = iteration_times(&mine)
            .with_context(|| format!("per-rank times of {bytes:?} bytes are incomplete"))?;
        row["time_s"] = t[t.len() / 2].into();
        row["time_min_s"] = t[0].into();
        row["time_max_s"] = t[t.len() - 1].into();
        if let Some(first) = first_iteration(&mine) {
            row["first_s"] = first.into();
        }
        if let Some(c) = cpu_s_per_gb(&mine) {
            row["cpu_s_per_gb"] = c.into();
        }
    }
    Ok(summaries)
}

/// The first warm-up iteration: last rank's return − last rank's call, seconds.
fn first_iteration(ranks: &[&Value]) -> Option<f64> {
    let first = |v: &Value, key: &str| v[key].as_array()?.first()?.as_f64();
    let last = |key: &str| -> Option<f64> {
        ranks
            .iter()
            .map(|v| first(v, key))
            .collect::<Option<Vec<f64>>>()?
            .into_iter()
            .reduce(f64::max)
    };
    Some((last("warmup_end_unix_ns")? - last("warmup_start_unix_ns")?) / 1e9)
}

/// Process CPU seconds of every rank's timed calls per GB of payload they
/// allreduced (each rank's buffer × timed iterations).
fn cpu_s_per_gb(ranks: &[&Value]) -> Option<f64> {
    let (mut cpu, mut gb) = (0.0, 0.0);
    for v in ranks {
        cpu += v["cpu_s"].as_f64()?;
        gb += v["bytes"].as_f64()? * v["times_s"].as_array()?.len() as f64 / 1e9;
    }
    (gb > 0.0).then(|| cpu / gb)
}

/// Median over iterations of (last rank's return − last rank's call), seconds.
pub(crate) fn across_ranks(ranks: &[&Value]) -> Option<f64> {
    iteration_times(ranks).map(|t| t[t.len() / 2])
}

/// Per iteration, (last rank's return − last rank's call) in seconds, sorted
/// (at least one).
fn iteration_times(ranks: &[&Value]) -> Option<Vec<f64>> {
    let series = |v: &Value, key: &str| -> Option<Vec<f64>> {
        v[key].as_array()?.iter().map(Value::as_f64).collect()
    };
    let starts: Vec<Vec<f64>> = ranks
        .iter()
        .map(|v| series(v, "start_unix_ns"))
        .collect::<Option<_>>()?;
    let ends: Vec<Vec<f64>> = ranks
        .iter()
        .map(|v| series(v, "end_unix_ns"))
        .collect::<Option<_>>()?;
    let n = starts.first()?.len();
    if n == 0 || starts.iter().chain(&ends).any(|s| s.len() != n) {
        return None;
    }
    let last = |s: &[Vec<f64>], i: usize| s.iter().map(|r| r[i]).fold(f64::MIN, f64::max);
    let mut t: Vec<f64> = (0..n)
        .map(|i| (last(&ends, i) - last(&starts, i)) / 1e9)
        .collect();
    t.sort_by(f64::total_cmp);
    Some(t)
}

fn print_table(
    profile: &str,
    bed: &Testbed,
    iters: &str,
    ceiling: Option<Ceiling>,
    ours: &[Value],
    gloo: &[Value],
) {
    let rtt = 2.0 * bed.delay_ms / 1e3;
    let world = bed.hosts.len();
    println!("\nallreduce, 2 domains x 2 hosts, profile {profile} ({:.0} Mbit/s, RTT {:.0} ms), float32, median of {iters} iterations after 1 warm-up, time from the last rank's call to the last rank's return", bed.rate_mbit, rtt * 1e3);
    println!(
        "| size | causeway s (min–max) | busbw GB/s | vs WAN bound | vs iperf3 both ways | vs RTT | first iteration s | queue drops | CPU s/GB | checked | algorithm | gloo s (min–max) | gloo vs bound | gloo first s | gloo drops | gloo CPU s/GB | gloo checked | gloo / causeway |"
    );
    println!(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---|---:|"
    );
    for row in ours {
        let bytes = row["bytes"].as_u64().unwrap_or(0);
        let t = row["time_s"].as_f64().unwrap_or(f64::NAN);
        let bound = bytes as f64 * 8.0 / (bed.rate_mbit * 1e6);
        let vs_ceiling = ceiling.map_or_else(
            || "-".to_string(),
            |k| format!("{:.2}x", t / k.seconds(bytes as f64)),
        );
        let g = gloo.iter().find(|g| g["bytes"].as_u64() == Some(bytes));
        let gt = g.and_then(|g| g["time_s"].as_f64()).unwrap_or(f64::NAN);
        let num = |v: Option<&Value>, key: &str, digits: usize| {
            v.and_then(|v| v[key].as_f64())
                .map_or_else(|| "-".to_string(), |x| format!("{x:.digits$}"))
        };
        let spread = |v: Option<&Value>| {
            v.and_then(|v| {
                Some((
                    v["time_s"].as_f64()?,
                    v["time_min_s"].as_f64()?,
                    v["time_max_s"].as_f64()?,
                ))
            })
            .map_or_else(
                || "-".to_string(),
                |(m, lo, hi)| format!("{m:.4} ({lo:.4}–{hi:.4})"),
            )
        };
        let drops = |v: Option<&Value>| {
            v.and_then(|v| v["queue_drops"].as_u64())
                .map_or_else(|| "-".to_string(), |d| d.to_string())
        };
        let checked = |v: Option<&Value>| match v.map(|v| &v["checked"]) {
            Some(Value::Bool(true)) => "exact",
            Some(Value::Bool(false)) => "no (lossy codec)",
            _ => "-",
        };
        println!(
            "| {} | {} | {:.4} | {:.2}x | {} | {:.2}x | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            human(bytes),
            spread(Some(row)),
            busbw(bytes, t, world),
            t / bound,
            vs_ceiling,
            t / rtt,
            num(Some(row), "first_s", 4),
            drops(Some(row)),
            num(Some(row), "cpu_s_per_gb", 2),
            checked(Some(row)),
            row["algorithm"].as_str().unwrap_or("?"),
            spread(g),
            if g.is_some() { format!("{:.2}x", gt / bound) } else { "-".into() },
            num(g, "first_s", 4),
            drops(g),
            num(g, "cpu_s_per_gb", 2),
            checked(g),
            if g.is_some() { format!("{:.2}x", gt / t) } else { "-".into() },
        );
    }
}

/// busbw (Mbit/s) vs message size for both implementations, against the
/// busbw at the WAN bound (T = S*8/B).
fn busbw_chart(profile: &str, bed: &Testbed, ours: &[Value], gloo: &[Value]) -> plot::Chart {
    let world = bed.hosts.len();
    let series = |name: &str, rows: &[Value]| plot::Series {
        name: name.into(),
        points: rows
            .iter()
            .filter_map(|r| {
                let bytes = r["bytes"].as_u64()?;
                let t = r["time_s"].as_f64()?;
                Some((bytes as f64, busbw(bytes, t, world) * 8e3))
            })
            .collect(),
    };
    plot::Chart {
        title: format!(
            "allreduce busbw, 2 domains x 2 hosts, {profile} ({:.0} Mbit/s, RTT {:.0} ms)",
            bed.rate_mbit,
            2.0 * bed.delay_ms
        ),
        x_label: "message size (float32)".into(),
        y_label: "busbw, Mbit/s".into(),
        x_scale: plot::Scale::Log2Bytes,
        y_scale: plot::Scale::Linear,
        series: vec![series("causeway", ours), series("gloo", gloo)],
        limits: vec![plot::Limit {
            name: "WAN limit (busbw at T = S*8/B)".into(),
            y: bed.rate_mbit * 2.0 * (world as f64 - 1.0) / world as f64,
        }],
    }
}

/// NCCL's bus bandwidth: algbw × 2(n−1)/n, GB/s.
fn busbw(bytes: u64, t: f64, world: usize) -> f64 {
    bytes as f64 / t / 1e9 * 2.0 * (world as f64 - 1.0) / world as f64
}

pub(crate) fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}
