//! `cargo xtask bench rdma`: the collective library's RDMA transport against
//! its TCP transport and perftest's `ib_write_bw`, on the same Soft-RoCE link
//! inside a 7.x qemu guest (the host kernel has no `rdma_rxe`; before 7.x rxe
//! does not work inside a network namespace).
//!
//! The guest makes one namespace with a veth pair, an rxe device on each end
//! and the policy routing that keeps the traffic off `lo` (as the `rdma::`
//! tests), then per run (3, interleaved): `causeway-allreduce-bench` with 2
//! ranks (hosts h0/h1 of one domain, bound to the two ends) over
//! `CAUSEWAY_TRANSPORT=tcp` and `=rdma` (the latter on a plain `Vec` and on a
//! `CommBuf`; blocking calls on the caller's buffer; 1 warm-up + 5 iterations of 1 MiB
//! and 16 MiB f32), once as an allreduce and once as a point-to-point stream
//! (`--op broadcast` from rank 0: S bytes one way in 1 MiB messages, the
//! default `CAUSEWAY_CHUNK_BYTES`), and `ib_write_bw` (1 MiB messages, 200
//! iterations, one direction) between the two rxe devices, GID indices
//! looked up in sysfs.
//!
//! A 2-rank ring allreduce of S bytes sends S bytes each way per rank, and
//! the stream S bytes one way, so S / t is the rate per direction of both,
//! compared with `ib_write_bw`'s average.
//! Under TCG (no usable KVM here) every byte rxe moves is emulated CPU work
//! shared by both directions: the ratios within one run are what this
//! measures, not the absolute rates.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::bench_tls::{self, median, spread, Mode, RUNS};
use crate::cmd;
use crate::vm::KernelLine;

const NS: &str = "cwrdmab";
const ADDRS: [&str; 2] = ["10.77.0.1", "10.77.0.2"];
const GIDS: [&str; 2] = [
    "0000:0000:0000:0000:0000:ffff:0a4d:0001",
    "0000:0000:0000:0000:0000:ffff:0a4d:0002",
];
const DEVS: [&str; 2] = ["rxbench0", "rxbench1"];
const MASTER_PORT: u16 = 29571;
const SIZES: &str = "1M,16M";
const WRITE_BW_MSG: u64 = 1 << 20;
/// The worker's `--op`s: (argument, name in the tables).
const OPS: [(&str, &str); 2] = [("allreduce", "allreduce"), ("broadcast", "stream 0→1")];

// Blocking calls on the caller's memory (what a training loop calls):
// a plain `Vec` (over RDMA: copied into the registered pool) and a
// `CommBuf` (registered once, sent from as it is).
const TCP: Mode = Mode {
    name: "TCP transport",
    env: &[
        ("CAUSEWAY_TRANSPORT", "tcp"),
        ("CAUSEWAY_BENCH_BUFFER", "caller"),
    ],
};
const RDMA: Mode = Mode {
    name: "RDMA, plain Vec",
    env: &[
        ("CAUSEWAY_TRANSPORT", "rdma"),
        ("CAUSEWAY_BENCH_BUFFER", "caller"),
    ],
};
const RDMA_REGISTERED: Mode = Mode {
    name: "RDMA, CommBuf",
    env: &[
        ("CAUSEWAY_TRANSPORT", "rdma"),
        ("CAUSEWAY_BENCH_BUFFER", "registered"),
    ],
};

pub fn run(extra: &[String]) -> Result<()> {
    // rxe follows its netdev into a network namespace only from 7.x on
    // (before, it routes in the initial namespace; see the `rdma::` tests).
    let (mut line, mut mtu) = (KernelLine::V7, 1500u32);
    let mut args = extra.iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "7.x" | "7" => line = KernelLine::V7,
            "--mtu" => {
                mtu = args
                    .next()
                    .and_then(|m| m.parse().ok())
                    .filter(|m| (1280..=9000).contains(m))
                    .context("--mtu needs the veth MTU, 1280..9000 (1500 → RoCE MTU 1024, 9000 → 4096)")?;
            }
            other => bail!(
                "bench rdma {other}: usage: cargo xtask bench rdma [7.x] [--mtu 1500|9000] (only 7.x: rxe in a network namespace)"
            ),
        }
    }
    cmd::build_wan_bench_bins()?;
    let modes = [TCP, RDMA, RDMA_REGISTERED];
    let load_before = bench_tls::load();
    let (outcome, out) =
        crate::vm::run_script(line, "bench-rdma", Duration::from_secs(3600), |out| {
            guest_body(&modes, mtu, &out.display().to_string())
        })?;
    println!(
        "\n2 ranks on two rxe devices over one veth pair (MTU {mtu}) in a {} guest under {}, {RUNS} runs (modes and ops interleaved) of 1 warm-up + 5 iterations, allreduce and stream 0→1; ib_write_bw 1 MiB × 200; host load {load_before} before, {} after; guest {:.0?}",
        line.name(),
        outcome.accel,
        bench_tls::load(),
        outcome.wall
    );
    // ib_write_bw per run: one direction (the stream's reference) and both
    // at once (`-b`; perftest reports the sum, halved here to a rate per
    // direction: the allreduce's reference, which sends both ways at once).
    let mut write_bw: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for run in 0..RUNS {
        for (k, (name, share)) in [("write_bw", 1.0), ("write_bw_bidi", 0.5)]
            .iter()
            .enumerate()
        {
            let f = out.join(format!("{name}-run{run}.txt"));
            let text =
                std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
            write_bw[k].push(
                share
                    * parse_write_bw(&text).with_context(|| {
                        format!("no 1 MiB result line in {}:\n{text}", f.display())
                    })?,
            );
        }
    }
    for (k, what) in [
        "one direction",
        "both directions at once (-b), per direction",
    ]
    .iter()
    .enumerate()
    {
        let (w, lo, hi) = spread(&write_bw[k]);
        println!(
            "\nib_write_bw, 1 MiB messages, {what}: {:.1} MB/s [{:.1}–{:.1}]",
            w / 1e6,
            lo / 1e6,
            hi / 1e6
        );
    }
    println!("\n| op | size | transport | median s | [min–max] over runs | MB/s per direction | × TCP | × ib_write_bw [per-run min–max] |");
    println!("|---|---:|---|---:|---|---:|---:|---:|");
    for (o, (_, op_name)) in OPS.iter().enumerate() {
        // The allreduce against ib_write_bw both ways, the stream one way.
        let write_bw = &write_bw[usize::from(o == 0)];
        let wbw = median(write_bw);
        // times[mode][run] = per size (bytes, median s)
        let mut times: Vec<Vec<Vec<(u64, f64)>>> = vec![Vec::new(); modes.len()];
        for run in 0..RUNS {
            for (m, mode) in modes.iter().enumerate() {
                let ranks = (0..2)
                    .map(|rank| {
                        let f = out.join(file_name(run, m, o, rank));
                        std::fs::read_to_string(&f)
                            .map(|t| bench_tls::iters_lines(&t))
                            .with_context(|| format!("reading {}", f.display()))
                    })
                    .collect::<Result<Vec<_>>>()?;
                times[m].push(bench_tls::op_times(mode.name, &ranks)?);
            }
        }
        let sizes: Vec<u64> = times[0][0].iter().map(|(b, _)| *b).collect();
        for bytes in sizes {
            let per_run = |m: usize| bench_tls::per_run(&times, m, bytes);
            let tcp = median(&per_run(0));
            for (m, mode) in modes.iter().enumerate() {
                let runs = per_run(m);
                let (t, lo, hi) = spread(&runs);
                let rate = bytes as f64 / t;
                // Each run's rate against the same run's ib_write_bw.
                let ratios: Vec<f64> = runs
                    .iter()
                    .zip(write_bw)
                    .map(|(t, w)| bytes as f64 / t / w)
                    .collect();
                let (_, rlo, rhi) = spread(&ratios);
                println!(
                    "| {op_name} | {} | {} | {t:.4} | [{lo:.4}–{hi:.4}] | {:.1} | {:.2} | {:.2} [{rlo:.2}–{rhi:.2}] |",
                    crate::bench_allreduce::human(bytes),
                    mode.name,
                    rate / 1e6,
                    tcp / t,
                    rate / wbw
                );
            }
        }
    }
    Ok(())
}

/// Bytes per second of the 1 MiB line of `ib_write_bw --report_gbits`
/// (`#bytes #iterations BW-peak BW-average MsgRate`, Gbit/s = 1.25e8 B/s).
fn parse_write_bw(text: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first()? == &WRITE_BW_MSG.to_string())
            .then(|| f.get(3)?.parse::<f64>().ok())
            .flatten()
            .map(|gbit| gbit * 1.25e8)
    })
}

fn file_name(run: usize, mode: usize, op: usize, rank: usize) -> String {
    format!("run{run}-mode{mode}-op{op}-rank{rank}.jsonl")
}

/// The guest's part: namespace, veth, rxe, routing; then every run.
fn guest_body(modes: &[Mode], mtu: u32, out: &str) -> String {
    let bin = cmd::bin_path("causeway-allreduce-bench", true);
    let mut s = String::from("set -u\ndmesg -n 1 2>/dev/null\n");
    let _ = writeln!(
        s,
        "ip netns add {NS} && ip -n {NS} link set lo up || exit 10\n\
         ip -n {NS} link add rb0 type veth peer name rb1 || exit 11"
    );
    for (i, addr) in ADDRS.iter().enumerate() {
        let _ = writeln!(
            s,
            "ip -n {NS} addr add {addr}/24 dev rb{i} && ip -n {NS} link set rb{i} mtu {mtu} up || exit 12"
        );
    }
    for key in ["all", "default", "rb0", "rb1"] {
        let _ = writeln!(
            s,
            "ip netns exec {NS} sysctl -qw net.ipv4.conf.{key}.rp_filter=0 net.ipv4.conf.{key}.accept_local=1"
        );
    }
    for (to, via, src, table) in [(1, 0, 0, 100), (0, 1, 1, 101)] {
        let _ = writeln!(
            s,
            "ip -n {NS} rule add pref 10 iif lo to {} lookup {table} && ip -n {NS} route add {} dev rb{via} src {} table {table} || exit 13",
            ADDRS[to], ADDRS[to], ADDRS[src]
        );
    }
    for (i, dev) in DEVS.iter().enumerate() {
        let _ = writeln!(
            s,
            "ip netns exec {NS} rdma link add {dev} type rxe netdev rb{i} || exit 14"
        );
    }
    // The RoCE v2 GID index of each address, looked up (it fills in shortly).
    s.push_str(
        "gidx() {\n  for f in /sys/class/infiniband/$1/ports/1/gids/*; do\n    i=${f##*/}\n    if [ \"$(cat $f 2>/dev/null)\" = \"$2\" ] && [ \"$(cat /sys/class/infiniband/$1/ports/1/gid_attrs/types/$i 2>/dev/null)\" = \"RoCE v2\" ]; then echo $i; return 0; fi\n  done\n  return 1\n}\n",
    );
    for i in 0..2 {
        let _ = writeln!(
            s,
            "n=0; until g{i}=$(gidx {} {}); do n=$((n+1)); [ $n -gt 50 ] && exit 15; sleep 0.2; done",
            DEVS[i], GIDS[i]
        );
    }
    s.push_str("echo \"bench-rdma: GID indices $g0 $g1\"\n");
    for run in 0..RUNS {
        for (o, (m, mode)) in
            (0..OPS.len()).flat_map(|o| modes.iter().enumerate().map(move |m| (o, m)))
        {
            let _ = writeln!(
                s,
                "echo 'bench-rdma: run {} of {RUNS}: {} {}'",
                run + 1,
                mode.name,
                OPS[o].1
            );
            for (rank, addr) in ADDRS.iter().enumerate() {
                let mut env = crate::bench_tls_vm::pair_env(rank, ADDRS[0], MASTER_PORT);
                env.extend([
                    ("CAUSEWAY_ADDR".to_string(), addr.to_string()),
                    ("CAUSEWAY_HOST_ID".into(), format!("h{rank}")),
                    ("CAUSEWAY_DOMAIN".into(), "d0".into()),
                ]);
                env.extend(mode.env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
                let _ = write!(s, "ip netns exec {NS} env");
                for (k, v) in env {
                    let _ = write!(s, " {k}='{v}'");
                }
                let f = file_name(run, m, o, rank);
                let _ = writeln!(
                    s,
                    " '{}' --sizes {SIZES} --iters 5 --warmup 1 --op {} > '{out}/{f}' 2> '{out}/{f}.err' &\npid{rank}=$!",
                    bin.display(),
                    OPS[o].0,
                );
            }
            let _ = writeln!(
                s,
                "wait $pid0 || {{ cat '{out}/{}.err'; exit 20; }}\nwait $pid1 || {{ cat '{out}/{}.err'; exit 21; }}",
                file_name(run, m, o, 0),
                file_name(run, m, o, 1),
            );
        }
        for (flag, name) in [("", "write_bw"), (" -b", "write_bw_bidi")] {
            let _ = writeln!(
                s,
                "echo 'bench-rdma: run {} of {RUNS}: ib_write_bw{flag}'\n\
                 ip netns exec {NS} ib_write_bw -d {} -x $g0 -s {WRITE_BW_MSG} -n 200 -F --report_gbits{flag} > '{out}/{name}-server{run}.txt' 2>&1 &\n\
                 spid=$!; sleep 2\n\
                 ip netns exec {NS} ib_write_bw -d {} -x $g1 -s {WRITE_BW_MSG} -n 200 -F --report_gbits{flag} {} > '{out}/{name}-run{run}.txt' 2>&1 || {{ cat '{out}/{name}-run{run}.txt'; exit 22; }}\n\
                 wait $spid",
                run + 1,
                DEVS[0],
                DEVS[1],
                ADDRS[0]
            );
        }
    }
    for d in DEVS {
        let _ = writeln!(s, "rdma link delete {d}");
    }
    let _ = writeln!(s, "ip netns del {NS}\nexit 0");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_of_the_1_mib_line_is_read_in_bytes_per_second() {
        let out = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 1048576    200              1.23               0.80                 0.000095\n";
        assert_eq!(parse_write_bw(out), Some(0.80 * 1.25e8));
        assert_eq!(parse_write_bw("nothing"), None);
    }
}
