//! `cargo xtask bench allreduce --ebpf [PROFILE...]`: what Causeway's kernel
//! half costs the collective. On the same testbed (default `wan40`), the
//! allreduce world runs with nothing attached and with the XDP classifier
//! and the TC egress program attached to both gateways' WAN ports
//! (`causeway attach` with the policy `causeway policy example` prints:
//! every library connection classified by its DSCP and port, counted per
//! class, no shaping), interleaved run by run, 3 runs each. Per size it
//! prints both medians with their spread over runs and the ratio, and the
//! per-class packets the programs counted (so the attached runs are known
//! to have gone through them).

use anyhow::{Context, Result};
use serde_json::Value;

use crate::bench_allreduce::{human, run_world, tune_hosts, SIZES};
use crate::bench_tls::{load, spread};
use crate::cmd;
use crate::testbed::{find_key, Testbed};

const RUNS: usize = 3;

pub fn run(profiles: &[String]) -> Result<()> {
    let profiles: Vec<String> = if profiles.is_empty() {
        vec!["wan40".into()]
    } else {
        profiles.to_vec()
    };
    cmd::build_wan_bench_bins()?;
    let ours = cmd::bin_path("causeway-allreduce-bench", true);
    let policy = cmd::root().join("target/bench-ebpf-policy.toml");
    let text = cmd::output(cmd::cargo_bin("causeway", true).args(["policy", "example"]))
        .context("`causeway policy example` failed")?;
    std::fs::write(&policy, text).with_context(|| format!("writing {}", policy.display()))?;
    let bar = crate::progress::steps(2 * (profiles.len() * RUNS) as u64, "bench allreduce --ebpf");
    for profile in &profiles {
        let bed = Testbed::up("ebpfbench", profile)?;
        tune_hosts(&bed)?;
        let start = load();
        // [detached, attached][run] = rank 0's rows, with `time_s`
        let mut rows: [Vec<Vec<Value>>; 2] = [Vec::new(), Vec::new()];
        let world = || {
            run_world(&bed, |_| {
                let mut c = std::process::Command::new(&ours);
                c.args(["--sizes", SIZES, "--iters", "5", "--warmup", "1"]);
                c
            })
        };
        let mut counted = Vec::new();
        for run in 0..RUNS {
            crate::progress::now(
                &bar,
                format!("{profile}: run {} of {RUNS}: detached", run + 1),
            );
            rows[0].push(world()?);
            bar.inc(1);
            crate::progress::now(
                &bar,
                format!("{profile}: run {} of {RUNS}: attached", run + 1),
            );
            bed.attach(&policy)?;
            let r = world();
            counted = bed.stats();
            bed.detach()?;
            rows[1].push(r?);
            bar.inc(1);
        }
        println!(
            "\nallreduce, 2 domains x 2 hosts, {profile} ({:.0} Mbit/s, RTT {:.0} ms), eBPF detached vs attached on both gateways' WAN ports (`causeway policy example`), {RUNS} runs interleaved, each the median of 5 after 1 warm-up; load {start} at the start, {} at the end",
            bed.rate_mbit,
            2.0 * bed.delay_ms,
            load()
        );
        print_table(&rows);
        println!("\nper-class packets counted by XDP in the last attached run:");
        for (port, stats) in counted {
            println!("  {port}: {}", class_packets(&stats));
        }
    }
    Ok(())
}

fn print_table(rows: &[Vec<Vec<Value>>; 2]) {
    println!("| size | detached s, median [min–max] | attached s, median [min–max] | attached / detached |");
    println!("|---:|---|---|---:|");
    let sizes: Vec<u64> = rows[0][0]
        .iter()
        .filter_map(|r| r["bytes"].as_u64())
        .collect();
    for bytes in sizes {
        let times = |which: usize| -> Vec<f64> {
            rows[which]
                .iter()
                .filter_map(|run| {
                    run.iter()
                        .find(|r| r["bytes"].as_u64() == Some(bytes))
                        .and_then(|r| r["time_s"].as_f64())
                })
                .collect()
        };
        let (off, on) = (times(0), times(1));
        let (t_off, t_on) = (spread(&off), spread(&on));
        let show = |(t, lo, hi): (f64, f64, f64)| format!("{t:.4} [{lo:.4}–{hi:.4}]");
        println!(
            "| {} | {} | {} | {:.3}x |",
            human(bytes),
            show(t_off),
            show(t_on),
            t_on.0 / t_off.0
        );
    }
}

/// "class=packets ..." from one port's `causeway stats --json`.
fn class_packets(stats: &Value) -> String {
    let Some(classes) = find_key(stats, "classes").and_then(Value::as_array) else {
        return format!("(no per-class counters in {stats})");
    };
    classes
        .iter()
        .map(|c| {
            format!(
                "{}={}",
                c["name"].as_str().unwrap_or("?"),
                c["packets"].as_u64().unwrap_or(0)
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}
