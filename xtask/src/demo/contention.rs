//! The demo's competing traffic: a "checkpoint upload" (iperf3, 8 TCP
//! streams, DSCP CS1) from domain 0 to domain 1 across the same WAN as the
//! gradient sync, and a sampler of the per-class byte counters on the
//! receiving gateway (`causeway stats --watch --json`) for the rate plot.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    thread::JoinHandle,
    time::Instant,
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::{cmd, testbed::Testbed};

/// iperf3's port: the demo policy puts 5201-5210 into class `bulk`.
pub const UPLOAD_PORT: &str = "5201";
/// Parallel TCP streams of the upload.
pub const STREAMS: &str = "8";

/// A running upload; stopped (both iperf3 killed and reaped) on drop.
pub struct Upload {
    server: Child,
    client: Child,
    reader: Option<JoinHandle<Vec<f64>>>,
}

impl Upload {
    /// Starts the iperf3 server on the second host of domain 1 and the
    /// client on the second host of domain 0 (the ranks' hosts too: the
    /// upload shares the WAN, not a NIC queue with one rank only).
    pub fn start(bed: &Testbed) -> Result<Self> {
        let pick = |domain: u64| {
            bed.hosts
                .iter()
                .filter(|h| h.domain == domain)
                .nth(1)
                .or_else(|| bed.hosts.iter().find(|h| h.domain == domain))
                .context("a host per domain")
        };
        let (src, dst) = (pick(0)?, pick(1)?);
        let server = Command::new("ip")
            .args([
                "netns",
                "exec",
                &dst.netns,
                "iperf3",
                "-s",
                "-p",
                UPLOAD_PORT,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the iperf3 server")?;
        let mut upload = Upload {
            server,
            // Replaced below; a finished placeholder keeps Drop simple.
            client: Command::new("true").spawn().context("spawning true")?,
            reader: None,
        };
        // The server needs a moment to listen; the client retries.
        let mut client = None;
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let listening = cmd::output(Command::new("ip").args([
                "netns", "exec", &dst.netns, "ss", "-Hltn", "sport", "=", ":5201",
            ]))
            .is_some_and(|o| !o.trim().is_empty());
            if listening {
                client = Some(
                    Command::new("ip")
                        .args(["netns", "exec", &src.netns, "iperf3", "-c", &dst.ip])
                        .args(["-p", UPLOAD_PORT, "-P", STREAMS, "-S", "0x20"])
                        .args(["-t", "600", "-i", "1", "--forceflush", "-f", "m"])
                        .stdout(Stdio::piped())
                        .stderr(Stdio::null())
                        .spawn()
                        .context("starting the iperf3 client")?,
                );
                break;
            }
        }
        let Some(mut client) = client else {
            bail!("the iperf3 server did not listen in {}", dst.netns);
        };
        let out = client.stdout.take().context("iperf3 stdout")?;
        upload.client = client;
        upload.reader = Some(std::thread::spawn(move || {
            BufReader::new(out)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| sum_mbit(&l))
                .collect()
        }));
        Ok(upload)
    }

    /// Stops the upload; returns its per-second rates (Mbit/s, iperf3's
    /// `[SUM]` lines), the first second (slow start) left out.
    pub fn stop(mut self) -> Vec<f64> {
        self.kill();
        let rates = self
            .reader
            .take()
            .and_then(|r| r.join().ok())
            .unwrap_or_default();
        rates.into_iter().skip(1).collect()
    }

    fn kill(&mut self) {
        for child in [&mut self.client, &mut self.server] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The Mbit/s of an iperf3 `[SUM]` interval line (`-f m`).
pub fn sum_mbit(line: &str) -> Option<f64> {
    if !line.starts_with("[SUM]") || line.contains("sender") || line.contains("receiver") {
        return None;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words.iter().position(|w| *w == "Mbits/sec")?;
    words.get(i.checked_sub(1)?)?.parse().ok()
}

/// Per-class cumulative bytes over time: (seconds since start, class, bytes).
pub type Samples = Vec<(f64, String, u64)>;

/// `causeway stats --watch --json` on one WAN port; stopped on drop.
pub struct Sampler {
    child: Child,
    samples: Arc<Mutex<Samples>>,
    reader: Option<JoinHandle<()>>,
}

impl Sampler {
    pub fn start(netns: &str, iface: &str) -> Result<Self> {
        let mut child = cmd::cargo_bin("causeway", true)
            .args(["--netns", netns, "stats", "--iface", iface])
            .args(["--watch", "--interval", "250ms", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting `causeway stats --watch`")?;
        let out = child.stdout.take().context("stats stdout")?;
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&samples);
        let started = Instant::now();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let t = started.elapsed().as_secs_f64();
                let Ok(doc) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let mut s = sink.lock().unwrap_or_else(|p| p.into_inner());
                s.extend(class_bytes(&doc).into_iter().map(|(c, b)| (t, c, b)));
            }
        });
        Ok(Sampler {
            child,
            samples,
            reader: Some(reader),
        })
    }

    pub fn stop(mut self) -> Samples {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        s.clone()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (class name, bytes) of every class in a `causeway stats --json` document.
pub fn class_bytes(doc: &Value) -> Vec<(String, u64)> {
    crate::testbed::find_key(doc, "classes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c["name"].as_str()?.to_string(), c["bytes"].as_u64()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_interval_sum_lines_give_a_rate() {
        let interval = "[SUM]   3.00-4.00   sec  21.2 MBytes   178 Mbits/sec  12             ";
        assert_eq!(sum_mbit(interval), Some(178.0));
        let total = "[SUM]   0.00-9.00   sec   190 MBytes   177 Mbits/sec  130             sender";
        assert_eq!(sum_mbit(total), None);
        let stream = "[  5]   3.00-4.00   sec  2.50 MBytes  21.0 Mbits/sec    0    113 KBytes";
        assert_eq!(sum_mbit(stream), None);
    }

    #[test]
    fn class_bytes_reads_every_class_of_a_stats_document() {
        let doc = serde_json::json!([{ "iface": "wan0", "classes": [
            {"id": 1, "name": "gradient", "packets": 3, "bytes": 4500, "drops": 0},
            {"id": 4, "name": "bulk", "packets": 1, "bytes": 1500, "drops": 0}
        ]}]);
        assert_eq!(
            class_bytes(&doc),
            vec![("gradient".to_string(), 4500), ("bulk".to_string(), 1500)]
        );
    }
}
