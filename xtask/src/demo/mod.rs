//! `cargo xtask demo`: the main job on a built-in default.
//!
//! 1. installs or checks the prerequisites and builds the release binaries;
//! 2. brings up a two-domain testbed in network namespaces (2 hosts per
//!    domain, a WAN path emulated by `causeway-wanem`, profile `wan40`);
//! 3. attaches Causeway's eBPF classifier to both gateways' WAN interfaces
//!    with the demo policy (`policy.toml` beside this file);
//! 4. runs a training-like gradient sync (the `gradient_sync` example of the
//!    collective library) on all four hosts, with live progress;
//! 5. prints a report: step times against the WAN's lower bound, what the
//!    kernel counted per traffic class on the WAN, the emulator's counters,
//!    whether every rank ended with bit-identical parameters, and the error
//!    of the clock sync that two `causeway agent`s ran across the same WAN
//!    during the run (`clock_pair.rs`);
//! 6. unless `--no-contention`: runs the sync twice more while a checkpoint
//!    upload (iperf3, 8 TCP streams) shares the WAN, with Causeway's shaping
//!    attached and then detached, and reports the three side by side
//!    (`contended.rs`), step times and clock error, with a per-class rate
//!    plot (docs/plots/);
//! 7. tears everything down (also on failure).

mod clock_pair;
mod contended;
mod contention;
mod report;

use std::{
    io::{BufRead, BufReader, IsTerminal},
    process::Child,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use causeway_core::units;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use crate::{cmd, setup, testbed};

#[derive(Args)]
pub struct DemoArgs {
    /// WAN profile of the testbed: wan40 (RTT 40 ms, 200 Mbit/s), lossy80, lossy120, gig10, dual.
    #[arg(long, default_value = "wan40")]
    pub profile: String,
    /// Training steps (one gradient allreduce each).
    #[arg(long, default_value_t = 12)]
    pub steps: usize,
    /// Gradient size per step, of f32 (e.g. 16mb, 512kb; powers of 1024).
    #[arg(long = "gradient", default_value = "16mb")]
    gradient_text: String,
    /// Gradient buckets per step (DDP-style, allreduced as they become ready).
    #[arg(long, default_value_t = 4)]
    pub buckets: usize,
    /// Simulated backward compute per bucket (e.g. 25ms).
    #[arg(long = "compute", default_value = "25ms")]
    compute_text: String,
    /// Skip the contended runs (checkpoint upload with shaping attached, then detached).
    #[arg(long)]
    pub no_contention: bool,
    /// `--gradient` in bytes (set by [`DemoArgs::resolve`]).
    #[arg(skip)]
    pub gradient_bytes: u64,
    /// `--compute` (set by [`DemoArgs::resolve`]).
    #[arg(skip)]
    pub compute: Duration,
}

impl DemoArgs {
    /// Reads the flags with units (`causeway_core::units`); the error names the flag.
    pub fn resolve(mut self) -> Result<Self> {
        self.gradient_bytes = units::parse_bytes(&self.gradient_text).context("--gradient")?;
        self.compute = units::parse_duration(&self.compute_text).context("--compute")?;
        Ok(self)
    }

    /// The gradient size in MiB, for the report.
    pub fn gradient_mib(&self) -> f64 {
        self.gradient_bytes as f64 / 1_048_576.0
    }
}

const MASTER_PORT: &str = "29500";
/// How long the clock agents may take to make their first kernel-stamped estimate.
const CLOCK_WARMUP: Duration = Duration::from_secs(30);
/// How long the clock agents run before the first measured run (as in `bench clock`).
const CLOCK_SETTLE: Duration = Duration::from_secs(10);

pub fn run(args: &DemoArgs) -> Result<()> {
    if !cmd::is_root() {
        bail!("the demo builds network namespaces and attaches eBPF programs: run it as root");
    }
    setup::run(setup::Mode::Install)?;
    // The WAN benches' one release build (the gradient_sync example is in it).
    cmd::build_wan_bench_bins()?;

    println!(
        "\n== testbed: 2 domains x 2 hosts, WAN profile {} ==",
        args.profile
    );
    let bed = testbed::Testbed::up("demo", &args.profile)?;
    println!(
        "WAN: {:.0} Mbit/s, RTT {:.1} ms; hosts: {}",
        bed.rate_mbit,
        2.0 * bed.delay_ms,
        bed.hosts
            .iter()
            .map(|h| format!("{} (d{})", h.ip, h.domain))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("\n== clock sync: a `causeway agent` on the first host of each domain (kernel stamps, probes every 100 ms) ==");
    // Started first: they settle while the gateways are set up.
    let clock = clock_pair::ClockPair::start(&bed)?;
    // As in the allreduce bench: a step's connections idle through the
    // compute gap and must not restart from the initial window each step.
    crate::bench_allreduce::tune_hosts(&bed)?;
    let policy = cmd::root().join("xtask/src/demo/policy.toml");
    println!("\n== eBPF: attaching the classifier (XDP) and shaper (TC + HTB) to the gateways' WAN ports ==");
    bed.attach(&policy)?;
    if !clock.wait_estimate(CLOCK_WARMUP, CLOCK_SETTLE) {
        bail!("the clock agents made no kernel-stamped estimate within {CLOCK_WARMUP:?}");
    }

    println!(
        "\n== gradient sync: {} steps x {} ==",
        args.steps, args.gradient_text
    );
    let started = Instant::now();
    let outcome = run_ranks(&bed, args, "uncontended", &clock);
    let wall = started.elapsed();
    let stats = bed.stats();
    let shaping = bed.policy_show();
    let emulator = bed.emulator_status();
    let outcome = outcome?;
    report::print(&report::Inputs {
        args,
        bed: &bed,
        outcome: &outcome,
        wall,
        stats: &stats,
        shaping: &shaping,
        emulator: emulator.as_ref(),
    });
    if !outcome.consistent {
        bail!("ranks ended with different parameters");
    }
    if !args.no_contention {
        contended::run(&bed, args, outcome, &stats, &clock)?;
    }
    Ok(())
}

/// What the ranks reported.
pub struct Outcome {
    pub algorithm: String,
    pub step_secs: Vec<f64>,
    pub exposed_comm_secs: Vec<f64>,
    pub digests: Vec<String>,
    pub consistent: bool,
    /// The clock agents' errors during the run.
    pub clock: clock_pair::ClockErrors,
}

fn run_ranks(
    bed: &testbed::Testbed,
    args: &DemoArgs,
    label: &str,
    clock: &clock_pair::ClockPair,
) -> Result<Outcome> {
    let poll = clock.poll();
    let exe = cmd::root().join("target/release/examples/gradient_sync");
    let world = bed.hosts.len();
    let mut children: Vec<Child> = Vec::new();
    for (rank, host) in bed.hosts.iter().enumerate() {
        let child = bed
            .rank_command(rank, MASTER_PORT, &exe)
            .args([
                "--gradient",
                &args.gradient_bytes.to_string(),
                "--steps",
                &args.steps.to_string(),
            ])
            .args([
                "--buckets",
                &args.buckets.to_string(),
                "--compute",
                &format!("{}ns", args.compute.as_nanos()),
            ])
            .env("CAUSEWAY_TIMEOUT", "30s")
            .spawn()
            .with_context(|| format!("starting rank {rank} in {}", host.netns))?;
        children.push(child);
    }
    let bar = progress_bar(args.steps as u64);
    bar.set_prefix(label.to_string());
    let mut outcome = Outcome {
        algorithm: String::new(),
        step_secs: vec![],
        exposed_comm_secs: vec![],
        digests: vec![],
        consistent: true,
        clock: Default::default(),
    };
    // Rank 0 drives the progress display; the others are read after it ends.
    let rank0 = children[0].stdout.take().context("rank 0 stdout")?;
    for line in BufReader::new(rank0).lines() {
        let line = line.context("reading rank 0")?;
        let Ok(ev) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        match ev["event"].as_str() {
            Some("ready") => {
                outcome.algorithm = ev["algorithm"].as_str().unwrap_or("?").to_string();
                bar.println(format!(
                    "{label}: rank 0 ready in {:.2} s, algorithm {}",
                    ev["init_s"].as_f64().unwrap_or(0.0),
                    outcome.algorithm
                ));
            }
            Some("step") => {
                let s = ev["s"].as_f64().unwrap_or(0.0);
                outcome.step_secs.push(s);
                outcome
                    .exposed_comm_secs
                    .push(ev["exposed_comm_s"].as_f64().unwrap_or(0.0));
                let gbit = (args.gradient_bytes as f64 * 8.0) / s / 1e9;
                bar.set_message(format!("last step {:.3} s, {:.3} Gbit/s algbw", s, gbit));
                bar.inc(1);
                if bar.is_hidden() {
                    println!(
                        "{label}: step {:>3}/{}: {:.3} s ({:.3} Gbit/s algbw)",
                        outcome.step_secs.len(),
                        args.steps,
                        s,
                        gbit
                    );
                }
            }
            Some("done") => outcome
                .digests
                .push(ev["digest"].as_str().unwrap_or("?").to_string()),
            _ => {}
        }
    }
    bar.finish_and_clear();
    outcome.clock = poll.stop();
    let mut failures = Vec::new();
    for (rank, child) in children.into_iter().enumerate() {
        let out = child
            .wait_with_output()
            .with_context(|| format!("waiting for rank {rank}"))?;
        if rank > 0 {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if let Ok(ev) = serde_json::from_str::<Value>(line) {
                    if ev["event"] == "done" {
                        outcome
                            .digests
                            .push(ev["digest"].as_str().unwrap_or("?").to_string());
                        outcome.consistent &= ev["consistent"] == true;
                    }
                }
            }
        }
        if !out.status.success() {
            failures.push(format!(
                "rank {rank} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    if !failures.is_empty() {
        bail!("the gradient sync failed:\n{}", failures.join("\n"));
    }
    outcome.consistent &=
        outcome.digests.len() == world && outcome.digests.windows(2).all(|w| w[0] == w[1]);
    Ok(outcome)
}

fn progress_bar(steps: u64) -> ProgressBar {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(steps)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {prefix} step {pos}/{len} [{bar:30}] {elapsed_precise} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar
}
