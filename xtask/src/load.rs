//! `cargo xtask load` / `unload`: build the `causeway` binary (with its
//! embedded eBPF object) if needed and attach it in one step, the way aya's
//! template does `cargo xtask run`; then show what is attached.
//!
//! ```text
//! cargo xtask load --iface wan0 [--netns dc1] [--policy policy.toml] [--mode auto|skb|driver]
//!   = cargo build -p causeway --bin causeway
//!   + causeway [--netns dc1] attach --iface wan0 [--mode M]
//!   + causeway [--netns dc1] policy apply --iface wan0 policy.toml
//!   + causeway [--netns dc1] status
//! cargo xtask unload --iface wan0 [--netns dc1]
//!   = causeway [--netns dc1] detach --iface wan0
//! ```

use std::{path::PathBuf, process::Command};

use anyhow::{Context, Result};
use clap::Args;

use crate::{build, cmd};

#[derive(Args)]
pub struct LoadArgs {
    /// Interface to attach to (XDP ingress; TC egress once a policy shapes).
    #[arg(long)]
    pub iface: String,
    /// Network namespace of the interface (a name under /run/netns).
    #[arg(long)]
    pub netns: Option<String>,
    /// Policy file to apply after attaching.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// XDP mode: auto (native if the driver has it), skb (generic) or driver.
    #[arg(long, default_value = "auto")]
    pub mode: String,
    /// Build and run the release binary.
    #[arg(long)]
    pub release: bool,
}

#[derive(Args)]
pub struct UnloadArgs {
    /// Interface to detach from.
    #[arg(long)]
    pub iface: String,
    /// Network namespace of the interface.
    #[arg(long)]
    pub netns: Option<String>,
    #[arg(long)]
    pub release: bool,
}

/// `causeway [--netns NS] ARGS...`.
fn causeway(netns: Option<&str>, release: bool) -> Command {
    let mut c = cmd::cargo_bin("causeway", release);
    if let Some(ns) = netns {
        c.args(["--netns", ns]);
    }
    c
}

pub fn load(args: &LoadArgs) -> Result<()> {
    build::package_bin("causeway", "causeway", args.release)?;
    let ns = args.netns.as_deref();
    cmd::run(causeway(ns, args.release).args([
        "attach",
        "--iface",
        &args.iface,
        "--mode",
        &args.mode,
    ]))
    .with_context(|| format!("attaching to {}", args.iface))?;
    if let Some(policy) = &args.policy {
        let policy = std::fs::canonicalize(policy)
            .with_context(|| format!("policy file {}", policy.display()))?;
        let applied = cmd::run(
            causeway(ns, args.release)
                .args(["policy", "apply", "--iface", &args.iface])
                .arg(&policy),
        );
        if let Err(e) = applied {
            // One step: a policy that does not apply leaves nothing attached.
            let _ = cmd::run(causeway(ns, args.release).args(["detach", "--iface", &args.iface]));
            return Err(e.context(format!("applying {} (detached again)", policy.display())));
        }
    }
    cmd::run(causeway(ns, args.release).arg("status"))
}

pub fn unload(args: &UnloadArgs) -> Result<()> {
    build::package_bin("causeway", "causeway", args.release)?;
    cmd::run(causeway(args.netns.as_deref(), args.release).args(["detach", "--iface", &args.iface]))
        .with_context(|| format!("detaching from {}", args.iface))
}
