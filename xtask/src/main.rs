//! `cargo xtask <command>`: the one entry point for building, installing
//! prerequisites, testing, benchmarking and running the demo.
#![deny(unsafe_code)]

mod bench;
mod bench_allreduce;
mod bench_allreduce_ebpf;
mod bench_clock;
mod bench_codecs;
mod bench_multipath;
mod bench_rdma_vm;
mod bench_tls;
mod bench_tls_vm;
mod bench_torch;
mod build;
mod cmd;
mod demo;
mod deny_service_starts;
mod gloo;
mod link_ceiling;
mod load;
mod plot;
mod progress;
mod python;
mod setup;
mod test;
mod testbed;
mod trace;
mod trace_codec;
mod trace_merge;
mod vm;

use causeway_core::cli_main;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Causeway's build, test, bench and demo driver"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install or check every prerequisite (apt packages, nightly + rust-src, bpf-linker).
    Setup {
        /// Only check; install nothing and fail if something is missing.
        #[arg(long)]
        check: bool,
    },
    /// Build the eBPF programs and every userspace crate.
    Build {
        #[arg(long)]
        release: bool,
    },
    /// Run the whole test suite (needs root for the kernel and namespace tests).
    Test(test::TestArgs),
    /// fmt --check and clippy -D warnings over the workspace.
    Lint,
    /// Run the main job: a two-domain testbed, eBPF attached, a gradient sync.
    Demo(demo::DemoArgs),
    /// Benchmarks (not tests): classifier, shaper, netsim, allreduce, clock.
    Bench(bench::BenchArgs),
    /// Build (if needed) and attach Causeway to an interface, optionally applying a policy.
    #[command(
        after_help = "Example:\n  cargo xtask load --iface wan0 --netns dc1 --policy policy.toml"
    )]
    Load(load::LoadArgs),
    /// Detach Causeway from an interface (everything `load` made goes).
    #[command(after_help = "Example:\n  cargo xtask unload --iface wan0 --netns dc1")]
    Unload(load::UnloadArgs),
    /// Run the test binaries inside qemu guests booting Debian's 6.1, 6.12 and 7.x kernels.
    VmTest(vm::VmTestArgs),
    /// Merge the ranks' CAUSEWAY_TRACE files onto one time base.
    Trace(trace::TraceArgs),
    /// Bring the namespace testbed up or down: `cargo xtask netsim up|down|status ...`.
    Netsim {
        /// Arguments passed to `causeway-netsim`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> std::process::ExitCode {
    // Errors are printed once with their causes (`error: a: b: c`), without
    // anyhow's backtrace (which RUST_BACKTRACE=1 would otherwise add to every
    // failed child command).
    cli_main::run(|| {
        let cli = Cli::parse();
        if matches!(cli.command, Command::Demo(_) | Command::Bench(_)) {
            // The demo and the benches print while a testbed is up; a closed
            // stdout must unwind through the testbed's guard (which tears the
            // namespaces and programs down), not end the process on SIGPIPE.
            cli_main::ignore_sigpipe();
        }
        run(cli)
    })
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Setup { check } => setup::run(if check {
            setup::Mode::Check
        } else {
            setup::Mode::Install
        }),
        Command::Build { release } => {
            setup::run(setup::Mode::Install)?;
            build::workspace(release)
        }
        Command::Test(args) => test::run(&args),
        Command::Lint => test::lint(),
        Command::Trace(args) => trace::run(&args),
        Command::Demo(args) => demo::run(&args.resolve()?),
        Command::Bench(args) => bench::run(&args),
        Command::Load(args) => load::load(&args),
        Command::Unload(args) => load::unload(&args),
        Command::VmTest(args) => {
            setup::run(setup::Mode::Install)?;
            vm::run(&args)
        }
        Command::Netsim { args } => {
            setup::run(setup::Mode::Install)?;
            build::package_bin("causeway-netsim", "causeway-netsim", true)?;
            cmd::run(cmd::cargo_bin("causeway-netsim", true).args(&args))
        }
    }
}
