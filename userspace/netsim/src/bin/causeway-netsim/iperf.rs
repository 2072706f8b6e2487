//! Driving iperf3 between two hosts of a testbed, with the emulator's own byte
//! counters sampled over the same window.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use causeway_netsim::{DirStats, Host, Testbed};
use serde_json::Value;

/// One iperf3 run from `client` to `server` over path 0.
pub struct Run {
    /// Receiver goodput reported by iperf3, bit/s.
    pub recv_bps: f64,
    /// Sender rate reported by iperf3, bit/s.
    pub sent_bps: f64,
    /// UDP only: datagrams sent and lost as iperf3 counts them.
    pub packets: u64,
    pub lost: u64,
    /// Frame-level rate out of the emulator (direction client → server), measured
    /// from its counters between 1 s after the start and 0.5 s before the end.
    pub emulator_bps: f64,
    /// Frame-level rate into the emulator over the same window (what it was offered).
    pub offered_bps: f64,
    /// The emulator's counters of that direction at the end.
    pub dir: DirStats,
    /// Frames the kernel dropped from its per-CPU input backlogs during the run
    /// (machine-wide, /proc/net/softnet_stat): a starved softirq loses frames
    /// before they ever reach the emulator.
    pub backlog_drops: u64,
}

/// (forwarded bytes, received bytes, when) of the client → server direction.
fn counters_now(tb: &Testbed, client: &Host) -> Result<(u64, u64, Instant)> {
    let c = dir_of(tb, client)?.counters;
    Ok((c.forwarded_bytes, c.received_bytes, Instant::now()))
}

/// Sum of the per-CPU "dropped" column of /proc/net/softnet_stat.
pub fn softnet_drops() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|h| u64::from_str_radix(h, 16).ok())
        .sum()
}

pub enum Mode {
    /// UDP at this offered rate (bit/s of payload; 0 = as fast as iperf3 can), datagram size.
    Udp { offered_bps: u64, len: usize },
    /// TCP, omitting the first second (slow start) from iperf3's average.
    Tcp,
}

fn dir_of(tb: &Testbed, client: &Host) -> Result<DirStats> {
    let s = tb.path_stats(0)?;
    Ok(if client.domain == tb.paths()[0].domain_a {
        s.a_to_b
    } else {
        s.b_to_a
    })
}

pub fn run(tb: &Testbed, client: &Host, server: &Host, mode: Mode, secs: u64) -> Result<Run> {
    anyhow::ensure!(secs >= 2, "iperf runs need at least 2 s");
    let drops0 = softnet_drops();
    // Paced senders and the receivers run under SCHED_FIFO (below the emulator's
    // priority), so a busy machine cannot stall them for longer than the queue
    // lasts; an unpaced UDP flood stays at normal priority (it would starve the
    // kernel's softirq threads).
    let rt = !matches!(mode, Mode::Udp { offered_bps: 0, .. });
    let prefix: &[&str] = if rt {
        &["-f", "4", "iperf3"]
    } else {
        &["-o", "0", "iperf3"]
    };
    let chrt = |args: &[&str]| -> Vec<String> {
        prefix.iter().chain(args).map(|a| a.to_string()).collect()
    };
    let srv_args = chrt(&["-s", "-1", "-p", "5201"]);
    let srv_argv: Vec<&str> = srv_args.iter().map(String::as_str).collect();
    let mut srv = tb
        .spawn(server, "chrt", &srv_argv)
        .context("starting iperf3 -s")?;
    std::thread::sleep(Duration::from_millis(300));
    let dst = server.ip.to_string();
    let t = secs.to_string();
    let mut args: Vec<String> = vec![
        "-c".into(),
        dst,
        "-p".into(),
        "5201".into(),
        "-t".into(),
        t,
        "-J".into(),
    ];
    match mode {
        Mode::Udp { offered_bps, len } => {
            args.extend([
                "-u".into(),
                "-b".into(),
                offered_bps.to_string(),
                "-l".into(),
                len.to_string(),
            ]);
        }
        Mode::Tcp => args.extend(["-O".into(), "1".into()]),
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let cli_args = chrt(&argv);
    let cli_argv: Vec<&str> = cli_args.iter().map(String::as_str).collect();
    let cli = tb
        .spawn(client, "chrt", &cli_argv)
        .context("starting iperf3 -c")?;
    std::thread::sleep(Duration::from_millis(1000));
    let (b0, o0, t0) = counters_now(tb, client)?;
    std::thread::sleep(Duration::from_millis(secs * 1000 - 1500));
    let (b1, o1, t1) = counters_now(tb, client)?;
    let out = cli.wait_output().context("waiting for iperf3 -c")?;
    let _ = srv.child().wait();
    let json: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("iperf3 output: {}", String::from_utf8_lossy(&out.stderr)))?;
    if let Some(err) = json.get("error").and_then(Value::as_str) {
        bail!("iperf3: {err}");
    }
    let recv = &json["end"]["sum_received"];
    let sum = &json["end"]["sum"];
    Ok(Run {
        recv_bps: recv["bits_per_second"]
            .as_f64()
            .context("iperf3 JSON has no end.sum_received.bits_per_second")?,
        sent_bps: json["end"]["sum_sent"]["bits_per_second"]
            .as_f64()
            .unwrap_or(f64::NAN),
        packets: sum["packets"].as_u64().unwrap_or(0),
        lost: sum["lost_packets"].as_u64().unwrap_or(0),
        emulator_bps: (b1 - b0) as f64 * 8.0 / (t1 - t0).as_secs_f64(),
        offered_bps: (o1 - o0) as f64 * 8.0 / (t1 - t0).as_secs_f64(),
        dir: dir_of(tb, client)?,
        backlog_drops: softnet_drops() - drops0,
    })
}

/// Like [`run`] in UDP mode, but with the crate's batched sender and sink instead
/// of iperf3 (whose one-syscall-per-datagram sender cannot offer 1 Gbit/s here).
pub fn blast_run(
    tb: &Testbed,
    client: &Host,
    server: &Host,
    offered_bps: u64,
    len: usize,
    secs: u64,
) -> Result<Run> {
    use causeway_netsim::load::{blast, Sink};
    use std::net::UdpSocket;
    let drops0 = softnet_drops();
    let rx = tb.in_host(server, || UdpSocket::bind("0.0.0.0:7100"))??;
    let sink = Sink::start(rx)?;
    let tx = tb.in_host(client, || UdpSocket::bind("0.0.0.0:0"))??;
    tx.connect((server.ip, 7100))?;
    let result = std::thread::scope(|s| -> Result<Run> {
        let sender = s.spawn(|| {
            // Paced: SCHED_FIFO below the emulator keeps it from stalling on a busy
            // machine (see `run`); a flood stays at normal priority.
            if offered_bps <= 1_500_000_000 {
                let _ = causeway_netsim::sys::set_realtime(4);
            }
            blast(&tx, offered_bps, len, Duration::from_secs(secs))
        });
        std::thread::sleep(Duration::from_millis(1000));
        let ((b0, o0, t0), r0) = (counters_now(tb, client)?, sink.bytes());
        std::thread::sleep(Duration::from_millis(secs * 1000 - 1500));
        let ((b1, o1, t1), r1) = (counters_now(tb, client)?, sink.bytes());
        let sent = sender
            .join()
            .map_err(|_| anyhow::anyhow!("sender thread panicked"))??;
        let dt = (t1 - t0).as_secs_f64();
        Ok(Run {
            recv_bps: (r1 - r0) as f64 * 8.0 / dt,
            sent_bps: sent.bytes as f64 * 8.0 / sent.elapsed.as_secs_f64(),
            packets: sent.packets,
            lost: sent.packets.saturating_sub(sink.packets()),
            emulator_bps: (b1 - b0) as f64 * 8.0 / dt,
            offered_bps: (o1 - o0) as f64 * 8.0 / dt,
            dir: dir_of(tb, client)?,
            backlog_drops: softnet_drops() - drops0,
        })
    })?;
    Ok(result)
}
