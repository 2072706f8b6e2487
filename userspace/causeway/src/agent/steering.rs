//! The agent's optional `[steering]` section: it runs the path-steering
//! controller (`crate::paths::monitor`) beside clock sync, on a thread of its
//! own, stopped with the agent.
//!
//! ```toml
//! [steering]
//! iface = "br0"                 # optional: steering attached there
//!                               # (`causeway paths attach`) is driven
//! listen = "0.0.0.0:7360"       # optional: answer other gateways' probes
//! interval = "100ms"            # optional, probe period (10ms..=10s)
//! down_after = "1s"             # optional, no reply this long: path down
//!
//! [[steering.probe]]            # one per path to probe (needs `iface`)
//! path = 0
//! addr = "10.200.0.2:7360"      # answers over this path (a `listen`)
//! ```

use std::{
    net::SocketAddr,
    sync::{atomic::AtomicBool, Arc},
    thread::JoinHandle,
    time::Duration,
};

use serde::Deserialize;

use super::config::ConfigError;
use crate::{
    datapath::{Layout, NetnsScope},
    paths::{self, monitor, PathMaps},
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileSteering {
    iface: Option<String>,
    listen: Option<SocketAddr>,
    interval: Option<String>,
    down_after: Option<String>,
    #[serde(default)]
    probe: Vec<FileProbe>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProbe {
    path: u32,
    addr: SocketAddr,
}

/// The validated `[steering]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SteeringConfig {
    pub iface: Option<String>,
    pub listen: Option<SocketAddr>,
    pub interval: Duration,
    pub down_after: Duration,
    pub probes: Vec<(u32, SocketAddr)>,
}

fn duration(key: &str, text: Option<&str>, default: Duration) -> Result<Duration, ConfigError> {
    let d = match text {
        None => default,
        Some(t) => causeway_core::units::parse_duration(t)
            .map_err(|e| ConfigError::Invalid(format!("steering.{key}: {e}")))?,
    };
    if !(Duration::from_millis(10)..=Duration::from_secs(10)).contains(&d) {
        return Err(ConfigError::Invalid(format!(
            "steering.{key} must be in 10ms..=10s (got {d:?})"
        )));
    }
    Ok(d)
}

impl SteeringConfig {
    pub(crate) fn validate(f: FileSteering) -> Result<Self, ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if f.probe.is_empty() && f.listen.is_none() {
            return invalid("steering: give probes (with iface) or listen, or leave it out".into());
        }
        if !f.probe.is_empty() && f.iface.is_none() {
            return invalid("steering.probe needs steering.iface (the steered interface)".into());
        }
        if let Some(i) = &f.iface {
            if !crate::datapath::layout::valid_iface_name(i) {
                return invalid(format!("steering.iface: '{i}' is not an interface name"));
            }
        }
        let mut probes: Vec<(u32, SocketAddr)> = Vec::new();
        for p in f.probe {
            if p.path >= bpf_maps::paths::MAX_PATHS {
                return invalid(format!(
                    "steering.probe: path {} is out of range (0-{})",
                    p.path,
                    bpf_maps::paths::MAX_PATHS - 1
                ));
            }
            if probes.iter().any(|(q, _)| *q == p.path) {
                return invalid(format!("steering.probe: path {} is probed twice", p.path));
            }
            if p.addr.port() == 0 || p.addr.ip().is_unspecified() {
                return invalid(format!(
                    "steering.probe: {} is not an address to probe",
                    p.addr
                ));
            }
            probes.push((p.path, p.addr));
        }
        Ok(SteeringConfig {
            iface: f.iface,
            listen: f.listen,
            interval: duration(
                "interval",
                f.interval.as_deref(),
                Duration::from_millis(100),
            )?,
            down_after: duration(
                "down_after",
                f.down_after.as_deref(),
                Duration::from_secs(1),
            )?,
            probes,
        })
    }
}

/// Why the steering controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum SteeringError {
    #[error("steering on {iface}: {reason}")]
    Open { iface: String, reason: String },
}

/// Starts the controller on a thread; it stops when `stop` is set. Its
/// events go to the tracing output (target `causeway::paths`).
pub fn start(
    cfg: &SteeringConfig,
    layout: &Layout,
    scope: &NetnsScope,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<Result<(), monitor::MonitorError>>, SteeringError> {
    let (maps, state_file) = match &cfg.iface {
        Some(iface) => {
            let open = |reason: String| SteeringError::Open {
                iface: iface.clone(),
                reason,
            };
            let dirs = layout
                .steer(scope, iface)
                .map_err(|e| open(e.to_string()))?;
            if !paths::is_attached(&dirs) {
                return Err(open(
                    "path steering is not attached there (causeway paths attach)".into(),
                ));
            }
            let maps = PathMaps::open_pinned(&dirs.maps_dir).map_err(|e| open(e.to_string()))?;
            (Some(maps), Some(dirs.state_dir.join(paths::MONITOR_FILE)))
        }
        None => (None, None),
    };
    let mcfg = monitor::MonitorConfig {
        maps,
        state_file,
        probes: cfg.probes.clone(),
        listen: cfg.listen,
        interval: cfg.interval,
        estimator: causeway_core::paths::EstimatorConfig {
            down_after_ns: cfg.down_after.as_nanos() as u64,
            ..Default::default()
        },
        duration: None,
    };
    Ok(std::thread::spawn(move || {
        monitor::run(mcfg, stop, |e| {
            if let Ok(line) = serde_json::to_string(e) {
                tracing::info!(target: "causeway::paths", "{line}");
            }
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SteeringConfig, ConfigError> {
        SteeringConfig::validate(
            toml::from_str(text).map_err(|e| ConfigError::Invalid(e.to_string()))?,
        )
    }

    #[test]
    fn steering_sections_are_checked_as_a_whole() {
        let c = parse(
            "iface = \"br0\"\nlisten = \"0.0.0.0:7360\"\n[[probe]]\npath = 1\naddr = \"10.200.1.2:7360\"\n",
        )
        .unwrap();
        assert_eq!(c.probes, vec![(1, "10.200.1.2:7360".parse().unwrap())]);
        assert_eq!(c.down_after, Duration::from_secs(1));
        let bad = [
            ("", "give probes"),
            ("[[probe]]\npath = 0\naddr = \"10.0.0.1:1\"\n", "needs steering.iface"),
            ("iface = \"br0\"\n[[probe]]\npath = 16\naddr = \"10.0.0.1:1\"\n", "out of range"),
            ("iface = \"br0\"\n[[probe]]\npath = 0\naddr = \"10.0.0.1:1\"\n[[probe]]\npath = 0\naddr = \"10.0.0.2:1\"\n", "twice"),
            ("listen = \"0.0.0.0:1\"\ninterval = \"1h\"\n", "10ms..=10s"),
            ("listen = \"0.0.0.0:1\"\nspeed = 3\n", "unknown field"),
        ];
        for (text, want) in bad {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
