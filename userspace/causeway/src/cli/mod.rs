//! The `causeway` command: parses the command line, enters the requested
//! network namespace, and runs one command.

mod agent_cmd;
mod args;
mod certs;
mod clock_cmd;
mod exit;
mod interfaces;
mod log_cmd;
mod paths_cmd;
mod policy_cmd;
mod policy_show;
mod shaper;
mod stats_cmd;
mod table;
mod top;
mod top_view;

use std::path::Path;

use anyhow::{bail, Context as _, Result};
use clap::Parser as _;

use causeway::datapath::{netns, Datapath, Layout, NetnsScope};

pub use args::Cli;
use args::Command;

/// What every command works on: the layout and the namespace scope.
pub struct Context {
    pub layout: Layout,
    pub scope: NetnsScope,
    /// `--netns` named a namespace that no longer exists: the command works
    /// on its pins only and must not touch interfaces (of this namespace).
    pub netns_gone: bool,
}

impl Context {
    /// The data-path service of this namespace.
    pub fn datapath(&self) -> Datapath {
        Datapath::new(self.layout.clone(), self.scope.clone())
    }

    /// The interfaces a command addresses: `iface`, or every attached one in
    /// the namespace.
    pub fn targets(&self, iface: Option<&str>) -> Result<Vec<String>> {
        if let Some(iface) = iface {
            return Ok(vec![iface.to_string()]);
        }
        let all: Vec<String> = self
            .layout
            .attachments(Some(&self.scope))?
            .into_iter()
            .map(|(_, iface)| iface)
            .collect();
        if all.is_empty() {
            bail!(
                "no interface is attached in the {}; attach one first (causeway attach --iface IF)",
                self.scope
            );
        }
        Ok(all)
    }
}

/// Runs the command line of this process.
pub fn main() -> Result<()> {
    run(Cli::parse())
}

/// Enters `--netns` (before anything else, while the process has one
/// thread) and runs the command.
pub fn run(cli: Cli) -> Result<()> {
    let mut netns_gone = false;
    if let Some(name) = &cli.netns {
        match netns::enter(name) {
            Ok(()) => {}
            // The pins of a deleted namespace can still be listed and
            // removed: nothing else about them needs the namespace.
            Err(e)
                if matches!(
                    cli.command,
                    Command::Detach(_)
                        | Command::Status(_)
                        | Command::Paths(paths_cmd::PathsCommand::Detach { .. })
                ) && !Path::new(netns::NETNS_RUN_DIR).join(name).exists() =>
            {
                eprintln!("warning: {e}; working on its pins only");
                netns_gone = true;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let ctx = Context {
        layout: Layout {
            pin_root: cli.pin_root,
            state_root: cli.state_dir,
        },
        scope: NetnsScope::current(cli.netns.as_deref())
            .context("cannot tell which network namespace this is")?,
        netns_gone,
    };
    match cli.command {
        Command::Attach(a) => interfaces::attach(&ctx, &a),
        Command::Detach(a) => interfaces::detach(&ctx, &a.iface),
        Command::Status(a) => interfaces::status(&ctx, a.json, cli.netns.is_some()),
        Command::Policy(p) => policy_cmd::run(&ctx, p),
        Command::Stats(s) => stats_cmd::run(&ctx, &s),
        Command::Agent(a) => agent_cmd::run(&ctx, &a),
        Command::Clock(c) => clock_cmd::run(&ctx, &c),
        Command::Log(l) => log_cmd::run(&ctx, &l),
        Command::Paths(p) => paths_cmd::run(&ctx, p),
        Command::Top(t) => top::run(&ctx, &t),
        Command::Certs(c) => certs::run(&c),
    }
}
