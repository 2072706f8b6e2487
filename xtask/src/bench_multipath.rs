//! `cargo xtask bench multipath`: a 64 MiB cross-domain allreduce on the
//! `dual` testbed (path 0: RTT 40 ms, 200 Mbit/s; path 1: RTT 60 ms, 100
//! Mbit/s), four ways in each run, interleaved:
//!
//! - **causeway single**: today's library, one path (the default);
//! - **causeway multipath**: every rank sets `CAUSEWAY_WAN_PATHS` to its
//!   addresses on path 0 and path 1 (`userspace/collective/src/stripe.rs`);
//! - **causeway over MPTCP**: the single-path library under `mptcpize`, each
//!   host announcing its path-1 address (`ip mptcp endpoint … signal`), so the
//!   kernel adds a second subflow over path 1;
//! - **gloo**: PyTorch's Gloo backend (one path), as in `bench allreduce`.
//!
//! Time = median over iterations of (last rank's return − last rank's call),
//! as in `bench allreduce`; "of bound" = S·8/(B1+B2) ÷ time, where S is the
//! buffer (each WAN direction must carry it once). Each row also has the
//! emulators' queue drops per path during that world and rank 0's estimate
//! of each path at the end. Before each run, iperf3 measures what the two
//! paths carry both ways at once (one flow each way on each path,
//! [`crate::link_ceiling`]): the machine's ceiling for any implementation.
//! `--only single|multipath|mptcp|gloo` runs one
//! variant (for experiments; the table in docs/BENCHMARKS.md runs all).

use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::bench_allreduce::{run_world, tune_hosts};
use crate::{cmd, gloo, testbed::Testbed};

const BYTES: &str = "64M";
const SIZE: f64 = 64.0 * 1024.0 * 1024.0;
/// Sum of the `dual` profile's path rates, bit/s.
const SUM_BPS: f64 = 300e6;

/// Environment variables of one variant's ranks.
type Env = Vec<(String, String)>;
/// One result: variant, run, median, min and max seconds, load at start,
/// bytes per path, resent bytes and path downs (rank 0; the process's
/// striping counters, start-up included).
type Row = (String, usize, f64, f64, f64, String, String);

pub fn run(extra: &[String]) -> Result<()> {
    if !cmd::is_root() {
        bail!("the multipath bench builds network namespaces: run it as root");
    }
    let mut runs = 3usize;
    let mut iters = 5usize;
    let mut no_gloo = false;
    let mut only: Option<String> = None;
    let mut it = extra.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--runs" => runs = it.next().context("--runs N")?.parse()?,
            "--iters" => iters = it.next().context("--iters N")?.parse()?,
            "--no-gloo" => no_gloo = true,
            "--only" => {
                only = Some(
                    it.next()
                        .context("--only single|multipath|mptcp|gloo")?
                        .clone(),
                )
            }
            other => {
                bail!("unknown argument {other:?} (--runs N, --iters N, --no-gloo, --only VARIANT)")
            }
        }
    }
    let python = if no_gloo { None } else { Some(gloo::python()?) };
    cmd::build_wan_bench_bins()?;
    if !cmd::succeeds(Command::new("sh").args(["-c", "command -v mptcpize"])) {
        bail!("mptcpize is missing (Debian package mptcpize): run `cargo xtask setup` as root");
    }
    let ours = cmd::bin_path("causeway-allreduce-bench", true);
    let script = cmd::root().join("userspace/collective/bench/gloo_allreduce.py");
    let bed = Testbed::up("mp", "dual")?;
    tune_hosts(&bed)?;
    let via = path_addresses(&bed.tag)?;
    mptcp_endpoints(&bed, &via)?;
    let iters_s = iters.to_string();
    let via = &via;
    let worker = |env: Vec<(String, String)>, mptcp: bool| {
        let ours = ours.clone();
        let iters_s = iters_s.clone();
        move |rank: usize| {
            let mut c = if mptcp {
                let mut c = Command::new("mptcpize");
                c.arg("run").arg(&ours);
                c
            } else {
                Command::new(&ours)
            };
            c.args(["--sizes", BYTES, "--iters", &iters_s, "--warmup", "1"]);
            for (k, v) in &env {
                if k == "CAUSEWAY_WAN_PATHS" {
                    c.env(k, &via[rank]);
                } else {
                    c.env(k, v);
                }
            }
            c
        }
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut ceilings = Vec::new();
    for run in 1..=runs {
        match ceiling(&bed, via) {
            Ok(k) => {
                println!(
                    "bench multipath: run {run}: iperf3 both ways on both paths at once: {:.0} Mbit/s d0->d1, {:.0} d1->d0",
                    k.d0_to_d1_mbit, k.d1_to_d0_mbit
                );
                ceilings.push(Some(k));
            }
            Err(e) => {
                println!("bench multipath: run {run}: no iperf3 ceiling: {e:#}");
                ceilings.push(None);
            }
        }
        let variants: Vec<(&str, Env, bool)> = vec![
            ("causeway single", vec![], false),
            (
                "causeway multipath",
                vec![("CAUSEWAY_WAN_PATHS".into(), String::new())],
                false,
            ),
            ("causeway over MPTCP", vec![], true),
        ];
        let wanted = |name: &str| {
            only.as_deref().is_none_or(|o| {
                name.rsplit(' ')
                    .next()
                    .is_some_and(|w| w.eq_ignore_ascii_case(o))
            })
        };
        for (name, env, mptcp) in variants.into_iter().filter(|v| wanted(v.0)) {
            let load = crate::bench_tls::load();
            println!("bench multipath: run {run}: {name} (load {load})");
            let before = bed.queue_drops_per_path();
            let out = run_world(&bed, worker(env, mptcp))?;
            let drops = drops_since(before, bed.queue_drops_per_path());
            let r = out.first().context("no result")?;
            let mut stripe = r
                .get("stripe_bytes_per_path")
                .map(|v| {
                    format!(
                        "{v}; resent {:.1} MB, {} path downs; ",
                        r["stripe_resent_bytes"].as_f64().unwrap_or(0.0) / 1e6,
                        r["stripe_path_down"].as_u64().unwrap_or(0)
                    )
                })
                .unwrap_or_default();
            stripe += &format!("queue drops {drops}; estimates {}", path_estimates(r));
            rows.push(row(name, run, r, load, stripe));
        }
        if let (Some(python), true) = (&python, wanted("gloo")) {
            let load = crate::bench_tls::load();
            println!("bench multipath: run {run}: gloo (load {load})");
            let out = run_world(&bed, |_| {
                let mut c = Command::new(python);
                c.arg(&script)
                    .args(["--sizes", BYTES, "--iters", &iters_s, "--warmup", "1"]);
                c
            })?;
            let r = out.first().context("no gloo result")?;
            rows.push(row("gloo", run, r, load, String::new()));
        }
    }
    println!();
    println!("dual: 200 Mbit/s RTT 40 ms + 100 Mbit/s RTT 60 ms; 64 MiB float32 allreduce, 4 ranks in 2 domains; bound S*8/(B1+B2) = {:.3} s", SIZE * 8.0 / SUM_BPS);
    for (i, k) in ceilings.iter().enumerate() {
        let Some(k) = k else { continue };
        println!(
            "iperf3, one TCP flow each way on each path at once (5 s after 1 s), before run {}: {:.0} / {:.0} Mbit/s; 64 MiB at the slower direction: {:.3} s, {:.3}x the bound",
            i + 1,
            k.d0_to_d1_mbit,
            k.d1_to_d0_mbit,
            k.seconds(SIZE),
            SUM_BPS / (k.mbit() * 1e6)
        );
    }
    println!("| run | variant | time s (median) | min–max s | of bound | × iperf3 both ways | load at start | bytes per path, resent, downs (rank 0, whole process); queue drops per path; rank 0's estimate per path |");
    println!("|---:|---|---:|---:|---:|---:|---|---|");
    for (name, run, t, lo, hi, load, stripe) in &rows {
        let vs_ceiling = ceilings
            .get(run - 1)
            .copied()
            .flatten()
            .map_or("-".to_string(), |k| format!("{:.2}x", t / k.seconds(SIZE)));
        println!(
            "| {run} | {name} | {t:.3} | {lo:.3}–{hi:.3} | {:.1} % | {vs_ceiling} | {load} | {stripe} |",
            100.0 * SIZE * 8.0 / SUM_BPS / t
        );
    }
    println!("load at the end: {}", crate::bench_tls::load());
    drop(bed);
    Ok(())
}

/// iperf3 both ways on both paths at once, between the first hosts of the two
/// domains, each flow bound to the host's address on its path.
fn ceiling(bed: &Testbed, via: &[String]) -> Result<crate::link_ceiling::Ceiling> {
    let ((ia, a), (ib, b)) = (bed.first_host(0)?, bed.first_host(1)?);
    let addresses = |i: usize| via.get(i).context("a host without path addresses");
    let flows: Vec<crate::link_ceiling::Flow> = addresses(ia)?
        .split(',')
        .zip(addresses(ib)?.split(','))
        .map(|(from, to)| crate::link_ceiling::Flow {
            from_netns: &a.netns,
            bind: Some(from),
            to_netns: &b.netns,
            to_ip: to,
        })
        .collect();
    crate::link_ceiling::measure_flows(&flows)
}

/// Queue drops per path between two readings of the emulators ("?" when
/// either is missing).
fn drops_since(before: Option<Vec<u64>>, after: Option<Vec<u64>>) -> String {
    match (before, after) {
        (Some(b), Some(a)) => {
            let d: Vec<u64> = a
                .iter()
                .enumerate()
                .map(|(p, n)| n.saturating_sub(b.get(p).copied().unwrap_or(0)))
                .collect();
            format!("{d:?}")
        }
        _ => "?".into(),
    }
}

/// Rank 0's estimate of each path at the end: goodput, per-connection
/// pacing cap (Mbit/s) and the congestion control kind.
fn path_estimates(r: &Value) -> String {
    let Some(paths) = r["path_estimates"].as_array() else {
        return "-".into();
    };
    let one = |e: &Value| {
        if e.is_null() {
            return "none".to_string();
        }
        let pacing = e["pacing_mbit_per_conn"]
            .as_f64()
            .map_or("unpaced".to_string(), |p| format!("paced {p:.0}/conn"));
        let cc = if e["loss_based_cc"].as_bool() == Some(true) {
            "loss-based"
        } else {
            "model-based"
        };
        format!(
            "{:.0} Mbit/s {pacing} {cc}",
            e["goodput_mbit"].as_f64().unwrap_or(f64::NAN)
        )
    };
    paths.iter().map(one).collect::<Vec<_>>().join(" / ")
}

fn row(name: &str, run: usize, r: &Value, load: String, stripe: String) -> Row {
    let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    (
        name.to_string(),
        run,
        f("time_s"),
        f("time_min_s"),
        f("time_max_s"),
        load,
        stripe,
    )
}

/// Per host (in host order): its path-0 and path-1 addresses, comma-separated
/// (`CAUSEWAY_WAN_PATHS`), from `causeway-netsim status --json`.
fn path_addresses(tag: &str) -> Result<Vec<String>> {
    let status = cmd::output(
        cmd::cargo_bin("causeway-netsim", true).args(["status", "--tag", tag, "--json"]),
    )
    .context("causeway-netsim status --json failed")?;
    let v: Value = serde_json::from_str(&status)?;
    let hosts = crate::testbed::find_key(&v, "hosts")
        .and_then(Value::as_array)
        .context("no hosts")?;
    hosts
        .iter()
        .map(|h| {
            let ips = h["path_ips"].as_array().context("host without path_ips")?;
            let at = |p: u64| {
                ips.iter()
                    .find(|e| e[0].as_u64() == Some(p))
                    .and_then(|e| e[1].as_str())
                    .map(str::to_string)
            };
            Ok(format!(
                "{},{}",
                at(0).context("no path-0 address")?,
                at(1).context("no path-1 address")?
            ))
        })
        .collect()
}

/// MPTCP in every host: accept two more subflows and announce the host's
/// path-1 address, so a connection to a peer's path-0 address gets a second
/// subflow to the peer's path-1 address (routed over path 1).
fn mptcp_endpoints(bed: &Testbed, via: &[String]) -> Result<()> {
    for (h, v) in bed.hosts.iter().zip(via) {
        let p1 = v.split(',').nth(1).context("path-1 address")?;
        let ns = |args: &[&str]| {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &h.netns, "ip"]).args(args);
            c
        };
        cmd::run(&mut ns(&[
            "mptcp",
            "limits",
            "set",
            "subflow",
            "2",
            "add_addr_accepted",
            "2",
        ]))?;
        cmd::run(&mut ns(&[
            "mptcp", "endpoint", "add", p1, "dev", "eth0", "signal",
        ]))?;
    }
    Ok(())
}
