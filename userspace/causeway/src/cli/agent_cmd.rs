//! `causeway agent --config FILE`.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;

use causeway::agent::{self, AgentConfig};

use super::Context;

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Agent configuration (TOML): host id, interfaces to own, clock peers
    /// (required). See `causeway::agent::config` for every key.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
}

pub fn run(ctx: &Context, args: &AgentArgs) -> Result<()> {
    // A daemon: a client that hangs up must cost it one connection, never
    // the process (SIGPIPE on a socket write).
    causeway_core::cli_main::ignore_sigpipe();
    let cfg = AgentConfig::load(&args.config)?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    // One thread: the probe loop's userspace stamps are taken on it, and
    // the namespace entered by --netns is this thread's.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(agent::run(cfg, ctx.layout.clone(), ctx.scope.clone()))
        .with_context(|| format!("agent in the {}", ctx.scope))
}
