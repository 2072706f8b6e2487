//! `status` and `set`.

use anyhow::{Context, Result};
use causeway_core::units::{parse_bytes, UnitError};
use causeway_netsim::control::{self, Request};
use causeway_netsim::{Dir, LinkParams, ParamsPatch};
use clap::Args;

use crate::link_args::{duration_ns, parse_link_rate};
use crate::state::{self, State};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Testbed to show (default: all that are up).
    #[arg(long)]
    pub tag: Option<String>,
    /// Print JSON (plan + counters) instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn status(args: StatusArgs) -> Result<()> {
    let tags = match args.tag {
        Some(t) => vec![t],
        None => state::tags(),
    };
    if tags.is_empty() {
        println!("no testbed is up");
    }
    for tag in tags {
        let Some(st) = State::load(&tag)? else {
            println!("testbed {tag:?} is not up");
            continue;
        };
        if args.json {
            let stats: Vec<_> = st
                .emulators
                .iter()
                .map(|e| control::request(&e.control, &Request::Stats).ok())
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({ "state": st, "stats": stats }))?
            );
        } else {
            print_status(&st);
        }
    }
    Ok(())
}

fn fmt_params(p: &LinkParams) -> String {
    format!(
        "delay {:.3} ms ±{:.3}, rate {}, loss {}, queue {} B{}{}",
        p.delay_ns as f64 / 1e6,
        p.jitter_ns as f64 / 1e6,
        if p.rate_bps == 0 {
            "unlimited".into()
        } else {
            format!("{} Mbit/s", p.rate_bps as f64 / 1e6)
        },
        p.loss,
        p.queue_bytes,
        if p.reorder > 0.0 {
            format!(", reorder {}", p.reorder)
        } else {
            String::new()
        },
        if p.up { "" } else { ", CUT" }
    )
}

pub fn print_status(st: &State) {
    let plan = &st.plan;
    println!(
        "testbed {} (profile {}), {} domains",
        plan.tag,
        st.profile,
        plan.domains()
    );
    for (d, gw) in plan.gateways.iter().enumerate() {
        println!("  domain {d}: gateway {gw} (10.{d}.0.1)");
        for h in plan.hosts.iter().filter(|h| h.domain == d) {
            let via: Vec<String> = h
                .path_ips
                .iter()
                .map(|(p, ip)| format!("path{p}={ip}"))
                .collect();
            println!(
                "    host {:<18} {:<12} {}",
                h.netns,
                h.ip.to_string(),
                via.join(" ")
            );
        }
    }
    for p in &plan.paths {
        println!(
            "  path {} d{}<->d{}{} ns {} {}<->{} mark {:#x} table {}{}",
            p.index,
            p.domain_a,
            p.domain_b,
            if p.default { " (default)" } else { "" },
            p.emulator_netns,
            p.gw_a_ip,
            p.gw_b_ip,
            p.mark,
            p.table,
            p.tos
                .map(|t| format!(" tos {t:#x} (DSCP {})", t >> 2))
                .unwrap_or_default()
        );
        let Some(e) = st.emulators.iter().find(|e| e.path == p.index) else {
            println!("    emulator not started");
            continue;
        };
        match control::request(&e.control, &Request::Stats) {
            Ok(s) => {
                for (name, d) in [("a->b", &s.a_to_b), ("b->a", &s.b_to_a)] {
                    let c = d.counters;
                    println!(
                        "    {name}: {} | fwd {} ({} B) lost {} qdrop {} cut {} in-flight {}",
                        d.params.map(|p| fmt_params(&p)).unwrap_or_default(),
                        c.forwarded,
                        c.forwarded_bytes,
                        c.dropped_loss,
                        c.dropped_queue,
                        c.dropped_down,
                        d.in_flight
                    );
                }
                if let Some(err) = s.error {
                    println!("    ERROR: {err}");
                }
            }
            Err(err) => println!("    emulator pid {} not answering: {err}", e.pid),
        }
    }
}

#[derive(Debug, Args)]
pub struct SetArgs {
    #[arg(long, default_value = "demo")]
    pub tag: String,
    /// Path index (see `status`).
    #[arg(long)]
    pub path: usize,
    /// Direction: both, a-to-b (from the lower-numbered domain), b-to-a.
    #[arg(long, default_value = "both", value_parser = ["both", "a-to-b", "b-to-a"])]
    pub dir: String,
    /// One-way delay, e.g. 20ms.
    #[arg(long)]
    pub delay: Option<String>,
    /// Jitter, e.g. 1ms.
    #[arg(long)]
    pub jitter: Option<String>,
    /// Rate, e.g. 50mbit, or `unlimited`.
    #[arg(long)]
    pub rate: Option<String>,
    #[arg(long)]
    pub loss: Option<f64>,
    /// Drop-tail queue limit, e.g. 1mb.
    #[arg(long)]
    pub queue: Option<String>,
    #[arg(long)]
    pub reorder: Option<f64>,
    /// Cut the path (drop everything).
    #[arg(long, conflicts_with = "restore")]
    pub cut: bool,
    /// Restore a cut path.
    #[arg(long)]
    pub restore: bool,
}

pub fn set(a: SetArgs) -> Result<()> {
    fn parsed<T>(
        flag: &str,
        v: &Option<String>,
        parse: impl Fn(&str) -> Result<T, UnitError>,
    ) -> Result<Option<T>> {
        v.as_deref()
            .map(parse)
            .transpose()
            .context(flag.to_string())
    }
    let patch = ParamsPatch {
        delay_ns: parsed("--delay", &a.delay, duration_ns)?,
        jitter_ns: parsed("--jitter", &a.jitter, duration_ns)?,
        rate_bps: parsed("--rate", &a.rate, parse_link_rate)?,
        loss: a.loss,
        queue_bytes: parsed("--queue", &a.queue, parse_bytes)?,
        reorder: a.reorder,
        up: if a.cut {
            Some(false)
        } else if a.restore {
            Some(true)
        } else {
            None
        },
    };
    anyhow::ensure!(
        patch != ParamsPatch::default(),
        "nothing to change: give at least one option"
    );
    let st = State::load(&a.tag)?.with_context(|| format!("testbed {:?} is not up", a.tag))?;
    let e = st
        .emulators
        .iter()
        .find(|e| e.path == a.path)
        .with_context(|| format!("testbed {} has no path {}", a.tag, a.path))?;
    let dir = match a.dir.as_str() {
        "a-to-b" => Dir::AToB,
        "b-to-a" => Dir::BToA,
        _ => Dir::Both,
    };
    let s = control::request(&e.control, &Request::Set { dir, patch })?;
    for (name, d) in [("a->b", s.a_to_b), ("b->a", s.b_to_a)] {
        println!(
            "path {} {name}: {}",
            a.path,
            d.params.map(|p| fmt_params(&p)).unwrap_or_default()
        );
    }
    Ok(())
}
