//! `causeway clock status [--json]`: asks the local agent.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand};

use causeway::agent::{
    self,
    control::{self, Request},
    report::AgentReport,
};

use super::Context;

#[derive(Debug, Subcommand)]
pub enum ClockCommand {
    /// Per peer: the estimated clock offset and drift, its error bound, the
    /// timestamp source in use, and every source's estimate side by side.
    #[command(
        after_help = "Examples:\n  causeway clock status\n  causeway --netns dc1 clock status --json",
        after_long_help = super::exit::CLOCK_STATUS
    )]
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON instead of a table. Optional.
    #[arg(long)]
    pub json: bool,
    /// The agent's control socket. Optional; default:
    /// <state dir>/<namespace scope>/agent.sock.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

pub fn run(ctx: &Context, cmd: &ClockCommand) -> Result<()> {
    let ClockCommand::Status(args) = cmd;
    let path = args
        .socket
        .clone()
        .unwrap_or_else(|| agent::default_socket(&ctx.layout, &ctx.scope));
    let resp = control::request(&path, &Request::ClockStatus)
        .with_context(|| format!("is `causeway agent` running in the {}?", ctx.scope))?;
    let report = resp.clock.context("the agent sent no clock status")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

fn print_table(r: &AgentReport) {
    println!(
        "host {} in the {}: kernel stamps {}, SO_TIMESTAMPING {}",
        r.host_id,
        r.scope,
        if r.kernel_stamps { "on" } else { "off" },
        if r.session.software_stamps {
            "on"
        } else {
            "off"
        },
    );
    for i in &r.interfaces {
        println!(
            "  {}: xdp link {}{}, tc link {}{}, stamped rx {} tx {}, skipped {}",
            i.name,
            i.xdp_link_id,
            if i.xdp_adopted { " (adopted)" } else { "" },
            i.tc_link_id,
            if i.tc_adopted { " (adopted)" } else { "" },
            i.stamps_rx,
            i.stamps_tx,
            i.stamps_skipped
        );
    }
    println!(
        "{:<14} {:<21} {:<16} {:>14} {:>10} {:>12} {:>10} {:>11} {:>8}",
        "PEER",
        "ADDRESS",
        "SOURCE",
        "OFFSET µs",
        "DRIFT ppm",
        "±BOUND µs",
        "±ppm",
        "MIN RTT ms",
        "SAMPLES"
    );
    for p in &r.session.peers {
        if p.sources.is_empty() {
            println!(
                "{:<14} {:<21} (no estimate yet)",
                p.name,
                p.addr.to_string()
            );
        }
        for (k, s) in p.sources.iter().enumerate() {
            let selected = p.selected.is_some_and(|sel| sel.source == s.source);
            println!(
                "{:<14} {:<21} {:<16} {:>14.1} {:>10.3} {:>12.1} {:>10.3} {:>11.3} {:>8}",
                if k == 0 { p.name.as_str() } else { "" },
                if k == 0 {
                    p.addr.to_string()
                } else {
                    String::new()
                },
                format!("{}{}", s.source, if selected { " *" } else { "" }),
                s.offset_ns / 1e3,
                s.drift_ppm,
                s.error_bound_ns / 1e3,
                s.drift_bound_ppm,
                s.min_rtt_ns as f64 / 1e6,
                s.samples_used
            );
        }
    }
    let ig = r.session.ignored;
    println!(
        "answered {} requests; ignored {} malformed, {} from unknown peers; {} estimates published",
        r.session.requests_answered, ig.malformed, ig.unknown_peer, r.published
    );
    let keyed: Vec<&str> = r
        .session
        .peers
        .iter()
        .filter(|p| p.authenticated)
        .map(|p| p.name.as_str())
        .collect();
    println!(
        "authenticated probes: {}; refused {} unauthenticated, {} forged, {} replayed",
        if keyed.is_empty() {
            "off (no peer has a key)".to_string()
        } else {
            format!("on for {}", keyed.join(", "))
        },
        ig.unauthenticated,
        ig.forged,
        ig.replayed
    );
}
