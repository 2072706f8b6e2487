//! `causeway-netsim bench`: how faithful the emulator is on this machine.
//!
//! - rate: UDP offered at 110 % of the configured rate through a 2 ms-RTT path;
//!   the emulator's frame rate (its counters) must be within ±2 % of the
//!   configured rate; iperf3's receiver goodput is shown as the second view.
//! - RTT: UDP echo probes through a path of each configured RTT (no rate limit):
//!   median within ±0.5 ms.
//! - loss: 50 Mbit/s of UDP through a lossy path: the emulator's loss ratio must
//!   fall in the 99 % binomial confidence interval of the configured probability.
//! - TCP view: one iperf3 TCP flow through `wan40`.
//! - max: the highest rate the emulator forwards with no rate limit (UDP flood, TCP).

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use anyhow::{Context, Result};
use causeway_core::units::{parse_duration, parse_rate_bps};
use causeway_netsim::probe::{probe_rtt, EchoServer};
use causeway_netsim::{LinkParams, Profile, Testbed};
use clap::Args;

#[path = "iperf.rs"]
mod iperf;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Seconds per iperf3 run.
    #[arg(long, default_value_t = 5)]
    pub secs: u64,
    /// Configured rates to check.
    #[arg(long, value_delimiter = ',', default_value = "50mbit,200mbit,1gbit")]
    pub rates: Vec<String>,
    /// Configured RTTs to check.
    #[arg(long, value_delimiter = ',', default_value = "10ms,40ms,100ms")]
    pub rtts: Vec<String>,
    /// Loss probabilities to check.
    #[arg(long, value_delimiter = ',', default_values_t = vec![0.001, 0.01])]
    pub losses: Vec<f64>,
    /// RTT probes per configuration.
    #[arg(long, default_value_t = 60)]
    pub probes: usize,
    /// Wake this long before departures and busy-wait (e.g. 50us; 0us = sleep only).
    #[arg(long, default_value_t = crate::wanem_cmd::default_spin())]
    pub spin: String,
    /// SCHED_FIFO priority of the emulator threads; 0 = normal scheduling.
    #[arg(long, default_value_t = 10)]
    pub rt_prio: i32,
    /// Print the table as Markdown (for docs/BENCHMARKS.md).
    #[arg(long)]
    pub markdown: bool,
}

struct Row {
    check: String,
    configured: String,
    measured: String,
    criterion: String,
    pass: Option<bool>,
}

fn mbit(bps: f64) -> String {
    format!("{:.1} Mbit/s", bps / 1e6)
}

static SCHED: std::sync::OnceLock<(u64, i32)> = std::sync::OnceLock::new();

fn builder() -> causeway_netsim::TestbedBuilder {
    let (spin_ns, prio) = SCHED.get().copied().unwrap_or((0, 10));
    Testbed::builder()
        .domains(2)
        .hosts_per_domain(1)
        .spin_us(spin_ns / 1000)
        .realtime_priority((prio > 0).then_some(prio))
}

fn testbed(params: LinkParams) -> Result<Testbed> {
    Ok(builder().wan(Profile::Custom(vec![params])).build()?)
}

/// UDP datagram payload used for the rate checks, and its Ethernet frame size.
const UDP_LEN: usize = 1400;
const UDP_FRAME: f64 = (UDP_LEN + 8 + 20 + 14) as f64;

fn rate_rows(rate_bps: u64, secs: u64, rows: &mut Vec<Row>) -> Result<()> {
    let rate = rate_bps as f64;
    let rate_mbit = rate / 1e6;
    // A 100 ms queue: a sender that stalls for a few ms (busy machine) must not
    // let the link run idle, or the measurement shows the sender, not the link.
    let queue_bytes = ((rate * 0.1 / 8.0) as u64).max(1 << 20);
    let tb = testbed(LinkParams {
        queue_bytes,
        ..LinkParams::wan(1.0, rate_mbit, 0.0)
    })?;
    let (c, s) = (tb.host(1, 0).clone(), tb.host(0, 0).clone());
    let offered = (rate * 1.1 * UDP_LEN as f64 / UDP_FRAME) as u64;
    let udp = iperf::blast_run(&tb, &c, &s, offered, UDP_LEN, secs)?;
    let tcp = iperf::run(&tb, &c, &s, iperf::Mode::Tcp, secs)?;
    for (name, r) in [("UDP at 110 %", &udp), ("TCP (iperf3), 1 flow", &tcp)] {
        let err = r.emulator_bps / rate - 1.0;
        let late_mean = r.dir.late_ns_total as f64 / r.dir.counters.forwarded.max(1) as f64 / 1e3;
        let (expected, unit) = match name.starts_with("UDP") {
            true => (rate * UDP_LEN as f64 / UDP_FRAME, "UDP payload"),
            false => (rate * 1448.0 / 1514.0, "TCP payload"),
        };
        rows.push(Row {
            check: format!("rate, {name}"),
            configured: format!("{rate_mbit} Mbit/s"),
            measured: format!(
                "{} ({:+.2} %), offered {}; sent {}, goodput {} = {:.1} % of {unit} ceiling; late {late_mean:.0} µs mean, {:.1} ms max; drops before the emulator: socket {}, kernel backlog {}",
                mbit(r.emulator_bps),
                err * 100.0,
                mbit(r.offered_bps),
                mbit(r.sent_bps),
                mbit(r.recv_bps),
                r.recv_bps / expected * 100.0,
                r.dir.late_ns_max as f64 / 1e6,
                r.dir.rx_socket_drops,
                r.backlog_drops
            ),
            criterion: "frames ±2 % (if offered ≥ 98 %)".into(),
            // A sender starved of CPU cannot test the link: no verdict then.
            pass: if err.abs() <= 0.02 {
                Some(true)
            } else if r.offered_bps < 0.98 * rate {
                None
            } else {
                Some(false)
            },
        });
    }
    Ok(())
}

fn rtt_row(rtt: Duration, probes: usize, rows: &mut Vec<Row>) -> Result<()> {
    let rtt_ms = rtt.as_secs_f64() * 1e3;
    let tb = testbed(LinkParams {
        delay_ns: crate::link_args::nanos(rtt / 2),
        ..LinkParams::default()
    })?;
    let (c, s) = (tb.host(1, 0).clone(), tb.host(0, 0).clone());
    let srv = tb.in_host(&s, || UdpSocket::bind("0.0.0.0:7007"))??;
    let _echo = EchoServer::start(srv)?;
    let sock = tb.in_host(&c, || UdpSocket::bind("0.0.0.0:0"))??;
    let dst = SocketAddr::new(s.ip.into(), 7007);
    // The prober runs under SCHED_FIFO like the emulator and the echo responder,
    // so the samples show the path and not the CPU scheduler of a busy machine.
    let r = std::thread::scope(|sc| {
        sc.spawn(|| -> std::io::Result<_> {
            let _ = causeway_netsim::sys::set_realtime(5);
            // One warm-up probe resolves ARP on both sides.
            probe_rtt(&sock, dst, 1, 64, Duration::ZERO, Duration::from_secs(2))?;
            probe_rtt(&sock, dst, probes, 64, Duration::from_millis(5), rtt * 3)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("probe thread panicked"))
    })??;
    let ms = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
    let med = ms(r.median());
    rows.push(Row {
        check: "RTT (UDP echo, median)".into(),
        configured: format!("{rtt_ms} ms"),
        measured: format!(
            "{med:.3} ms (min {:.3}, p99 {:.3}, lost {}/{})",
            ms(r.min()),
            ms(r.p99()),
            r.lost(),
            r.sent
        ),
        criterion: "±0.5 ms".into(),
        pass: Some((med - rtt_ms).abs() <= 0.5 && r.lost() == 0),
    });
    Ok(())
}

fn loss_row(loss: f64, secs: u64, rows: &mut Vec<Row>) -> Result<()> {
    let tb = testbed(LinkParams {
        loss,
        ..LinkParams::wan(1.0, 1000.0, 0.0)
    })?;
    let (c, s) = (tb.host(1, 0).clone(), tb.host(0, 0).clone());
    let r = iperf::run(
        &tb,
        &c,
        &s,
        iperf::Mode::Udp {
            offered_bps: 50_000_000,
            len: 1000,
        },
        secs,
    )?;
    let n = r.dir.counters.received as f64;
    let k = r.dir.counters.dropped_loss as f64;
    let half = 2.576 * (loss * (1.0 - loss) / n).sqrt();
    let measured = k / n;
    rows.push(Row {
        check: "loss (emulator counters)".into(),
        configured: format!("{:.2} %", loss * 100.0),
        measured: format!(
            "{:.3} % of {n} frames (iperf3: {} of {} lost)",
            measured * 100.0,
            r.lost,
            r.packets
        ),
        criterion: format!(
            "99 % CI [{:.3}, {:.3}] %",
            (loss - half) * 100.0,
            (loss + half) * 100.0
        ),
        pass: Some((measured - loss).abs() <= half && r.dir.counters.dropped_queue == 0),
    });
    Ok(())
}

fn tcp_row(secs: u64, rows: &mut Vec<Row>) -> Result<()> {
    let tb = builder().wan(Profile::Wan40).build()?;
    let (c, s) = (tb.host(1, 0).clone(), tb.host(0, 0).clone());
    let r = iperf::run(&tb, &c, &s, iperf::Mode::Tcp, secs)?;
    // MSS 1448 (timestamps) in a 1514-byte frame.
    let ceiling = 200e6 * 1448.0 / 1514.0;
    rows.push(Row {
        check: "TCP goodput, wan40 (1 flow)".into(),
        configured: format!("{} ceiling", mbit(ceiling)),
        measured: format!(
            "{} ({:.1} % of ceiling), emulator {} , queue drops {}",
            mbit(r.recv_bps),
            r.recv_bps / ceiling * 100.0,
            mbit(r.emulator_bps),
            r.dir.counters.dropped_queue
        ),
        criterion: "view".into(),
        pass: None,
    });
    Ok(())
}

fn max_rows(secs: u64, rows: &mut Vec<Row>) -> Result<()> {
    let tb = testbed(LinkParams {
        queue_bytes: 8 << 20,
        ..LinkParams::default()
    })?;
    let (c, s) = (tb.host(1, 0).clone(), tb.host(0, 0).clone());
    for (name, udp) in [
        (
            "iperf3",
            iperf::run(
                &tb,
                &c,
                &s,
                iperf::Mode::Udp {
                    offered_bps: 0,
                    len: UDP_LEN,
                },
                secs,
            )?,
        ),
        (
            "batched",
            iperf::blast_run(&tb, &c, &s, 3_000_000_000, UDP_LEN, secs)?,
        ),
    ] {
        rows.push(Row {
            check: format!("max rate, no limit (UDP, {name} sender)"),
            configured: "unlimited".into(),
            measured: format!(
                "emulator {}, sent {}, goodput {}; kernel backlog drops {}",
                mbit(udp.emulator_bps),
                mbit(udp.sent_bps),
                mbit(udp.recv_bps),
                udp.backlog_drops
            ),
            criterion: "measured".into(),
            pass: None,
        });
    }
    let tcp = iperf::run(&tb, &c, &s, iperf::Mode::Tcp, secs)?;
    rows.push(Row {
        check: "max rate, no limit (TCP)".into(),
        configured: "unlimited".into(),
        measured: format!(
            "emulator {}, iperf3 goodput {}",
            mbit(tcp.emulator_bps),
            mbit(tcp.recv_bps)
        ),
        criterion: "measured".into(),
        pass: None,
    });
    Ok(())
}

pub fn run(a: BenchArgs) -> Result<()> {
    let spin_ns = crate::link_args::duration_ns(&a.spin).context("--spin")?;
    let rates = (a.rates.iter())
        .map(|r| parse_rate_bps(r).context("--rates"))
        .collect::<Result<Vec<_>>>()?;
    let rtts = (a.rtts.iter())
        .map(|r| parse_duration(r).context("--rtts"))
        .collect::<Result<Vec<_>>>()?;
    anyhow::ensure!(
        causeway_netsim::sys::is_root(),
        "the bench needs root (namespaces, raw sockets)"
    );
    let _ = SCHED.set((spin_ns, a.rt_prio));
    let mut rows = Vec::new();
    for (&r, text) in rates.iter().zip(&a.rates) {
        rate_rows(r, a.secs, &mut rows).with_context(|| format!("rate check at {text}"))?;
    }
    for (&r, text) in rtts.iter().zip(&a.rtts) {
        rtt_row(r, a.probes, &mut rows).with_context(|| format!("RTT check at {text}"))?;
    }
    for &l in &a.losses {
        loss_row(l, a.secs, &mut rows).with_context(|| format!("loss check at {l}"))?;
    }
    tcp_row(a.secs, &mut rows).context("TCP view")?;
    max_rows(a.secs, &mut rows).context("max rate")?;
    print_table(&rows, a.markdown);
    let failed = rows.iter().filter(|r| r.pass == Some(false)).count();
    let undecided = rows
        .iter()
        .filter(|r| r.pass.is_none() && r.criterion.starts_with("frames"))
        .count();
    if undecided > 0 {
        println!("{undecided} rate check(s) without verdict: the sender offered < 98 % of the rate (CPU-bound)");
    }
    println!(
        "fidelity checks: {} pass, {failed} fail",
        rows.iter().filter(|r| r.pass == Some(true)).count()
    );
    Ok(())
}

fn print_table(rows: &[Row], markdown: bool) {
    let verdict = |p: Option<bool>| match p {
        Some(true) => "PASS",
        Some(false) => "FAIL",
        None => "-",
    };
    if markdown {
        println!("| check | configured | measured | criterion | result |\n|---|---|---|---|---|");
        for r in rows {
            println!(
                "| {} | {} | {} | {} | {} |",
                r.check.trim(),
                r.configured,
                r.measured,
                r.criterion,
                verdict(r.pass)
            );
        }
        return;
    }
    for r in rows {
        println!(
            "{:<32} {:<24} {:<70} {:<26} {}",
            r.check,
            r.configured,
            r.measured,
            r.criterion,
            verdict(r.pass)
        );
    }
}
