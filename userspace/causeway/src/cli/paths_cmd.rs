//! `causeway paths …`: WAN path steering on a gateway's LAN-facing
//! interface: attach the steering program with the gateway's paths (id and
//! routing mark), put flows on paths, take paths down and up, and show what
//! each path carried. Every change is a map update: connections never notice.

use anyhow::{bail, Context as _, Result};
use clap::Subcommand;

use causeway::paths::{
    self,
    monitor::{self, MonitorConfig, PathHealth},
    parse_flow, FlowSpec, PathMaps, PathRow,
};

use super::{exit, table, Context};

#[derive(Debug, Subcommand)]
pub enum PathsCommand {
    /// Attach the steering program (TC ingress) to a gateway's LAN-facing
    /// interface with its paths: each path's routing mark (the gateway's
    /// `ip rule fwmark MARK lookup TABLE` sends marked frames over it).
    /// Every path starts up, with no flows on it.
    #[command(
        after_help = "Example:\n  causeway --netns d0gw paths attach --iface br0 --path 0=0x1000 --path 1=0x1001",
        after_long_help = exit::PATHS_ATTACH
    )]
    Attach {
        /// Interface (required).
        #[arg(long, value_name = "IF")]
        iface: String,
        /// A path as ID=MARK (ID 0-15; MARK non-zero, decimal or 0x hex);
        /// at least one, repeat for more.
        #[arg(long = "path", value_name = "ID=MARK", required = true, value_parser = path_mark_arg)]
        paths: Vec<(u32, u32)>,
    },
    /// Detach the steering program and remove its maps and pins (its flows
    /// go back to the routing table's default path).
    #[command(
        after_help = "Example:\n  causeway --netns d0gw paths detach --iface br0",
        after_long_help = exit::PATHS_DETACH
    )]
    Detach {
        /// Interface (required).
        #[arg(long, value_name = "IF")]
        iface: String,
    },
    /// Put flows on a path (replacing the path they were on).
    #[command(
        after_help = "Example:\n  causeway --netns d0gw paths route --iface br0 --path 1 --flow 'tcp 10.0.0.10:40000 10.1.0.10:5201'",
        after_long_help = exit::PATHS_ROUTE
    )]
    Route {
        /// Interface (required).
        #[arg(long, value_name = "IF")]
        iface: String,
        /// Path id (required; a path given at attach or with `set`).
        #[arg(long, value_name = "ID")]
        path: u32,
        /// A flow as 'PROTO SRC:PORT DST:PORT' (one direction; IPv6 as
        /// [addr]:port); at least one, repeat for more.
        #[arg(long = "flow", value_name = "FLOW", required = true)]
        flows: Vec<String>,
    },
    /// Take flows off their path (back to the routing table's default).
    #[command(
        after_help = "Example:\n  causeway --netns d0gw paths unroute --iface br0 --flow 'tcp 10.0.0.10:40000 10.1.0.10:5201'",
        after_long_help = exit::PATHS_ROUTE
    )]
    Unroute {
        /// Interface (required).
        #[arg(long, value_name = "IF")]
        iface: String,
        /// A flow as 'PROTO SRC:PORT DST:PORT'; at least one.
        #[arg(long = "flow", value_name = "FLOW", required = true)]
        flows: Vec<String>,
    },
    /// Add a path, change its mark, or take it down / bring it up: a path
    /// that is down steers none of its flows (they take the default route)
    /// until it is up again.
    #[command(
        after_help = "Examples:\n  causeway --netns d0gw paths set --iface br0 --path 1 --down\n  causeway --netns d0gw paths set --iface br0 --path 2 --mark 0x1002",
        after_long_help = exit::PATHS_SET
    )]
    Set {
        /// Interface (required).
        #[arg(long, value_name = "IF")]
        iface: String,
        /// Path id (required).
        #[arg(long, value_name = "ID")]
        path: u32,
        /// New routing mark. Optional; default: keep (required for a new path).
        #[arg(long, value_name = "MARK", value_parser = mark_arg)]
        mark: Option<u32>,
        /// Take the path down. Optional; default: up.
        #[arg(long)]
        down: bool,
    },
    /// The steering controller: probe every path (a socket marked with the
    /// path's mark, to an address over it that answers: another monitor's
    /// --listen), declare a path down after --down-after without a reply,
    /// move its flows to the live path with the lowest RTT, and home again
    /// once it is back (3 replies in a row). Prints one JSON line per event
    /// and a report per second; runs until interrupted (or --duration).
    #[command(
        after_help = "Examples:\n  causeway --netns d1gw paths monitor --listen 0.0.0.0:7360\n  causeway --netns d0gw paths monitor --iface br0 --probe 0=10.200.0.2:7360 --probe 1=10.200.1.2:7360 --listen 0.0.0.0:7360",
        after_long_help = exit::PATHS_MONITOR
    )]
    Monitor {
        /// Interface whose steering to drive. Optional with --listen alone.
        #[arg(long, value_name = "IF", requires = "probes")]
        iface: Option<String>,
        /// A path to probe as ID=ADDR:PORT (an address answering over it);
        /// repeat per path. Requires --iface.
        #[arg(long = "probe", value_name = "ID=ADDR:PORT", value_parser = probe_arg, requires = "iface")]
        probes: Vec<(u32, std::net::SocketAddr)>,
        /// Answer other monitors' probes on ADDR:PORT. Optional.
        #[arg(long, value_name = "ADDR:PORT")]
        listen: Option<std::net::SocketAddr>,
        /// Probe period, e.g. 100ms. Optional; default 100ms.
        #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = super::args::interval_arg)]
        interval: std::time::Duration,
        /// No reply for this long: the path is down. Optional; default 1s.
        #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = super::args::interval_arg)]
        down_after: std::time::Duration,
        /// Stop after this long. Optional; default: run until interrupted.
        #[arg(long, value_name = "DURATION", value_parser = super::args::interval_arg)]
        duration: Option<std::time::Duration>,
    },
    /// Per path: mark, state, flows on it, frames and bytes it carried, and
    /// the monitor's RTT and loss when one runs; the frames left unsteered.
    #[command(
        after_help = "Examples:\n  causeway --netns d0gw paths show\n  causeway --netns d0gw paths show --iface br0 --flows --json\n  causeway --netns d0gw paths show --watch --interval 500ms",
        after_long_help = exit::PATHS_SHOW
    )]
    Show {
        /// Interface. Optional; default: every interface with steering.
        #[arg(long, value_name = "IF")]
        iface: Option<String>,
        /// Also list every flow and its path. Optional.
        #[arg(long)]
        flows: bool,
        /// Print one JSON document (with --watch: one object per line). Optional.
        #[arg(long)]
        json: bool,
        /// Print again every --interval until interrupted, with each path's
        /// rate and share of the steered bytes over the interval. Optional.
        #[arg(long)]
        watch: bool,
        /// Time between samples with --watch, e.g. "500ms" or "2s" (a bare
        /// number is seconds). Optional; default 1s.
        #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = super::args::interval_arg)]
        interval: std::time::Duration,
    },
}

/// A mark: decimal or 0x hex, non-zero.
fn mark_arg(s: &str) -> Result<u32, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    }
    .map_err(|_| format!("{s:?} is not a mark (decimal or 0x hex)"))?;
    if v == 0 {
        return Err("mark 0 is the unmarked default; give a non-zero mark".into());
    }
    Ok(v)
}

/// `ID=ADDR:PORT`.
fn probe_arg(s: &str) -> Result<(u32, std::net::SocketAddr), String> {
    let (id, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: a probe is ID=ADDR:PORT, e.g. 1=10.200.1.2:7360"))?;
    let id = id
        .trim()
        .parse()
        .map_err(|_| format!("{id:?} is not a path id (0-15)"))?;
    let addr = addr
        .trim()
        .parse()
        .map_err(|_| format!("{addr:?} is not ADDR:PORT (IPv6 as [addr]:port)"))?;
    Ok((id, addr))
}

/// `ID=MARK`.
fn path_mark_arg(s: &str) -> Result<(u32, u32), String> {
    let (id, mark) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: a path is ID=MARK, e.g. 1=0x1001"))?;
    let id = id
        .trim()
        .parse()
        .map_err(|_| format!("{id:?} is not a path id (0-15)"))?;
    Ok((id, mark_arg(mark.trim())?))
}

/// What `paths show --json` prints, per interface.
#[derive(serde::Serialize)]
struct IfacePaths {
    iface: String,
    paths: Vec<PathRow>,
    unsteered_packets: u64,
    unsteered_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    flows: Option<Vec<FlowRow>>,
    /// The monitor's estimates, when one has written them in the last 5 s.
    #[serde(skip_serializing_if = "Option::is_none")]
    monitor: Option<Vec<PathHealth>>,
    /// With --watch, from the second sample: what each path carried since
    /// the previous one.
    #[serde(skip_serializing_if = "Option::is_none")]
    carried: Option<Vec<Carried>>,
}

/// What one path carried over a --watch interval.
#[derive(serde::Serialize, Clone, Debug, PartialEq)]
struct Carried {
    path: u32,
    /// Steered bytes per second over the interval.
    bytes_per_s: f64,
    /// Its share of the bytes steered onto any path in the interval (the
    /// weight the paths actually had; 0 for all when nothing was steered).
    share: f64,
}

/// One --watch line of `paths show --json --watch`.
#[derive(serde::Serialize)]
struct WatchSample<'a> {
    /// Seconds since the first sample.
    at_s: f64,
    interfaces: &'a [IfacePaths],
}

#[derive(serde::Serialize)]
struct FlowRow {
    flow: String,
    path: u32,
}

fn open(ctx: &Context, iface: &str) -> Result<PathMaps> {
    let dirs = ctx.layout.steer(&ctx.scope, iface)?;
    if !paths::is_attached(&dirs) {
        bail!(
            "path steering is not attached to {iface} in the {}; attach it first (causeway paths attach --iface {iface} --path ID=MARK)",
            ctx.scope
        );
    }
    PathMaps::open_pinned(&dirs.maps_dir)
        .with_context(|| format!("cannot open the path maps of {iface}"))
}

fn flows_of(texts: &[String]) -> Result<Vec<FlowSpec>> {
    texts
        .iter()
        .map(|t| parse_flow(t).map_err(anyhow::Error::from))
        .collect()
}

pub fn run(ctx: &Context, cmd: PathsCommand) -> Result<()> {
    match cmd {
        PathsCommand::Attach { iface, paths: list } => {
            let a = paths::attach(&ctx.layout, &ctx.scope, &iface, &list)
                .with_context(|| format!("cannot attach path steering to {iface}"))?;
            println!(
                "{iface}: path steering attached ({} link {}, program {}); paths {}",
                a.mode,
                a.link_id,
                a.prog_id,
                list.iter()
                    .map(|(p, m)| format!("{p}={m:#x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        PathsCommand::Detach { iface } => {
            paths::detach(&ctx.layout, &ctx.scope, &iface)
                .with_context(|| format!("cannot detach path steering from {iface}"))?;
            println!("{iface}: path steering detached");
        }
        PathsCommand::Route { iface, path, flows } => {
            // Every flow is parsed before the first is written.
            let flows = flows_of(&flows)?;
            let mut maps = open(ctx, &iface)?;
            for f in &flows {
                maps.route(&f.key(), path)
                    .with_context(|| format!("cannot put {f} on path {path}"))?;
                println!("{iface}: {f} → path {path}");
            }
        }
        PathsCommand::Unroute { iface, flows } => {
            let flows = flows_of(&flows)?;
            let mut maps = open(ctx, &iface)?;
            for f in &flows {
                let was = maps.unroute(&f.key())?;
                let note = if was { "" } else { " (was on none)" };
                println!("{iface}: {f} → default route{note}");
            }
        }
        PathsCommand::Set {
            iface,
            path,
            mark,
            down,
        } => {
            let mut maps = open(ctx, &iface)?;
            let mark = match mark {
                Some(m) => m,
                None => match maps.path(path)?.mark {
                    0 => bail!("path {path} is new on {iface}: give its --mark"),
                    m => m,
                },
            };
            maps.set_path(path, mark, !down)?;
            let state = if down { "down" } else { "up" };
            println!("{iface}: path {path} mark {mark:#x} {state}");
        }
        PathsCommand::Show {
            iface,
            flows,
            json,
            watch,
            interval,
        } => {
            if !watch {
                let report = collect(ctx, iface.as_deref(), flows)?;
                print_report(&report, json, false)?;
            } else {
                show_watch(ctx, iface.as_deref(), flows, json, interval)?;
            }
        }
        PathsCommand::Monitor {
            iface,
            probes,
            listen,
            interval,
            down_after,
            duration,
        } => monitor(ctx, iface, probes, listen, interval, down_after, duration)?,
    }
    Ok(())
}

fn monitor(
    ctx: &Context,
    iface: Option<String>,
    probes: Vec<(u32, std::net::SocketAddr)>,
    listen: Option<std::net::SocketAddr>,
    interval: std::time::Duration,
    down_after: std::time::Duration,
    duration: Option<std::time::Duration>,
) -> Result<()> {
    let (maps, state_file) = match &iface {
        Some(i) => {
            let maps = open(ctx, i)?;
            for (p, _) in &probes {
                if maps.path(*p)?.mark == 0 {
                    bail!("path {p} is not configured on {i} (it has no mark)");
                }
            }
            let dirs = ctx.layout.steer(&ctx.scope, i)?;
            (Some(maps), Some(dirs.state_dir.join(paths::MONITOR_FILE)))
        }
        None => (None, None),
    };
    // Stopped by --duration, or by a signal's default action.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cfg = MonitorConfig {
        maps,
        state_file,
        probes,
        listen,
        interval,
        estimator: causeway_core::paths::EstimatorConfig {
            down_after_ns: down_after.as_nanos() as u64,
            ..Default::default()
        },
        duration,
    };
    monitor::run(cfg, stop, |e| {
        if let Ok(line) = serde_json::to_string(e) {
            println!("{line}");
        }
    })
    .context("the path monitor stopped")?;
    Ok(())
}

/// `paths show --watch`: samples every `interval` until interrupted (or
/// stdout closes: SIGPIPE's default action, exit 141, nothing on stderr).
fn show_watch(
    ctx: &Context,
    iface: Option<&str>,
    with_flows: bool,
    json: bool,
    interval: std::time::Duration,
) -> Result<()> {
    if interval < std::time::Duration::from_millis(50) {
        bail!("--interval must be at least 50ms, not {interval:?}");
    }
    let start = std::time::Instant::now();
    let mut previous: Option<(std::time::Instant, Vec<IfacePaths>)> = None;
    let redraw = !json && std::io::IsTerminal::is_terminal(&std::io::stdout());
    loop {
        let now = std::time::Instant::now();
        let mut report = collect(ctx, iface, with_flows)?;
        if let Some((then, prev)) = &previous {
            let dt = now.duration_since(*then).as_secs_f64();
            for r in &mut report {
                let before = prev.iter().find(|p| p.iface == r.iface);
                r.carried = Some(carried(&r.paths, before.map(|b| b.paths.as_slice()), dt));
            }
        }
        let at_s = now.duration_since(start).as_secs_f64();
        if json {
            let line = WatchSample {
                at_s,
                interfaces: &report,
            };
            println!("{}", serde_json::to_string(&line)?);
        } else {
            if redraw {
                // Home the cursor and clear the screen: the table redraws in place.
                print!("\x1b[H\x1b[2J");
            }
            println!("at {at_s:.1} s (every {interval:?}; Ctrl-C stops)");
            print_report(&report, false, true)?;
            println!();
        }
        std::io::Write::flush(&mut std::io::stdout())?;
        previous = Some((now, report));
        std::thread::sleep(interval);
    }
}

/// Each path's rate and share over `dt` s, from its byte counters now and
/// before (a path new since, or whose counter went back, counts from 0).
fn carried(now: &[PathRow], before: Option<&[PathRow]>, dt: f64) -> Vec<Carried> {
    let delta = |p: &PathRow| {
        let old = before
            .and_then(|b| b.iter().find(|q| q.path == p.path))
            .map_or(0, |q| q.bytes);
        p.bytes.checked_sub(old).unwrap_or(p.bytes)
    };
    let deltas: Vec<u64> = now.iter().map(delta).collect();
    let total: u64 = deltas.iter().sum();
    now.iter()
        .zip(&deltas)
        .map(|(p, &d)| Carried {
            path: p.path,
            bytes_per_s: if dt > 0.0 { d as f64 / dt } else { 0.0 },
            share: if total > 0 {
                d as f64 / total as f64
            } else {
                0.0
            },
        })
        .collect()
}

fn collect(ctx: &Context, iface: Option<&str>, with_flows: bool) -> Result<Vec<IfacePaths>> {
    let ifaces: Vec<String> = match iface {
        Some(i) => vec![i.to_string()],
        None => ctx
            .layout
            .steer_attachments(Some(&ctx.scope))?
            .into_iter()
            .map(|(_, i)| i)
            .collect(),
    };
    if ifaces.is_empty() {
        bail!(
            "no interface has path steering in the {}; attach it first (causeway paths attach)",
            ctx.scope
        );
    }
    let mut report = Vec::new();
    for iface in ifaces {
        let maps = open(ctx, &iface)?;
        let unsteered = maps.unsteered()?;
        let flows = if with_flows {
            let mut rows: Vec<FlowRow> = maps
                .flows()?
                .iter()
                .map(|(k, p)| FlowRow {
                    flow: FlowSpec::from_key(k).to_string(),
                    path: *p,
                })
                .collect();
            rows.sort_by(|a, b| (a.path, &a.flow).cmp(&(b.path, &b.flow)));
            Some(rows)
        } else {
            None
        };
        let monitor = paths::read_monitor(&ctx.layout.steer(&ctx.scope, &iface)?);
        report.push(IfacePaths {
            monitor,
            paths: maps.rows()?,
            unsteered_packets: unsteered.packets,
            unsteered_bytes: unsteered.bytes,
            flows,
            iface,
            carried: None,
        });
    }
    Ok(report)
}

/// Prints `report` as JSON or as a table (`rates`: with the RATE and SHARE
/// columns of --watch).
fn print_report(report: &[IfacePaths], json: bool, rates: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let mut rows = Vec::new();
    for r in report {
        for p in &r.paths {
            let h = r.monitor.iter().flatten().find(|h| h.path == p.path);
            let c = r.carried.iter().flatten().find(|c| c.path == p.path);
            let mut row = vec![
                r.iface.clone(),
                p.path.to_string(),
                format!("{:#x}", p.mark),
                if p.up { "up" } else { "down" }.to_string(),
                p.flows.to_string(),
                p.packets.to_string(),
                p.bytes.to_string(),
                table::opt(h.map(|h| format!("{:.1}", h.srtt_ms))),
                table::opt(h.map(|h| format!("{:.1}%", h.loss * 100.0))),
                table::opt(h.map(|h| h.state.clone())),
            ];
            if rates {
                row.push(table::opt(
                    c.map(|c| format!("{:.1}", c.bytes_per_s * 8.0 / 1e6)),
                ));
                row.push(table::opt(c.map(|c| format!("{:.0}%", c.share * 100.0))));
            }
            rows.push(row);
        }
        let mut row: Vec<String> = vec![
            r.iface.clone(),
            "-".into(),
            "-".into(),
            "unsteered".into(),
            "-".into(),
            r.unsteered_packets.to_string(),
            r.unsteered_bytes.to_string(),
            "-".into(),
            "-".into(),
            "-".into(),
        ];
        if rates {
            row.extend(["-".into(), "-".into()]);
        }
        rows.push(row);
    }
    let mut header = vec![
        "IFACE", "PATH", "MARK", "STATE", "FLOWS", "PACKETS", "BYTES", "SRTT_MS", "LOSS", "PROBED",
    ];
    if rates {
        header.extend(["MBIT_S", "SHARE"]);
    }
    print!("{}", table::render(&header, &rows));
    for r in report {
        for f in r.flows.iter().flatten() {
            println!("{}: path {}  {}", r.iface, f.path, f.flow);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_and_path_lists_parse_or_say_what_is_wrong() {
        assert_eq!(mark_arg("0x1001"), Ok(0x1001));
        assert_eq!(mark_arg("4097"), Ok(4097));
        assert!(mark_arg("0").unwrap_err().contains("non-zero"));
        assert!(mark_arg("0xzz").is_err());
        assert_eq!(path_mark_arg("1=0x1001"), Ok((1, 0x1001)));
        assert!(path_mark_arg("1").unwrap_err().contains("ID=MARK"));
        assert!(path_mark_arg("x=1").is_err());
    }

    fn row(path: u32, bytes: u64) -> PathRow {
        PathRow {
            path,
            mark: 0x1000 + path,
            up: true,
            flows: 1,
            packets: bytes / 1000,
            bytes,
        }
    }

    #[test]
    fn watch_rates_and_shares_come_from_counter_deltas() {
        let before = [row(0, 1_000), row(1, 5_000)];
        let now = [row(0, 3_001_000), row(1, 1_005_000), row(2, 0)];
        let c = carried(&now, Some(&before), 2.0);
        assert_eq!(c.len(), 3);
        assert_eq!((c[0].bytes_per_s, c[0].share), (1_500_000.0, 0.75));
        assert_eq!((c[1].bytes_per_s, c[1].share), (500_000.0, 0.25));
        assert_eq!((c[2].bytes_per_s, c[2].share), (0.0, 0.0));
        // Idle: no share for anyone; a counter that went back (re-attached) counts from 0.
        let idle = carried(&now, Some(&now), 1.0);
        assert!(idle.iter().all(|c| c.share == 0.0 && c.bytes_per_s == 0.0));
        let reset = carried(&[row(0, 10)], Some(&[row(0, 99)]), 1.0);
        assert_eq!(reset[0].bytes_per_s, 10.0);
        assert_eq!(reset[0].share, 1.0);
    }
}
