//! `stats`: per-class counters, once or every interval with rates.

use std::{collections::HashMap, time::Duration};

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use causeway::stats::{self, InterfaceStats, Totals};

use super::{args::StatsArgs, table, Context};

/// What `stats --json` prints.
#[derive(Serialize)]
struct Report<'a> {
    interfaces: &'a [InterfaceStats],
}

pub fn run(ctx: &Context, args: &StatsArgs) -> Result<()> {
    if args.interval < Duration::from_millis(50) {
        bail!("--interval must be at least 50ms, not {:?}", args.interval);
    }
    let mut previous: Option<HashMap<(String, u8), Totals>> = None;
    loop {
        let sample = collect(ctx, args.iface.as_deref())?;
        if args.json {
            let report = Report {
                interfaces: &sample,
            };
            if args.watch {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                println!("{}", serde_json::to_string_pretty(&report)?);
            }
        } else {
            print_tables(&sample, previous.as_ref(), args.interval.as_secs_f64());
        }
        if !args.watch {
            return Ok(());
        }
        previous = Some(index(&sample));
        std::thread::sleep(args.interval);
    }
}

fn collect(ctx: &Context, iface: Option<&str>) -> Result<Vec<InterfaceStats>> {
    let ifaces = ctx.targets(iface)?;
    ifaces
        .iter()
        .map(|i| {
            stats::interface_stats(&ctx.layout, &ctx.scope, i)
                .with_context(|| format!("cannot read the counters of {i}"))
        })
        .collect()
}

/// Class totals keyed by (interface, class id); the unclassified slot has id `u8::MAX`.
fn index(sample: &[InterfaceStats]) -> HashMap<(String, u8), Totals> {
    let mut out = HashMap::new();
    for s in sample {
        for c in &s.classes {
            out.insert((s.iface.clone(), c.id), c.totals());
        }
        out.insert((s.iface.clone(), u8::MAX), s.unclassified);
    }
    out
}

fn print_tables(
    sample: &[InterfaceStats],
    previous: Option<&HashMap<(String, u8), Totals>>,
    interval: f64,
) {
    for s in sample {
        println!(
            "{} ({}), policy generation {}",
            s.iface,
            s.scope,
            table::opt(s.policy_generation)
        );
        let mut rows = Vec::new();
        let rate = |key: (String, u8), now: Totals| -> Vec<String> {
            match previous.and_then(|p| p.get(&key)) {
                Some(before) => {
                    let d = now.since(before);
                    vec![
                        format!("{:.0}", d.packets as f64 / interval),
                        format!("{:.0}", d.bytes as f64 * 8.0 / interval),
                    ]
                }
                None => vec!["-".into(), "-".into()],
            }
        };
        for c in &s.classes {
            let mut row = vec![
                c.name.clone(),
                c.id.to_string(),
                c.packets.to_string(),
                c.bytes.to_string(),
                c.drops.to_string(),
            ];
            row.extend(rate((s.iface.clone(), c.id), c.totals()));
            rows.push(row);
        }
        let u = s.unclassified;
        let mut row = vec![
            "(unclassified)".into(),
            "-".into(),
            u.packets.to_string(),
            u.bytes.to_string(),
            u.drops.to_string(),
        ];
        row.extend(rate((s.iface.clone(), u8::MAX), u));
        rows.push(row);
        print!(
            "{}",
            table::render(
                &["CLASS", "ID", "PACKETS", "BYTES", "DROPS", "PKT/S", "BIT/S"],
                &rows
            )
        );
        if !s.reasons.is_empty() {
            println!(
                "not fully parsed / admission (admission drops: {}):",
                s.admission_drops()
            );
            let rows: Vec<Vec<String>> = s
                .reasons
                .iter()
                .map(|r| {
                    vec![
                        r.reason.clone(),
                        r.packets.to_string(),
                        r.bytes.to_string(),
                        r.drops.to_string(),
                    ]
                })
                .collect();
            print!(
                "{}",
                table::render(&["REASON", "PACKETS", "BYTES", "DROPS"], &rows)
            );
        }
    }
}
