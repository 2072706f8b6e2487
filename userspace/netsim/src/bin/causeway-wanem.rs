//! `causeway-wanem`: a userspace layer-2 WAN link emulator between two interfaces.
//!
//! Example (inside a namespace holding veths `ea` and `eb`):
//! `causeway-wanem --netns cw-demo-w0 --iface-a ea --iface-b eb --delay-ms 20 --rate-mbit 200 --control /run/w0.sock`

#[path = "shared/link_args.rs"]
mod link_args;
#[path = "shared/wanem_cmd.rs"]
mod wanem_cmd;

use clap::Parser;

#[derive(Parser)]
#[command(
    version,
    about = "Userspace WAN link emulator (delay, jitter, rate, loss, queue) between two interfaces"
)]
struct Cli {
    #[command(flatten)]
    args: wanem_cmd::WanemArgs,
}

fn main() -> anyhow::Result<()> {
    wanem_cmd::run(Cli::parse().args)
}
