//! `causeway log [--iface IF] [--follow] [--on | --off] [--json]`: the
//! eBPF programs' log records, and the per-interface switch.

use anyhow::{bail, Context as _, Result};
use clap::Args;

use causeway::{
    datapath::{self, state},
    kernel_log::{self, LogLine, Reader},
};

use super::Context;

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Interface. Optional; default: every attached interface.
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// Keep printing records as they arrive, until interrupted. Optional;
    /// default: print the records waiting in the buffer and exit.
    #[arg(long)]
    pub follow: bool,
    /// Switch the programs' logging on (it is off after attach), then read.
    #[arg(long, conflicts_with = "off")]
    pub on: bool,
    /// Switch the programs' logging off and exit.
    #[arg(long, conflicts_with_all = ["follow", "json"])]
    pub off: bool,
    /// One JSON object per record: {"iface", "level", "message"}. Optional.
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Context, args: &LogArgs) -> Result<()> {
    let targets = ctx.targets(args.iface.as_deref())?;
    let mut dirs = Vec::new();
    for iface in &targets {
        let paths = ctx.layout.iface(&ctx.scope, iface)?;
        if !paths.pin_dir.exists() {
            bail!("{iface} is not attached in the {}", ctx.scope);
        }
        dirs.push((iface, paths.maps_dir));
    }
    if args.on || args.off {
        let _lock = state::StateLock::acquire(&ctx.layout.lock_file())?;
        for (iface, dir) in &dirs {
            kernel_log::set_enabled(dir, args.on)
                .with_context(|| format!("cannot switch the log of {iface}"))?;
            if args.off {
                println!("{iface}: logging off");
            } else if !args.json {
                println!("{iface}: logging on");
            }
        }
        if args.off {
            return Ok(());
        }
    } else {
        for (iface, dir) in &dirs {
            if !kernel_log::enabled(dir)? {
                eprintln!("note: logging is off for {iface}; `causeway log --on` switches it on");
            }
        }
    }
    let statuses =
        datapath::status(&ctx.layout, Some(&ctx.scope)).context("cannot read the attachments")?;
    let json = args.json;
    let mut readers = Vec::new();
    for iface in &targets {
        let prog_id = statuses
            .iter()
            .find(|s| &s.iface == iface)
            .and_then(|s| s.prog_id)
            .with_context(|| format!("{iface} has no loaded XDP program"))?;
        let reader = Reader::open(prog_id, iface, move |line| print_line(&line, json))
            .with_context(|| format!("cannot read the log of {iface}"))?;
        readers.push(reader);
    }
    if !args.follow {
        for r in &mut readers {
            r.drain();
        }
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let mut tasks = tokio::task::JoinSet::new();
        for r in readers {
            tasks.spawn(r.follow());
        }
        while let Some(done) = tasks.join_next().await {
            done.context("a log reader stopped")??;
        }
        Ok(())
    })
}

fn print_line(line: &LogLine, json: bool) {
    if json {
        // A LogLine always serializes (strings only).
        if let Ok(text) = serde_json::to_string(line) {
            println!("{text}");
        }
    } else {
        println!("{} {} {}", line.iface, line.level, line.message);
    }
}
