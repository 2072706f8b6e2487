//! `causeway-wanem`: a userspace layer-2 WAN link emulator between two interfaces.
//!
//! Example (inside a namespace holding veths `ea` and `eb`):
//! `causeway-wanem --netns cw-demo-w0 --iface-a ea --iface-b eb --delay 20ms --rate 200mbit --control /run/w0.sock`

#[path = "shared/link_args.rs"]
mod link_args;
#[path = "shared/wanem_cmd.rs"]
mod wanem_cmd;

use clap::Parser;

/// Userspace WAN link emulator (delay, jitter, rate, loss, queue) between two interfaces.
///
/// Both directions, one thread each. Example:
///
///   causeway-wanem --netns cw-demo-w0 --iface-a ea --iface-b eb --delay 20ms --rate 200mbit --control /run/w0.sock
///
/// Control socket: one JSON object per line, one reply per line, e.g.
///
///   {"op":"stats"}
///   {"op":"set","dir":"both","patch":{"rate_bps":50000000,"up":false}}
///
/// (dir: a_to_b, b_to_a or both; patch fields: delay_ns, jitter_ns, rate_bps, loss,
/// queue_bytes, reorder, up). SIGINT/SIGTERM stop it cleanly and print the final
/// counters as JSON on stdout.
#[derive(Parser)]
#[command(version, verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    args: wanem_cmd::WanemArgs,
}

fn main() -> std::process::ExitCode {
    causeway_core::cli_main::run(|| wanem_cmd::run(Cli::parse().args))
}
