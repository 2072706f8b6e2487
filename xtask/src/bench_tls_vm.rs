//! `cargo xtask bench tls --vm [6.1|6.12|7.x]`: plaintext, rustls and kTLS
//! side by side inside a qemu guest (default 6.12), since this host's kernel
//! has no `tls` module.
//!
//! The guest boots Debian's kernel with `tls` and the AES-GCM modules
//! preloaded (the VM stage's initramfs), makes two network namespaces (one
//! rank each, domains `d0` and `d1`) joined by a veth pair, and runs the
//! host-built `causeway-allreduce-bench` (1 warm-up + 5 iterations) in the
//! three modes interleaved, 3 runs each, on two links: `lan` (the bare veth,
//! 4 KiB and 16 MiB: what the record layer costs in CPU) and `wan` (netem on
//! both ends, 20 ms each way at 10 Mbit/s, a 1000-packet queue, 4 KiB and
//! 4 MiB: what it costs a WAN transfer whose rate the emulated CPU can
//! encrypt; at 50 Mbit/s TCG's AES-GCM is the bottleneck).
//! `CAUSEWAY_KTLS=on` makes a link that the kernel cannot take an error, so
//! the kTLS row is the kernel's record layer or the run fails; the ranks'
//! namespace's `/proc/net/tls_stat` is printed after the runs.
//!
//! Under TCG (this host has no usable KVM, see `vm::qemu`) the guest's CPU
//! is emulated: absolute times are TCG's, the ratios between the modes in
//! one run are what this measures.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::bench_tls::{self, Mode, Pki, KERNEL, PLAIN, RUNS, USERSPACE};
use crate::cmd;
use crate::vm::KernelLine;

const MASTER_PORT: u16 = 29561;
const NETNS: [&str; 2] = ["cwtls0", "cwtls1"];
const ADDRS: [&str; 2] = ["10.231.0.1", "10.231.0.2"];

/// A link between the two namespaces: its name and the netem arguments
/// (none: the bare veth).
struct Link {
    name: &'static str,
    netem: Option<&'static str>,
    about: &'static str,
    sizes: &'static str,
}

const LINKS: &[Link] = &[
    Link {
        name: "lan",
        netem: None,
        about: "bare veth (record-layer CPU cost)",
        sizes: "4K,16M",
    },
    Link {
        name: "wan",
        netem: Some("delay 20ms rate 10mbit limit 1000"),
        about: "netem 20 ms each way, 10 Mbit/s (below what TCG encrypts)",
        sizes: "4K,4M",
    },
];

pub fn run(kernel: Option<&str>) -> Result<()> {
    let line = match kernel.unwrap_or("6.12") {
        "6.1" => KernelLine::V6_1,
        "6.12" => KernelLine::V6_12,
        "7.x" | "7" => KernelLine::V7,
        other => bail!("--vm {other}: expected 6.1, 6.12 or 7.x"),
    };
    cmd::build_wan_bench_bins()?;
    let dir = cmd::root().join("target/tls-bench/vm");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let pki = Pki::make(&dir, &[(0, 0), (1, 1)])?;
    let modes = [PLAIN, USERSPACE, KERNEL];
    let load_before = bench_tls::load();
    let (outcome, out) =
        crate::vm::run_script(line, "bench-tls", Duration::from_secs(3600), |out| {
            guest_body(&pki, &modes, &out.display().to_string())
        })?;
    println!(
        "\nallreduce f32, 2 ranks (domains d0, d1) in a {} guest under {}, {RUNS} runs of 1 warm-up + 5 iterations, modes interleaved; host load {load_before} before, {} after; guest {:.0?}",
        line.name(),
        outcome.accel,
        bench_tls::load(),
        outcome.wall
    );
    for link in LINKS {
        // times[mode][run] = per size (bytes, median s)
        let mut times: Vec<Vec<Vec<(u64, f64)>>> = vec![Vec::new(); modes.len()];
        for run in 0..RUNS {
            for (m, mode) in modes.iter().enumerate() {
                let ranks = (0..2)
                    .map(|rank| {
                        let f = out.join(file_name(link.name, run, m, rank));
                        std::fs::read_to_string(&f)
                            .map(|t| bench_tls::iters_lines(&t))
                            .with_context(|| format!("reading {}", f.display()))
                    })
                    .collect::<Result<Vec<_>>>()?;
                times[m].push(bench_tls::op_times(mode.name, &ranks)?);
            }
        }
        println!("\n{} link: {}", link.name, link.about);
        bench_tls::print_table(&modes, &times);
    }
    let stat = std::fs::read_to_string(out.join("tls_stat.txt")).unwrap_or_default();
    println!("\n/proc/net/tls_stat of rank 0's namespace after the runs:\n{stat}");
    Ok(())
}

fn file_name(link: &str, run: usize, mode: usize, rank: usize) -> String {
    format!("{link}-run{run}-mode{mode}-rank{rank}.jsonl")
}

/// The guest's part: the namespaces, then per link every run and mode.
fn guest_body(pki: &Pki, modes: &[Mode], out: &str) -> String {
    let bin = cmd::bin_path("causeway-allreduce-bench", true);
    // The kernel logs a line per kTLS socket (no offload device): keep the
    // (slow, emulated) console quiet.
    let mut s = String::from("set -u\nmodprobe -q tls 2>/dev/null\ndmesg -n 1 2>/dev/null\n");
    for ns in NETNS {
        let _ = writeln!(
            s,
            "ip netns add {ns} && ip -n {ns} link set lo up || exit 10"
        );
    }
    let _ = writeln!(
        s,
        "ip link add tl0 netns {} type veth peer name tl1 netns {} || exit 11",
        NETNS[0], NETNS[1]
    );
    for (i, ns) in NETNS.iter().enumerate() {
        let _ = writeln!(
            s,
            "ip -n {ns} addr add {}/24 dev tl{i} && ip -n {ns} link set tl{i} up || exit 12",
            ADDRS[i]
        );
    }
    for link in LINKS {
        for (i, ns) in NETNS.iter().enumerate() {
            match link.netem {
                Some(netem) => {
                    let _ = writeln!(
                        s,
                        "tc -n {ns} qdisc replace dev tl{i} root netem {netem} || exit 13"
                    );
                }
                None => {
                    let _ = writeln!(s, "tc -n {ns} qdisc del dev tl{i} root 2>/dev/null");
                }
            }
        }
        for run in 0..RUNS {
            for (m, mode) in modes.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "echo 'bench-tls: {} run {} of {RUNS}: {}'",
                    link.name,
                    run + 1,
                    mode.name
                );
                for (rank, ns) in NETNS.iter().enumerate() {
                    let mut env = pair_env(rank, ADDRS[0], MASTER_PORT);
                    env.extend(pki.env(rank));
                    env.extend(mode.env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
                    let _ = write!(s, "ip netns exec {ns} env");
                    for (k, v) in env {
                        let _ = write!(s, " {k}='{v}'");
                    }
                    let _ = writeln!(
                        s,
                        " '{}' --sizes {} --iters 5 --warmup 1 > '{out}/{}' 2> '{out}/{}.err' &",
                        bin.display(),
                        link.sizes,
                        file_name(link.name, run, m, rank),
                        file_name(link.name, run, m, rank),
                    );
                    let _ = writeln!(s, "pid{rank}=$!");
                }
                let _ = writeln!(
                    s,
                    "wait $pid0 || {{ cat '{out}/{}.err'; exit 20; }}\nwait $pid1 || {{ cat '{out}/{}.err'; exit 21; }}",
                    file_name(link.name, run, m, 0),
                    file_name(link.name, run, m, 1),
                );
            }
        }
    }
    // Per network namespace: the ranks' own.
    let _ = writeln!(
        s,
        "ip netns exec {} cat /proc/net/tls_stat > '{out}/tls_stat.txt'",
        NETNS[0]
    );
    for ns in NETNS {
        let _ = writeln!(s, "ip netns del {ns}");
    }
    s.push_str("exit 0\n");
    s
}

/// The environment of rank `rank` of a two-rank world whose store is at
/// `master:port`, with timeouts long enough for a guest under TCG.
pub(crate) fn pair_env(rank: usize, master: &str, port: u16) -> Vec<(String, String)> {
    vec![
        ("RANK".to_string(), rank.to_string()),
        ("LOCAL_RANK".into(), "0".into()),
        ("WORLD_SIZE".into(), "2".into()),
        ("MASTER_ADDR".into(), master.into()),
        ("MASTER_PORT".into(), port.to_string()),
        ("CAUSEWAY_TIMEOUT".into(), "120s".into()),
        ("CAUSEWAY_RENDEZVOUS_TIMEOUT".into(), "120s".into()),
    ]
}
