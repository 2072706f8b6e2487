//! The testbed of the demo and the benchmarks, driven through the release binaries `causeway-netsim`
//! and `causeway`; torn down (programs detached, namespaces deleted) when the
//! guard drops, also on error or Ctrl-C's unwinding.

use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::cmd;

/// A rank's host: its namespace, address and domain.
pub struct Host {
    pub netns: String,
    pub ip: String,
    pub domain: u64,
}

/// A gateway's WAN interface, where the eBPF programs are attached.
pub struct WanPort {
    pub netns: String,
    pub iface: String,
}

pub struct Testbed {
    /// Name of the testbed (`causeway-netsim --tag`).
    pub tag: String,
    pub hosts: Vec<Host>,
    pub wan_ports: Vec<WanPort>,
    /// Rate (Mbit/s) and one-way delay (ms) of the default path.
    pub rate_mbit: f64,
    pub delay_ms: f64,
    /// Whether [`attach`](Self::attach) ran: only then is there anything to detach.
    attached: std::cell::Cell<bool>,
}

impl Testbed {
    /// Brings the testbed up with `profile` and reads back its plan.
    /// `profile` is a named profile (`wan40`, …) or explicit paths in
    /// `causeway-netsim up --path` form, `;` between paths (first = default),
    /// e.g. `delay=15ms,rate=300mbit,loss=0.002`: see [`netsim_profile_args`].
    pub fn up(tag: &str, profile: &str) -> Result<Self> {
        // Leftovers of an interrupted run first (idempotent).
        let _ = Command::new(cmd::bin_path("causeway-netsim", true))
            .args(["down", "--tag", tag])
            .status();
        cmd::run(
            cmd::cargo_bin("causeway-netsim", true)
                .args(["up", "--tag", tag])
                .args(netsim_profile_args(profile)),
        )?;
        let status = cmd::output(
            cmd::cargo_bin("causeway-netsim", true).args(["status", "--tag", tag, "--json"]),
        )
        .context("causeway-netsim status --json failed")?;
        let mut bed = Self::from_status(&status)
            .context("reading the testbed plan from `causeway-netsim status --json`");
        if let Ok(b) = &mut bed {
            b.tag = tag.to_string();
        } else {
            let _ = Command::new(cmd::bin_path("causeway-netsim", true))
                .args(["down", "--tag", tag])
                .status();
        }
        bed
    }

    fn from_status(text: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(text)?;
        let plan = find_key(&v, "hosts").context("no `hosts` in the status")?;
        let hosts = plan
            .as_array()
            .context("`hosts` is not a list")?
            .iter()
            .map(|h| {
                Ok(Host {
                    netns: h["netns"]
                        .as_str()
                        .context("host without netns")?
                        .to_string(),
                    ip: h["ip"].as_str().context("host without ip")?.to_string(),
                    domain: h["domain"].as_u64().context("host without domain")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let gateways = find_key(&v, "gateways")
            .and_then(Value::as_array)
            .context("no `gateways`")?;
        let paths = find_key(&v, "paths")
            .and_then(Value::as_array)
            .context("no `paths`")?;
        let default = paths
            .iter()
            .find(|p| p["default"].as_bool() == Some(true))
            .context("no default WAN path")?;
        let index = default["index"].as_u64().context("path without index")?;
        let mut wan_ports = Vec::new();
        for side in ["domain_a", "domain_b"] {
            let d = default[side].as_u64().context("path without domains")? as usize;
            let gw = gateways
                .get(d)
                .and_then(Value::as_str)
                .context("gateway name")?;
            wan_ports.push(WanPort {
                netns: gw.to_string(),
                iface: format!("wan{index}"),
            });
        }
        let params = &default["params"];
        let rate_bps =
            find_number(params, &["rate_bps", "rate_bit_s"]).context("path without rate")?;
        let delay_ns = find_number(params, &["delay_ns"]).context("path without delay")?;
        if hosts.is_empty() {
            bail!("the testbed has no hosts");
        }
        Ok(Self {
            tag: String::new(),
            hosts,
            wan_ports,
            attached: std::cell::Cell::new(false),
            rate_mbit: rate_bps / 1e6,
            delay_ms: delay_ns / 1e6,
        })
    }

    /// The first host of `domain` and its index (its rank) in host order.
    pub fn first_host(&self, domain: u64) -> Result<(usize, &Host)> {
        self.hosts
            .iter()
            .enumerate()
            .find(|(_, h)| h.domain == domain)
            .with_context(|| format!("the testbed has no host in domain {domain}"))
    }

    /// A command that runs `program` as rank `rank` (one rank per host, in
    /// host order) inside that host's namespace, with torchrun's variables
    /// and the host's domain; stdout and stderr piped.
    pub fn rank_command(
        &self,
        rank: usize,
        master_port: &str,
        program: &std::path::Path,
    ) -> Command {
        let host = &self.hosts[rank];
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &host.netns])
            .arg(program)
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", "0")
            .env("WORLD_SIZE", self.hosts.len().to_string())
            .env("MASTER_ADDR", &self.hosts[0].ip)
            .env("MASTER_PORT", master_port)
            .env("CAUSEWAY_DOMAIN", format!("d{}", host.domain))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    }

    /// Attaches the classifier to every gateway WAN port with `policy`.
    pub fn attach(&self, policy: &std::path::Path) -> Result<()> {
        self.attached.set(true);
        for port in &self.wan_ports {
            cmd::run(
                cmd::cargo_bin("causeway", true)
                    .args([
                        "--netns",
                        &port.netns,
                        "attach",
                        "--iface",
                        &port.iface,
                        "--policy",
                    ])
                    .arg(policy),
            )?;
        }
        Ok(())
    }

    /// Detaches Causeway from every WAN port (programs, HTB, pins): the
    /// WAN's own drop-tail queue is all that is left.
    pub fn detach(&self) -> Result<()> {
        for port in &self.wan_ports {
            cmd::run(cmd::cargo_bin("causeway", true).args([
                "--netns",
                &port.netns,
                "detach",
                "--iface",
                &port.iface,
            ]))?;
        }
        self.attached.set(false);
        Ok(())
    }

    /// `causeway stats --json` of every WAN port.
    pub fn stats(&self) -> Vec<(String, Value)> {
        self.wan_ports
            .iter()
            .filter_map(|port| {
                let text = cmd::output(cmd::cargo_bin("causeway", true).args([
                    "--netns",
                    &port.netns,
                    "stats",
                    "--iface",
                    &port.iface,
                    "--json",
                ]))?;
                Some((
                    format!("{}:{}", port.netns, port.iface),
                    serde_json::from_str(&text).ok()?,
                ))
            })
            .collect()
    }

    /// `causeway policy show` of every WAN port: per class, the configured
    /// shaping next to the rate measured by the TC program.
    pub fn policy_show(&self) -> Vec<(String, String)> {
        self.wan_ports
            .iter()
            .filter_map(|port| {
                let text = cmd::output(cmd::cargo_bin("causeway", true).args([
                    "--netns",
                    &port.netns,
                    "policy",
                    "show",
                    "--iface",
                    &port.iface,
                ]))?;
                Some((format!("{}:{}", port.netns, port.iface), text))
            })
            .collect()
    }

    /// Frames the WAN emulators' drop-tail queues have dropped: their
    /// `dropped_queue` counters, every path, both directions.
    pub fn queue_drops(&self) -> Option<u64> {
        Some(self.queue_drops_per_path()?.iter().sum())
    }

    /// [`Testbed::queue_drops`] per path (index = path), both directions.
    pub fn queue_drops_per_path(&self) -> Option<Vec<u64>> {
        per_path_drops(&self.emulator_status()?)
    }

    /// The emulators' counters, as `causeway-netsim status --json` prints them.
    pub fn emulator_status(&self) -> Option<Value> {
        let text = cmd::output(
            cmd::cargo_bin("causeway-netsim", true).args(["status", "--tag", &self.tag, "--json"]),
        )?;
        serde_json::from_str(&text).ok()
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let attached = if self.attached.get() {
            &self.wan_ports[..]
        } else {
            &[]
        };
        for port in attached {
            let _ = cmd::cargo_bin("causeway", true)
                .args(["--netns", &port.netns, "detach", "--iface", &port.iface])
                .status();
        }
        let _ = cmd::cargo_bin("causeway-netsim", true)
            .args(["down", "--tag", &self.tag])
            .status();
    }
}

/// Queue drops per path from `causeway-netsim status --json`: `stats[i]` is
/// the emulator `state.emulators[i]` (its `path`), each with both directions.
fn per_path_drops(status: &Value) -> Option<Vec<u64>> {
    let emulators = status.get("state")?.get("emulators")?.as_array()?;
    let stats = status.get("stats")?.as_array()?;
    let mut drops = Vec::new();
    for (e, st) in emulators.iter().zip(stats) {
        let path = usize::try_from(e.get("path")?.as_u64()?).ok()?;
        let dir = |d: &str| st.get(d)?.get("counters")?.get("dropped_queue")?.as_u64();
        if drops.len() <= path {
            drops.resize(path + 1, 0);
        }
        drops[path] += dir("a_to_b")? + dir("b_to_a")?;
    }
    Some(drops)
}

/// The first value under `key`, searching depth-first.
pub fn find_key<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Object(map) => map
            .get(key)
            .or_else(|| map.values().find_map(|x| find_key(x, key))),
        Value::Array(items) => items.iter().find_map(|x| find_key(x, key)),
        _ => None,
    }
}

fn find_number(v: &Value, keys: &[&str]) -> Option<f64> {
    keys.iter()
        .find_map(|k| find_key(v, k).and_then(Value::as_f64))
}

/// `causeway-netsim up` arguments for `profile`: `--profile NAME`, or one
/// `--path SPEC` per `;`-separated explicit path (a spec has a `=`).
pub fn netsim_profile_args(profile: &str) -> Vec<String> {
    if !profile.contains('=') {
        return vec!["--profile".into(), profile.into()];
    }
    profile
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .flat_map(|p| ["--path".to_string(), p.to_string()])
        .collect()
}

/// A name for files (plots) of `profile`: explicit paths with every
/// character that is not alphanumeric, `.` or `-` replaced by `_`.
pub fn profile_file_name(profile: &str) -> String {
    profile
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_profile_or_explicit_paths_become_netsim_arguments() {
        assert_eq!(netsim_profile_args("wan40"), ["--profile", "wan40"]);
        assert_eq!(
            netsim_profile_args("delay=15ms,rate=300mbit; delay=30ms,rate=100mbit,loss=0.01"),
            [
                "--path",
                "delay=15ms,rate=300mbit",
                "--path",
                "delay=30ms,rate=100mbit,loss=0.01"
            ]
        );
        assert_eq!(
            profile_file_name("delay=15ms,rate=300mbit,loss=0.002"),
            "delay_15ms_rate_300mbit_loss_0.002"
        );
        assert_eq!(profile_file_name("lossy80"), "lossy80");
    }

    /// Every emulator's both directions count, each under its own path.
    #[test]
    fn queue_drops_add_both_directions_per_path() {
        let dir = |n: u64| serde_json::json!({ "counters": { "dropped_queue": n } });
        let status = serde_json::json!({
            "state": { "emulators": [ { "path": 1 }, { "path": 0 } ] },
            "stats": [
                { "a_to_b": dir(3), "b_to_a": dir(4), "error": null },
                { "a_to_b": dir(0), "b_to_a": dir(10), "error": null },
            ],
        });
        assert_eq!(per_path_drops(&status), Some(vec![10, 7]));
        // An emulator that did not answer: no count rather than a low one.
        let status = serde_json::json!({
            "state": { "emulators": [ { "path": 0 } ] },
            "stats": [ null ],
        });
        assert_eq!(per_path_drops(&status), None);
    }
}
