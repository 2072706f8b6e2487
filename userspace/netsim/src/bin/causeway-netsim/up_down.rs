//! `up` and `down`.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use causeway_core::units::parse_bytes;
use causeway_netsim::control::{self, Request};
use causeway_netsim::params::default_queue_bytes;
use causeway_netsim::{netns, network, sys, LinkParams, Plan, Profile};
use clap::Args;

use crate::link_args::{duration_ns, parse_link_rate};
use crate::state::{self, EmulatorProc, State};

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Name of this testbed (namespaces are called cw-<tag>-...).
    #[arg(long, default_value = "demo")]
    pub tag: String,
    /// Number of domains.
    #[arg(long, default_value_t = 2)]
    pub domains: usize,
    /// Hosts per domain.
    #[arg(long, default_value_t = 2)]
    pub hosts: usize,
    /// WAN profile: wan40, lossy80, lossy120, gig10, dual, lan.
    #[arg(long, default_value = "wan40")]
    pub profile: Profile,
    /// Explicit path instead of the profile (repeat for several paths per domain
    /// pair, the first is the default): delay=20ms,rate=200mbit[,jitter=1ms][,loss=0.001][,queue=1mb][,reorder=0.01]
    #[arg(long = "path")]
    pub paths: Vec<String>,
    /// Seed of the emulators' loss/jitter generators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Parse `key=value,...` into link parameters (delay is one-way); rates,
/// sizes and durations with units (`delay=20ms,rate=200mbit,queue=1mb`).
pub fn parse_path_spec(spec: &str) -> Result<LinkParams, String> {
    let mut p = LinkParams::default();
    let mut queue = None;
    for item in spec.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or(format!("{item:?} is not key=value"))?;
        let unit_err = |e: causeway_core::units::UnitError| format!("{k}: {e}");
        let probability = || -> Result<f64, String> {
            let num: f64 = v
                .parse()
                .map_err(|_| format!("{k}: {v:?} is not a number"))?;
            if !(num.is_finite() && num >= 0.0) {
                return Err(format!("{k}: {v} must be a finite number ≥ 0"));
            }
            Ok(num)
        };
        match k {
            "delay" => p.delay_ns = duration_ns(v).map_err(unit_err)?,
            "jitter" => p.jitter_ns = duration_ns(v).map_err(unit_err)?,
            "rate" => p.rate_bps = parse_link_rate(v).map_err(unit_err)?,
            "loss" => p.loss = probability()?,
            "reorder" => p.reorder = probability()?,
            "queue" => queue = Some(parse_bytes(v).map_err(unit_err)?),
            other => {
                return Err(format!(
                    "unknown key {other:?} (delay, jitter, rate, loss, queue, reorder)"
                ))
            }
        }
    }
    p.queue_bytes = queue.unwrap_or_else(|| default_queue_bytes(p.rate_bps, p.delay_ns));
    p.validate().map_err(|e| e.to_string())?;
    Ok(p)
}

pub fn up(args: UpArgs) -> Result<()> {
    let paths = if args.paths.is_empty() {
        args.profile.paths()
    } else {
        args.paths
            .iter()
            .map(|spec| parse_path_spec(spec).map_err(|e| anyhow::anyhow!("--path {spec}: {e}")))
            .collect::<Result<_>>()?
    };
    anyhow::ensure!(
        sys::is_root(),
        "causeway-netsim up needs root (network namespaces, raw sockets)"
    );
    let plan = Plan::new(&args.tag, args.domains, args.hosts, &paths)?;
    if State::load(&args.tag)?.is_some()
        || netns::list()?.iter().any(|n| n.starts_with(&plan.prefix))
    {
        bail!(
            "testbed {:?} is already (partly) up: run `causeway-netsim down --tag {}` first",
            args.tag,
            args.tag
        );
    }
    let profile = if args.paths.is_empty() {
        args.profile.to_string()
    } else {
        "custom".into()
    };
    let mut st = State {
        plan: plan.clone(),
        profile,
        emulators: Vec::new(),
    };
    st.save()?; // so that `down` can clean up a half-made testbed
    let result = bring_up(&mut st, args.seed);
    if let Err(e) = result {
        let _ = teardown(&args.tag);
        return Err(e.context(format!(
            "bringing testbed {:?} up (everything made was removed)",
            args.tag
        )));
    }
    crate::inspect::print_status(&st);
    Ok(())
}

fn bring_up(st: &mut State, seed: u64) -> Result<()> {
    network::create(&st.plan)?;
    let exe = std::env::current_exe().context("locating causeway-netsim")?;
    let dir = state::dir(&st.plan.tag);
    for p in st.plan.paths.clone() {
        let control = dir.join(format!("w{}.sock", p.index));
        let log = dir.join(format!("w{}.log", p.index));
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(&exe)
            .args([
                "wanem",
                "--netns",
                &p.emulator_netns,
                "--iface-a",
                "ea",
                "--iface-b",
                "eb",
            ])
            .arg("--params-json")
            .arg(serde_json::to_string(&p.params)?)
            .arg("--seed")
            .arg(seed.wrapping_add(p.index as u64).to_string())
            .arg("--control")
            .arg(&control)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0) // not killed by the terminal's Ctrl-C
            .spawn()
            .context("starting the emulator process")?;
        st.emulators.push(EmulatorProc {
            path: p.index,
            pid: child.id() as i32,
            control: control.clone(),
            log: log.clone(),
        });
        st.save()?;
        wait_for_control(&control, child.id() as i32, &log)?;
    }
    Ok(())
}

fn wait_for_control(sock: &Path, pid: i32, log: &Path) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if control::request(sock, &Request::Stats).is_ok() {
            return Ok(());
        }
        if !sys::process_alive(pid) || is_zombie(pid) {
            bail!(
                "the emulator exited: {}",
                std::fs::read_to_string(log).unwrap_or_default().trim()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!(
        "the emulator did not answer on {} within 10 s",
        sock.display()
    )
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

fn is_our_emulator(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains("wanem"))
        .unwrap_or(false)
}

/// Stop the emulators of `tag`, delete its namespaces and state; returns what was removed.
fn teardown(tag: &str) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    if let Some(st) = State::load(tag)? {
        for e in &st.emulators {
            if sys::process_alive(e.pid) && is_our_emulator(e.pid) {
                sys::kill(e.pid, libc::SIGTERM);
                let t = Instant::now();
                while sys::process_alive(e.pid)
                    && !is_zombie(e.pid)
                    && t.elapsed() < Duration::from_secs(3)
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                if sys::process_alive(e.pid) && !is_zombie(e.pid) {
                    sys::kill(e.pid, libc::SIGKILL);
                }
                removed.push(format!("emulator pid {}", e.pid));
            }
        }
    }
    removed.extend(netns::delete_prefix(&causeway_netsim::topology::prefix(
        tag,
    ))?);
    let dir = state::dir(tag);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        removed.push(format!("state {}", dir.display()));
    }
    Ok(removed)
}

#[derive(Debug, Args)]
pub struct DownArgs {
    /// Testbed to remove.
    #[arg(long, default_value = "demo", conflicts_with = "all")]
    pub tag: String,
    /// Remove every testbed and every leftover `cw-*` namespace.
    #[arg(long)]
    pub all: bool,
}

pub fn down(args: DownArgs) -> Result<()> {
    anyhow::ensure!(sys::is_root(), "causeway-netsim down needs root");
    let mut removed = Vec::new();
    if args.all {
        for tag in state::tags() {
            removed.extend(teardown(&tag)?);
        }
        removed.extend(netns::delete_prefix("cw-")?);
    } else {
        removed.extend(teardown(&args.tag)?);
    }
    if removed.is_empty() {
        println!("nothing to remove");
    } else {
        println!("removed {} item(s): {}", removed.len(), removed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_path_spec;

    #[test]
    fn path_specs_parse_with_defaults_and_reject_bad_keys_and_values() {
        let p = parse_path_spec("delay=20ms,rate=200mbit").unwrap();
        assert_eq!(
            (p.delay_ns, p.rate_bps, p.loss),
            (20_000_000, 200_000_000, 0.0)
        );
        assert_eq!(
            p.queue_bytes, 1_000_000,
            "default queue = one RTT at the rate"
        );
        let p = parse_path_spec("delay=1.5ms,jitter=500us,loss=0.001,queue=100000,reorder=0.01")
            .unwrap();
        assert_eq!(
            (p.delay_ns, p.jitter_ns, p.queue_bytes),
            (1_500_000, 500_000, 100_000)
        );
        // The old spellings are refused, not ignored.
        for old in [
            "delay_ms=20",
            "rate_mbit=200",
            "jitter_ms=1",
            "queue_bytes=100000",
        ] {
            assert!(
                parse_path_spec(old).unwrap_err().contains("unknown key"),
                "{old}"
            );
        }
        assert!(parse_path_spec("delay").unwrap_err().contains("key=value"));
        // A unit error names the key, the value and what was expected.
        let e = parse_path_spec("delay=20").unwrap_err();
        assert!(
            e.starts_with("delay: '20' is not a duration") && e.contains("needs a unit"),
            "{e}"
        );
        let e = parse_path_spec("rate=200mbps").unwrap_err();
        assert!(e.starts_with("rate: '200mbps' is not a rate"), "{e}");
        assert!(parse_path_spec("queue=1xb")
            .unwrap_err()
            .starts_with("queue: '1xb' is not a size"));
        assert!(parse_path_spec("delay=-1ms").is_err());
        assert!(parse_path_spec("loss=abc")
            .unwrap_err()
            .contains("not a number"));
        assert!(parse_path_spec("loss=1.5").unwrap_err().contains("loss"));
        assert_eq!(
            parse_path_spec("rate=unlimited,delay=1ms")
                .unwrap()
                .rate_bps,
            0,
            "unlimited = no rate limit"
        );
    }
}
