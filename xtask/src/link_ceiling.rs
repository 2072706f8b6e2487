//! What the testbed's WAN carries with both directions busy at once: one
//! iperf3 TCP flow each way (`--bidir`) between the first host of domain 0 and
//! the first host of domain 1. An allreduce across two domains sends S bytes
//! each way at the same time, so this, not a one-way iperf3, is the ceiling
//! the machine and its emulator give any implementation. On a 2-core machine
//! the userspace emulator and the kernel forwarding every frame both ways can
//! hold the rate below the configured one; the bench prints its time against
//! this ceiling beside its time against the configured rate. `bench
//! multipath` runs one flow each way on every path at once and sums them.

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::testbed::Testbed;

/// The first server's port (outside the demo policy's bulk range 5201-5210);
/// a measurement of several flows uses the ports after it.
const PORT: u16 = 5250;
/// Seconds measured, after one second left out (slow start).
const SECONDS: &str = "5";

/// Goodput each way, Mbit/s, as the receivers counted it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ceiling {
    pub d0_to_d1_mbit: f64,
    pub d1_to_d0_mbit: f64,
}

impl Ceiling {
    /// The slower direction: what bounds an exchange of equal halves.
    pub fn mbit(&self) -> f64 {
        self.d0_to_d1_mbit.min(self.d1_to_d0_mbit)
    }

    /// Seconds to carry `bytes` each way at once at [`Self::mbit`].
    pub fn seconds(&self, bytes: f64) -> f64 {
        bytes * 8.0 / (self.mbit() * 1e6)
    }
}

/// Kills and reaps the iperf3 server on every exit path.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One iperf3 flow of a measurement: from a host namespace (bound to
/// `bind`, the source address that picks a path, if any) to an address in
/// another host namespace.
pub(crate) struct Flow<'a> {
    pub from_netns: &'a str,
    pub bind: Option<&'a str>,
    pub to_netns: &'a str,
    pub to_ip: &'a str,
}

/// Measures the ceiling on `bed`: one flow between the first hosts of the
/// two domains, over the default path. Errors name what failed (no iperf3,
/// no second domain, a run that did not report).
pub(crate) fn measure(bed: &Testbed) -> Result<Ceiling> {
    let ((_, a), (_, b)) = (bed.first_host(0)?, bed.first_host(1)?);
    measure_flows(&[Flow {
        from_netns: &a.netns,
        bind: None,
        to_netns: &b.netns,
        to_ip: &b.ip,
    }])
}

/// Runs every flow at once, both ways (`--bidir`, each on its own port) and
/// sums each direction over the flows. A client that could not connect (its
/// server not listening yet) is retried with fresh servers.
pub(crate) fn measure_flows(flows: &[Flow]) -> Result<Ceiling> {
    let port = |i: usize| (PORT + i as u16).to_string();
    let mut last_err = String::new();
    for _ in 0..10 {
        let _servers = flows
            .iter()
            .enumerate()
            .map(|(i, f)| {
                Command::new("ip")
                    .args([
                        "netns",
                        "exec",
                        f.to_netns,
                        "iperf3",
                        "-s",
                        "-1",
                        "-p",
                        &port(i),
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map(Server)
                    .context("starting an iperf3 server (is iperf3 installed? `cargo xtask setup`)")
            })
            .collect::<Result<Vec<_>>>()?;
        std::thread::sleep(Duration::from_millis(300));
        let clients = flows
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut c = Command::new("ip");
                c.args([
                    "netns",
                    "exec",
                    f.from_netns,
                    "iperf3",
                    "-c",
                    f.to_ip,
                    "-p",
                    &port(i),
                ]);
                if let Some(b) = f.bind {
                    c.args(["-B", b]);
                }
                c.args(["-t", SECONDS, "-O", "1", "--bidir", "-J"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("starting an iperf3 client")
            })
            .collect::<Result<Vec<_>>>()?;
        let mut sum = Ceiling {
            d0_to_d1_mbit: 0.0,
            d1_to_d0_mbit: 0.0,
        };
        let mut failed = false;
        for c in clients {
            let out = c
                .wait_with_output()
                .context("waiting for an iperf3 client")?;
            let report: Value = match serde_json::from_slice(&out.stdout) {
                Ok(v) => v,
                Err(e) => {
                    last_err = format!("unreadable iperf3 report: {e}");
                    failed = true;
                    continue;
                }
            };
            if let Some(err) = report["error"].as_str() {
                last_err = err.to_string();
                failed = true;
                continue;
            }
            let one = parse(&report)?;
            sum.d0_to_d1_mbit += one.d0_to_d1_mbit;
            sum.d1_to_d0_mbit += one.d1_to_d0_mbit;
        }
        forget_metrics(flows);
        if !failed {
            return Ok(sum);
        }
    }
    bail!("iperf3 --bidir did not complete: {last_err}")
}

/// Flushes the TCP metrics iperf3's connections left in both ends' namespaces
/// (the kernel caches ssthresh and RTT per destination), so what runs next
/// starts as it would have without the measurement.
fn forget_metrics(flows: &[Flow]) {
    for ns in flows.iter().flat_map(|f| [f.from_netns, f.to_netns]) {
        let _ = Command::new("ip")
            .args(["-n", ns, "tcp_metrics", "flush", "all"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Reads both directions' received rates out of an `iperf3 --bidir -J` report.
fn parse(report: &Value) -> Result<Ceiling> {
    let end = &report["end"];
    let rate = |key: &str| {
        end[key]["bits_per_second"]
            .as_f64()
            .map(|b| b / 1e6)
            .with_context(|| format!("the iperf3 report has no end.{key}.bits_per_second"))
    };
    Ok(Ceiling {
        d0_to_d1_mbit: rate("sum_received")?,
        d1_to_d0_mbit: rate("sum_received_bidir_reverse")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_directions_come_from_the_receivers_sums() {
        let report = serde_json::json!({"end": {
            "sum_sent": {"bits_per_second": 9.0e8},
            "sum_received": {"bits_per_second": 8.0e8},
            "sum_sent_bidir_reverse": {"bits_per_second": 8.5e8},
            "sum_received_bidir_reverse": {"bits_per_second": 7.5e8},
        }});
        let c = parse(&report).expect("a complete report");
        assert_eq!((c.d0_to_d1_mbit, c.d1_to_d0_mbit), (800.0, 750.0));
        assert_eq!(c.mbit(), 750.0);
        assert_eq!(c.seconds(750e6 / 8.0), 1.0);
    }

    #[test]
    fn a_report_without_the_reverse_direction_is_an_error_naming_it() {
        let report = serde_json::json!({"end": {"sum_received": {"bits_per_second": 8.0e8}}});
        let err = parse(&report)
            .expect_err("no reverse direction")
            .to_string();
        assert!(err.contains("sum_received_bidir_reverse"), "{err}");
    }
}
