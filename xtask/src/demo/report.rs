//! The demo's final report.

use std::time::Duration;

use serde_json::Value;

use super::{DemoArgs, Outcome};
use crate::testbed::{find_key, Testbed};

pub struct Inputs<'a> {
    pub args: &'a DemoArgs,
    pub bed: &'a Testbed,
    pub outcome: &'a Outcome,
    pub wall: Duration,
    pub stats: &'a [(String, Value)],
    pub shaping: &'a [(String, String)],
    pub emulator: Option<&'a Value>,
}

pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn print(r: &Inputs) {
    let o = r.outcome;
    let bytes = r.args.gradient_bytes as f64;
    // Every byte of the gradient must cross the WAN once in each direction
    // (each domain needs the other's partial sum): T >= S*8/B.
    let wan_bound = bytes * 8.0 / (r.bed.rate_mbit * 1e6);
    let compute = r.args.buckets as f64 * r.args.compute.as_secs_f64();
    // Warm-up (connection ramp, slow start) is excluded from the medians.
    let mut steady: Vec<f64> = o.step_secs.iter().skip(1).copied().collect();
    if steady.is_empty() {
        steady = o.step_secs.clone();
    }
    steady.sort_by(f64::total_cmp);
    let median = percentile(&steady, 0.5);
    println!("\n================ Causeway demo report ================");
    println!(
        "world: {} ranks in 2 domains; algorithm: {}",
        r.bed.hosts.len(),
        o.algorithm
    );
    println!(
        "WAN: {:.0} Mbit/s, RTT {:.1} ms ({})",
        r.bed.rate_mbit,
        2.0 * r.bed.delay_ms,
        r.args.profile
    );
    println!(
        "steps: {} x {} MiB gradient in {} buckets, {:.0} ms compute per step",
        o.step_secs.len(),
        r.args.gradient_mib(),
        r.args.buckets,
        compute * 1e3
    );
    println!(
        "step time (after the first): median {:.3} s, p90 {:.3} s, min {:.3} s",
        median,
        percentile(&steady, 0.9),
        steady.first().copied().unwrap_or(f64::NAN)
    );
    println!(
        "first step (connection warm-up): {:.3} s; wall time {:.1} s",
        o.step_secs.first().copied().unwrap_or(f64::NAN),
        r.wall.as_secs_f64()
    );
    println!(
        "WAN lower bound per step (S*8/B): {:.3} s  -> median step / bound = {:.2}x",
        wan_bound,
        median / wan_bound
    );
    println!(
        "algbw: {:.1} Mbit/s of gradient per second (WAN: {:.0} Mbit/s)",
        bytes * 8.0 / median / 1e6,
        r.bed.rate_mbit
    );
    let mut exposed: Vec<f64> = o.exposed_comm_secs.iter().skip(1).copied().collect();
    exposed.sort_by(f64::total_cmp);
    println!(
        "communication not hidden behind compute: median {:.3} s per step",
        percentile(&exposed, 0.5)
    );
    println!(
        "parameters bit-identical on every rank: {} (digest {})",
        if o.consistent { "yes" } else { "NO" },
        o.digests.first().map(String::as_str).unwrap_or("?")
    );
    println!(
        "\nclock sync across the WAN during the run (agent A's estimate of B, |estimate - truth|):"
    );
    for line in o.clock.lines() {
        println!("  {line}");
    }
    println!("\nkernel counters (XDP ingress on the gateways' WAN ports, per class):");
    for (port, stats) in r.stats {
        println!("  {port}");
        let classes = find_key(stats, "classes").and_then(Value::as_array);
        for c in classes.into_iter().flatten() {
            println!(
                "    {:<10} {:>10} packets {:>14} bytes {:>6} drops",
                c["name"].as_str().unwrap_or("?"),
                c["packets"].as_u64().unwrap_or(0),
                c["bytes"].as_u64().unwrap_or(0),
                c["drops"].as_u64().unwrap_or(0)
            );
        }
        if let Some(u) = find_key(stats, "unclassified") {
            println!(
                "    {:<10} {:>10} packets {:>14} bytes",
                "unclass.",
                u["packets"].as_u64().unwrap_or(0),
                u["bytes"].as_u64().unwrap_or(0)
            );
        }
    }
    println!("\nshaping (TC egress + HTB on the gateways' WAN ports, `causeway policy show`; MEASURED is the last second, after the sync):");
    for (port, text) in r.shaping {
        println!("  {port}");
        // Only the per-class table (the rules are the demo policy's, shown above).
        let table = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("CLASS"));
        for line in table.take_while(|l| !l.trim().is_empty()) {
            println!("    {}", line.trim_start());
        }
    }
    if let Some(em) = r.emulator {
        println!("\nWAN emulator counters:");
        match find_key(em, "counters").or_else(|| find_key(em, "stats")) {
            Some(c) => println!("  {c}"),
            None => println!("  {em}"),
        }
    }
    println!("======================================================");
}
