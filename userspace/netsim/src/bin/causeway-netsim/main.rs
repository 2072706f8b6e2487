//! `causeway-netsim`: bring a multi-domain namespace testbed with emulated WAN
//! paths up or down, inspect and change it, and benchmark the emulator's fidelity.
//!
//! ```text
//! causeway-netsim up --profile dual            # 2 domains × 2 hosts, two WAN paths
//! causeway-netsim status
//! causeway-netsim set --path 1 --cut           # cut path 1 while traffic flows
//! causeway-netsim down                         # idempotent
//! causeway-netsim bench                        # fidelity table (rate, RTT, loss, max rate)
//! ```

#[path = "../shared/link_args.rs"]
mod link_args;
#[path = "../shared/wanem_cmd.rs"]
mod wanem_cmd;

mod bench;
mod inspect;
mod state;
mod up_down;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    version,
    about = "Causeway's namespace testbed: domains, hosts and emulated WAN paths"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create the namespaces, links, routes and one emulator process per WAN path.
    ///
    /// Example: `causeway-netsim up --tag demo --domains 2 --hosts 2 --profile dual`
    /// or with explicit paths: `--path delay=20ms,rate=200mbit --path delay=30ms,rate=100mbit,loss=0.001`.
    ///
    /// Host i of domain d is `cw-<tag>-d<d>h<i>` with 10.d.0.(10+i); its gateway is
    /// 10.d.0.1. Choosing a WAN path: send to the peer's path address
    /// 10.<peer>.(1+p).(10+i) (plain 10.<peer>.0.x takes the default path), or, in a
    /// gateway namespace, mark packets with fwmark 0x1000+p (SO_MARK, TC/eBPF), or
    /// send from a host with IP_TOS 0x04, 0x0c, 0x10, 0x14, 0x18, 0x1c (paths 0-5;
    /// 0x08 is skipped: the AF DSCPs look like it to a routing rule).
    /// Run things inside with `ip netns exec cw-<tag>-d0h0 ...`.
    Up(up_down::UpArgs),
    /// Stop the emulators and delete every namespace of a testbed (idempotent).
    ///
    /// Example: `causeway-netsim down --tag demo`, or `--all` for every testbed and
    /// every leftover `cw-*` namespace (including those of killed tests).
    Down(up_down::DownArgs),
    /// Show namespaces, addresses, paths and emulator counters.
    Status(inspect::StatusArgs),
    /// Change a path of a running testbed (rate, delay, loss, cut/restore).
    ///
    /// Example: `causeway-netsim set --path 0 --rate 50mbit`, `causeway-netsim set --path 1 --cut`.
    Set(inspect::SetArgs),
    /// Measure the emulator's fidelity: rate, RTT, loss, highest sustained rate.
    Bench(bench::BenchArgs),
    /// Run an emulator process (what `up` starts; same as `causeway-wanem`).
    #[command(hide = true)]
    Wanem(wanem_cmd::WanemArgs),
}

fn main() -> std::process::ExitCode {
    causeway_core::cli_main::run(run)
}

fn run() -> Result<()> {
    match Cli::parse().command {
        Cmd::Up(a) => up_down::up(a),
        Cmd::Down(a) => up_down::down(a),
        Cmd::Status(a) => inspect::status(a),
        Cmd::Set(a) => inspect::set(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Wanem(a) => wanem_cmd::run(a),
    }
}
