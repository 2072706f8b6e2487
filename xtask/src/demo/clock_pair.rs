//! The demo's clock-sync part: a `causeway agent` on the first host of each
//! domain, probing its peer across the WAN every 100 ms with kernel stamps,
//! through the same gateways, shaper and WAN queue as the gradient sync and
//! the checkpoint upload. Both agents run synthetic clocks of known error
//! (A +5 ms −30 ppm, B −20 ms +70 ppm), so the truth is known although the
//! namespaces share one real clock; a [`Poll`] reads A's estimate of B every
//! 200 ms during a run and keeps |estimate − truth| per timestamp source.
//!
//! The agents are stopped (SIGTERM) and their interfaces detached on drop.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::{cmd, testbed::Testbed};

/// The clock probes' UDP port (the demo policy's class `clock`).
const PROBE_PORT: u16 = 7339;
/// How often a [`Poll`] asks agent A for its estimates.
const POLL_EVERY: Duration = Duration::from_millis(200);
/// How long an agent may take to load its programs and answer.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A synthetic clock: the host's clock reads `raw + offset + drift·(raw − epoch)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Synthetic {
    pub offset_ns: i64,
    pub drift_ppb: i64,
    pub epoch_ns: u64,
}

/// The true offset (peer clock − local clock, ns) when the local clock reads
/// `local_ns`. Written relative to the epoch so that f64 keeps ns precision.
pub fn true_offset(local: &Synthetic, peer: &Synthetic, local_ns: u64) -> f64 {
    let (dl, dp) = (local.drift_ppb as f64 * 1e-9, peer.drift_ppb as f64 * 1e-9);
    // Raw time since the epoch at which the local clock read `local_ns`.
    let since_epoch =
        (i128::from(local_ns) - i128::from(local.epoch_ns) - i128::from(local.offset_ns)) as f64
            / (1.0 + dl);
    (peer.offset_ns - local.offset_ns) as f64 + (dp - dl) * since_epoch
}

struct AgentProc {
    netns: String,
    child: Child,
    config: PathBuf,
}

/// Two running agents: A (domain 0, host 0) estimating B (domain 1, host 0).
pub struct ClockPair {
    agents: Vec<AgentProc>,
    pub clock_a: Synthetic,
    pub clock_b: Synthetic,
    /// When both agents answered.
    ready_at: Instant,
}

impl ClockPair {
    /// Starts both agents and waits until each answers on its control socket.
    pub fn start(bed: &Testbed) -> Result<Self> {
        let ((_, a), (_, b)) = (bed.first_host(0)?, bed.first_host(1)?);
        // Any instant near now: the drift terms are zero there. CLOCK_TAI is
        // UTC + 37 s; the exact value does not matter, both sides use this one.
        let epoch_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .context("system clock before 1970")?
            .as_nanos() as u64
            + 37_000_000_000;
        let clock_a = Synthetic {
            offset_ns: 5_000_000,
            drift_ppb: -30_000,
            epoch_ns,
        };
        let clock_b = Synthetic {
            offset_ns: -20_000_000,
            drift_ppb: 70_000,
            epoch_ns,
        };
        let mut pair = ClockPair {
            agents: Vec::new(),
            clock_a,
            clock_b,
            ready_at: Instant::now(),
        };
        for (host_id, me, peer, clock) in [(1, a, b, clock_a), (2, b, a, clock_b)] {
            let config = std::env::temp_dir().join(format!(
                "causeway-demo-agent-{}-{}.toml",
                std::process::id(),
                me.netns
            ));
            std::fs::write(&config, agent_config(host_id, &peer.ip, &clock))
                .with_context(|| format!("writing {}", config.display()))?;
            let child = cmd::cargo_bin("causeway", true)
                .args(["--netns", &me.netns, "agent", "--config"])
                .arg(&config)
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .with_context(|| format!("starting `causeway agent` in {}", me.netns))?;
            pair.agents.push(AgentProc {
                netns: me.netns.clone(),
                child,
                config,
            });
        }
        for agent in &mut pair.agents {
            let deadline = Instant::now() + START_LIMIT;
            while status(&agent.netns).is_none() {
                if let Some(exit) = agent.child.try_wait()? {
                    bail!("`causeway agent` in {} exited: {exit}", agent.netns);
                }
                if Instant::now() > deadline {
                    bail!(
                        "`causeway agent` in {} did not answer within {START_LIMIT:?}",
                        agent.netns
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        pair.ready_at = Instant::now();
        Ok(pair)
    }

    /// Waits (at most `limit`) until A has a kernel-stamped estimate of B,
    /// then until the agents have run for `settle` (the estimator's first
    /// seconds, few samples and a wide bound, are not what a run measures).
    pub fn wait_estimate(&self, limit: Duration, settle: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let has_kernel = status(&self.agents[0].netns)
                .map(|s| estimates(&s).iter().any(|e| e.source == "kernel"))
                .unwrap_or(false);
            if has_kernel {
                std::thread::sleep(
                    (self.ready_at + settle).saturating_duration_since(Instant::now()),
                );
                return true;
            }
            std::thread::sleep(POLL_EVERY);
        }
        false
    }

    /// Starts polling A's estimates until [`Poll::stop`].
    pub fn poll(&self) -> Poll {
        let stop = Arc::new(AtomicBool::new(false));
        let (netns, a, b) = (self.agents[0].netns.clone(), self.clock_a, self.clock_b);
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut errors = ClockErrors::default();
            let mut seen: BTreeMap<String, u64> = BTreeMap::new();
            while !flag.load(Ordering::Relaxed) {
                match status(&netns) {
                    Some(doc) => {
                        for e in estimates(&doc) {
                            // A poll that finds the same estimate again adds nothing.
                            if seen.get(&e.source) == Some(&e.at_local_ns) {
                                continue;
                            }
                            seen.insert(e.source.clone(), e.at_local_ns);
                            let err = e.offset_ns - true_offset(&a, &b, e.at_local_ns);
                            let s = errors.by_source.entry(e.source).or_default();
                            s.abs_ns.push(err.abs());
                            s.within_bound += usize::from(err.abs() <= e.error_bound_ns);
                        }
                    }
                    None => errors.missed_polls += 1,
                }
                std::thread::sleep(POLL_EVERY);
            }
            errors
        });
        Poll { stop, thread }
    }
}

impl Drop for ClockPair {
    fn drop(&mut self) {
        for agent in &mut self.agents {
            let _ = Command::new("kill")
                .args(["-TERM", &agent.child.id().to_string()])
                .status();
            let _ = agent.child.wait();
            let _ = cmd::cargo_bin("causeway", true)
                .args(["--netns", &agent.netns, "detach", "--iface", "eth0"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = std::fs::remove_file(&agent.config);
        }
    }
}

/// A polling thread; [`Poll::stop`] returns what it collected.
pub struct Poll {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<ClockErrors>,
}

impl Poll {
    pub fn stop(self) -> ClockErrors {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// |estimate − truth| of one timestamp source over one run.
#[derive(Clone, Debug, Default)]
pub struct SourceErrors {
    pub abs_ns: Vec<f64>,
    /// Estimates whose error was within the estimate's own bound.
    pub within_bound: usize,
}

#[derive(Clone, Debug, Default)]
pub struct ClockErrors {
    pub by_source: BTreeMap<String, SourceErrors>,
    /// Polls the agent did not answer.
    pub missed_polls: usize,
}

impl ClockErrors {
    /// The kernel-stamped estimates' errors (the agent's best source).
    pub fn kernel(&self) -> Option<&SourceErrors> {
        self.by_source
            .get("kernel")
            .filter(|s| !s.abs_ns.is_empty())
    }

    /// p99 |error| of the kernel-stamped estimates, µs.
    pub fn kernel_p99_us(&self) -> Option<f64> {
        self.kernel().map(|k| quantile(&k.abs_ns, 0.99) / 1e3)
    }

    /// One line per source: n, p50, p99, max (µs), within bound.
    pub fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .by_source
            .iter()
            .filter(|(_, e)| !e.abs_ns.is_empty())
            .map(|(source, e)| {
                format!(
                    "{source:<16} n={:<4} p50 {:>9.1} µs  p99 {:>9.1} µs  max {:>9.1} µs  within its bound {}/{}",
                    e.abs_ns.len(),
                    quantile(&e.abs_ns, 0.5) / 1e3,
                    quantile(&e.abs_ns, 0.99) / 1e3,
                    quantile(&e.abs_ns, 1.0) / 1e3,
                    e.within_bound,
                    e.abs_ns.len()
                )
            })
            .collect();
        if out.is_empty() {
            out.push("no estimates during the run".into());
        }
        if self.missed_polls > 0 {
            out.push(format!("{} polls unanswered", self.missed_polls));
        }
        out
    }
}

/// The `q` quantile (nearest rank) of unsorted values; NaN when empty.
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    super::report::percentile(&v, q)
}

fn agent_config(host_id: u32, peer_ip: &str, clock: &Synthetic) -> String {
    format!(
        "host_id = {host_id}\n\
         [[interfaces]]\nname = \"eth0\"\n\
         [clock]\ninterval = \"100ms\"\n\
         [[clock.peers]]\nname = \"peer\"\naddr = \"{peer_ip}:{PROBE_PORT}\"\n\
         [clock.synthetic]\noffset_ns = {}\ndrift_ppb = {}\nepoch_ns = {}\n",
        clock.offset_ns, clock.drift_ppb, clock.epoch_ns
    )
}

/// `causeway --netns NS clock status --json`, or `None` if it did not answer.
fn status(netns: &str) -> Option<Value> {
    let text = cmd::output(
        cmd::cargo_bin("causeway", true).args(["--netns", netns, "clock", "status", "--json"]),
    )?;
    serde_json::from_str(&text).ok()
}

/// One source's current estimate of the first peer.
struct Estimate {
    source: String,
    offset_ns: f64,
    error_bound_ns: f64,
    at_local_ns: u64,
}

fn estimates(doc: &Value) -> Vec<Estimate> {
    doc["session"]["peers"][0]["sources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            Some(Estimate {
                source: s["source"].as_str()?.to_string(),
                offset_ns: s["offset_ns"].as_f64()?,
                error_bound_ns: s["error_bound_ns"].as_f64()?,
                at_local_ns: s["at_local_ns"].as_u64()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_truth_is_the_offset_difference_at_the_epoch_and_drifts_after() {
        let epoch = 1_800_000_000_000_000_000;
        let a = Synthetic {
            offset_ns: 5_000_000,
            drift_ppb: -30_000,
            epoch_ns: epoch,
        };
        let b = Synthetic {
            offset_ns: -20_000_000,
            drift_ppb: 70_000,
            epoch_ns: epoch,
        };
        // At raw = epoch, A reads epoch + 5 ms and B reads epoch − 20 ms.
        let at_epoch = true_offset(&a, &b, epoch + 5_000_000);
        assert!((at_epoch - -25_000_000.0).abs() < 1e-3, "{at_epoch}");
        // 10 s of raw time later A reads epoch + 10 s·(1 − 30 ppm) + 5 ms and
        // B has gained 100 ppm · 10 s = 1 ms on A.
        let raw = 10_000_000_000u64;
        let local = epoch + raw - 300_000 + 5_000_000;
        let later = true_offset(&a, &b, local);
        assert!((later - -24_000_000.0).abs() < 1.0, "{later}");
    }

    #[test]
    fn estimates_are_read_per_source_from_a_status_document() {
        let doc = serde_json::json!({"session": {"peers": [{"sources": [
            {"source": "kernel", "offset_ns": -25e6, "error_bound_ns": 900.0,
             "at_local_ns": 42u64, "drift_ppm": 100.0},
            {"source": "userspace", "offset_ns": -25.1e6, "error_bound_ns": 9e4,
             "at_local_ns": 41u64, "drift_ppm": 100.0}
        ]}]}});
        let e = estimates(&doc);
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].source.as_str(), e[0].at_local_ns, e[0].error_bound_ns),
            ("kernel", 42, 900.0)
        );
        assert!(estimates(&serde_json::json!({"session": {"peers": []}})).is_empty());
    }

    #[test]
    fn the_agent_configuration_names_the_peer_and_the_synthetic_clock() {
        let c = Synthetic {
            offset_ns: -20,
            drift_ppb: 70,
            epoch_ns: 9,
        };
        let text = agent_config(2, "10.0.0.10", &c);
        assert!(text.contains("addr = \"10.0.0.10:7339\""), "{text}");
        assert!(text.contains("offset_ns = -20\ndrift_ppb = 70\nepoch_ns = 9"));
    }
}
