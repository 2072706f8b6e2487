//! Benchmarks: each prints ratios measured side by side in one run and the
//! results go to docs/BENCHMARKS.md with the command that reproduces them.

use anyhow::Result;
use clap::{Args, ValueEnum};

use crate::{build, cmd, setup};

#[derive(Args)]
pub struct BenchArgs {
    /// Which benchmark to run.
    pub which: Which,
    /// Extra arguments passed to the benchmark.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Which {
    /// XDP classifier cost per frame vs an empty XDP program (BPF_PROG_TEST_RUN).
    Classifier,
    /// TC shaper cost per frame, shaping accuracy and priority isolation.
    Shaper,
    /// WAN emulator fidelity: rate, RTT and loss vs configured.
    Netsim,
    /// Clock sync error per timestamp source and profile.
    Clock,
    /// Allreduce on the two-domain testbed, Causeway vs PyTorch Gloo side by side.
    Allreduce,
    /// WAN codecs: GB/s per core, ratio on real gradients, 64 MiB allreduce per codec.
    Codecs,
    /// DDP training on the two-domain testbed, causeway vs gloo backend side by side.
    Torch,
    /// TLS: record layer GB/s per core; allreduce with TLS vs plaintext on `wan40`;
    /// `--vm [KERNEL]`: plaintext, rustls and kTLS in a qemu guest.
    Tls,
    /// RDMA transport vs TCP transport vs `ib_write_bw` on one Soft-RoCE link
    /// in a 7.x qemu guest.
    Rdma,
    /// 64 MiB allreduce on the `dual` testbed: Causeway striped over both
    /// paths vs one path vs over MPTCP vs Gloo.
    Multipath,
}

pub fn run(args: &BenchArgs) -> Result<()> {
    setup::run(setup::Mode::Install)?;
    match args.which {
        Which::Classifier => cargo_bench("causeway", "classifier", &args.args),
        Which::Shaper => cargo_bench("causeway-tests", "shaper", &args.args),
        Which::Clock => crate::bench_clock::run(&args.args),
        Which::Allreduce => crate::bench_allreduce::run(&args.args),
        Which::Codecs => crate::bench_codecs::run(&args.args),
        Which::Torch => crate::bench_torch::run(&args.args),
        Which::Tls => crate::bench_tls::run(&args.args),
        Which::Rdma => crate::bench_rdma_vm::run(&args.args),
        Which::Multipath => crate::bench_multipath::run(&args.args),
        Which::Netsim => {
            build::package_bin("causeway-netsim", "causeway-netsim", true)?;
            crate::progress::run_child(
                cmd::cargo_bin("causeway-netsim", true)
                    .arg("bench")
                    .args(&args.args),
                "bench netsim",
            )
        }
    }
}

fn cargo_bench(package: &str, bench: &str, extra: &[String]) -> Result<()> {
    crate::progress::run_child(
        cmd::cargo()
            .args(["bench", "--package", package, "--bench", bench, "--"])
            .args(extra),
        &format!("bench {bench}"),
    )
}
