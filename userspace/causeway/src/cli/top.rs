//! `causeway top`: a live terminal view of the attached interfaces' classes
//! and shaping (read from the pinned maps), the agent's clock peers (from
//! its control socket) and the WAN paths of path steering, redrawn in place every --interval until `q`, Esc or
//! Ctrl-C.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use clap::Args;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use causeway::agent::{
    self,
    control::{self, Request},
    observe::{self, Observation},
};

use super::{top_view, Context};

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Interface. Optional; default: every attached interface in the namespace.
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// Time between readings, e.g. "500ms" or "2s" (a bare number is
    /// seconds). Optional; default 1s.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = super::args::interval_arg)]
    pub interval: Duration,
    /// The agent's control socket. Optional; default:
    /// <state dir>/<namespace scope>/agent.sock.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

/// One reading: the maps, and the agent's report when it answers.
fn read(
    ctx: &Context,
    ifaces: &[String],
    socket: &std::path::Path,
) -> (Observation, Option<String>) {
    let (report, note) = match control::request(socket, &Request::ClockStatus) {
        Ok(r) => (r.clock, None),
        Err(e) => (None, Some(format!("no agent: {e}"))),
    };
    let o = observe::observe(&ctx.layout, &ctx.scope, ifaces, report.as_ref());
    (o, note)
}

pub fn run(ctx: &Context, args: &TopArgs) -> Result<()> {
    // A gateway with path steering and no classifier has paths to show.
    let steering = !ctx.layout.steer_attachments(Some(&ctx.scope))?.is_empty();
    let ifaces = match ctx.targets(args.iface.as_deref()) {
        Err(_) if steering && args.iface.is_none() => Vec::new(),
        other => other?,
    };
    let socket = args
        .socket
        .clone()
        .unwrap_or_else(|| agent::default_socket(&ctx.layout, &ctx.scope));
    let mut terminal = ratatui::try_init().context("cannot set up the terminal")?;
    let outcome = (|| -> Result<()> {
        let mut before: Option<(Observation, Instant)> = None;
        loop {
            let (now, note) = read(ctx, &ifaces, &socket);
            let taken = Instant::now();
            let view = top_view::View {
                title: format!(
                    "causeway top — {} — every {:?} — q to quit",
                    ctx.scope, args.interval
                ),
                now: &now,
                before: before
                    .as_ref()
                    .map(|(o, t)| (o, taken.duration_since(*t).as_secs_f64())),
                agent_note: note,
            };
            terminal.draw(|f| top_view::draw(f, &view))?;
            before = Some((now, taken));
            let deadline = taken + args.interval;
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                if !event::poll(left)? {
                    break;
                }
                if let Event::Key(k) = event::read()? {
                    let ctrl_c =
                        k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if k.kind == KeyEventKind::Press
                        && (matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c)
                    {
                        return Ok(());
                    }
                }
            }
        }
    })();
    ratatui::restore();
    outcome
}
