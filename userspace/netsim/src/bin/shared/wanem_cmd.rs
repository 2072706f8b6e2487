//! The emulator process: `causeway-wanem` (and the hidden `causeway-netsim wanem`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use causeway_netsim::{control, sys, Emulator, EmulatorConfig};
use clap::Args;

use super::link_args::LinkArgs;

/// Bridge two interfaces through an emulated WAN link (both directions).
#[derive(Debug, Clone, Args)]
pub struct WanemArgs {
    /// Run in this named network namespace (`ip netns` name); default: the current one.
    #[arg(long)]
    pub netns: Option<String>,
    /// Interface A.
    #[arg(long)]
    pub iface_a: String,
    /// Interface B.
    #[arg(long)]
    pub iface_b: String,
    #[command(flatten)]
    pub link: LinkArgs,
    /// Exact link parameters as JSON (a `LinkParams`); overrides the link options.
    #[arg(long)]
    pub params_json: Option<String>,
    /// Seed of the loss/jitter/reorder generators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Wake this long before each departure and busy-wait up to it (e.g. 50us; 0us = sleep only).
    #[arg(long, default_value_t = default_spin())]
    pub spin: String,
    /// Share of one core each direction may spend spinning (0–1; 1 = unlimited).
    #[arg(long, default_value_t = causeway_netsim::emulator::DEFAULT_SPIN_SHARE)]
    pub spin_share: f64,
    /// SCHED_FIFO priority of the forwarding threads; 0 = normal scheduling.
    #[arg(long, default_value_t = 10)]
    pub rt_prio: i32,
    /// Leave the interfaces' GRO/GSO/TSO/checksum offloads as they are.
    #[arg(long)]
    pub keep_offloads: bool,
    /// Serve the control socket (JSON lines: stats, set) at this path.
    #[arg(long)]
    pub control: Option<PathBuf>,
}

/// The default of `--spin`, as text.
pub fn default_spin() -> String {
    format!("{}us", causeway_netsim::emulator::DEFAULT_SPIN_NS / 1000)
}

/// Run until SIGINT/SIGTERM; print the final counters as JSON on stdout.
pub fn run(args: WanemArgs) -> Result<()> {
    let stop = sys::stop_on_signals().context("installing signal handlers")?;
    let params = match &args.params_json {
        Some(json) => {
            let p: causeway_netsim::LinkParams =
                serde_json::from_str(json).context("--params-json")?;
            p.validate().context("--params-json")?;
            p
        }
        None => args.link.to_params()?,
    };
    let mut cfg = EmulatorConfig::new(&args.iface_a, &args.iface_b, params);
    cfg.netns = args.netns.clone();
    cfg.seed = args.seed;
    cfg.spin_ns = super::link_args::duration_ns(&args.spin).context("--spin")?;
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.spin_share),
        "--spin-share {} is not within 0..=1",
        args.spin_share
    );
    cfg.spin_share = args.spin_share;
    cfg.realtime_priority = (args.rt_prio > 0).then_some(args.rt_prio);
    cfg.disable_offloads = !args.keep_offloads;
    let emulator = Emulator::start(cfg).with_context(|| {
        format!(
            "starting the emulator between {} and {}",
            args.iface_a, args.iface_b
        )
    })?;
    eprintln!(
        "causeway-wanem: {} <-> {}{}: {:?}",
        args.iface_a,
        args.iface_b,
        args.netns
            .as_deref()
            .map(|n| format!(" in {n}"))
            .unwrap_or_default(),
        params
    );
    match &args.control {
        Some(path) => control::serve(&emulator, path, stop)
            .with_context(|| format!("control socket {}", path.display()))?,
        None => {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
    let stats = emulator.stop();
    println!("{}", serde_json::to_string(&stats)?);
    if let Some(e) = stats.error {
        anyhow::bail!("emulator stopped on an error: {e}");
    }
    Ok(())
}
