//! The agent's configuration file (TOML), validated as a whole.
//!
//! ```toml
//! host_id = 1                       # this host's id in clock probes
//! control_socket = "/run/causeway/agent.sock"   # optional
//! control_group = "causeway"        # optional (name or gid): its members may
//!                                   # use the control socket (mode 0660)
//! clock_map_group = "training"      # optional (name or gid): the CW_CLK_PEERS
//!                                   # pin becomes 0640 with this group (else 0600)
//! metrics = "127.0.0.1:9464"        # optional: Prometheus /metrics
//!
//! [[interfaces]]                    # attached (or adopted) at start
//! name = "eth0"
//! mode = "auto"                     # optional: auto | skb | driver
//!
//! [clock]
//! bind = "0.0.0.0:7339"             # optional
//! interval = "100ms"                # optional, probe period per peer (10ms..=60s)
//! fast_start = 16                   # optional, first probes 8× faster
//! burst = 2                         # optional, requests per round (1..=8)
//! kernel_stamps = true              # optional, configure the eBPF stamps
//!
//! [[clock.peers]]
//! name = "dc2-host0"
//! addr = "10.1.0.2:7339"
//! key_file = "keys/dc2-host0.key"  # optional: the pair's probe key, 64 hex
//!                                   # digits, mode 0600 (relative to this
//!                                   # file); probes are then tagged, and
//!                                   # untagged, forged or replayed ones refused
//!
//! [clock.synthetic]                 # optional, tests only: this host's
//! offset_ns = 25000000              # clock error (off when absent)
//! drift_ppb = -50000
//! epoch_ns = 1790000000000000000    # optional: where drift is zero (raw
//!                                   # CLOCK_TAI); default: agent start
//!
//! [steering]                        # optional: the path-steering controller
//! iface = "br0"                     # (see `super::steering` for the keys)
//!
//! [library]                         # optional: for the communication library
//! wan_paths = ["10.0.1.10", "10.0.2.10"]  # this host's own address on each
//!                                   # WAN path, in path order; a library on
//!                                   # this host asks for them on the control
//!                                   # socket and stripes over the paths
//! ```

use std::{
    collections::HashSet,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::Deserialize;

use crate::{
    clock::{
        source::{raw_tai_now, MAX_SYNTHETIC_DRIFT_PPB},
        EstimatorConfig, PeerSpec, SyncClock,
    },
    datapath::{layout::valid_iface_name, AttachMode},
};
use bpf_maps::clock::CLOCK_PORT;

/// A configuration file that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid agent configuration: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("{0}")]
    Invalid(String),
    /// The key's bytes are never part of the message.
    #[error("clock.peers.{peer}: key file {path}: {reason}")]
    Key {
        peer: String,
        path: PathBuf,
        reason: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    host_id: u32,
    control_socket: Option<PathBuf>,
    control_group: Option<FileGroup>,
    clock_map_group: Option<FileGroup>,
    /// Where `/metrics` is served (Prometheus); off when absent.
    metrics: Option<SocketAddr>,
    #[serde(default)]
    interfaces: Vec<FileIface>,
    clock: FileClock,
    steering: Option<super::steering::FileSteering>,
    library: Option<FileLibrary>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLibrary {
    #[serde(default)]
    wan_paths: Vec<std::net::IpAddr>,
}

/// Most WAN paths a library stripes over (its `CAUSEWAY_WAN_PATHS` limit).
pub const MAX_LIBRARY_PATHS: usize = 8;

/// A group by id or by name.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum FileGroup {
    Id(u32),
    Name(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileIface {
    name: String,
    #[serde(default)]
    mode: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileClock {
    bind: Option<SocketAddr>,
    /// A duration with a unit (`causeway_core::units`): "100ms", "1s".
    interval: Option<String>,
    fast_start: Option<u32>,
    burst: Option<u32>,
    kernel_stamps: Option<bool>,
    #[serde(default)]
    peers: Vec<PeerSpec>,
    synthetic: Option<FileSynthetic>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSynthetic {
    offset_ns: i64,
    drift_ppb: i64,
    /// Raw CLOCK_TAI time at which the drift term is zero; default: start.
    epoch_ns: Option<u64>,
}

/// One interface the agent owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfaceConfig {
    pub name: String,
    pub mode: AttachMode,
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub host_id: u32,
    /// `None`: `<state root>/<scope>/agent.sock`.
    pub control_socket: Option<PathBuf>,
    /// Group (gid) whose members may use the control socket besides root.
    pub control_group: Option<u32>,
    /// Group (gid) given read access to the pinned clock map.
    pub clock_map_group: Option<u32>,
    /// Serve Prometheus metrics at `http://ADDR/metrics` ([`super::metrics`]).
    pub metrics: Option<SocketAddr>,
    pub interfaces: Vec<IfaceConfig>,
    pub bind: SocketAddr,
    pub interval: Duration,
    pub fast_start: u32,
    pub burst: u32,
    pub kernel_stamps: bool,
    pub peers: Vec<PeerSpec>,
    pub clock: SyncClock,
    pub estimator: EstimatorConfig,
    /// The path-steering controller (`[steering]`, [`super::steering`]).
    pub steering: Option<super::steering::SteeringConfig>,
    /// This host's own address on each WAN path, in path order (`[library]
    /// wan_paths`), for the communication library on this host.
    pub library_wan_paths: Vec<std::net::IpAddr>,
}

impl AgentConfig {
    pub fn load(path: &Path) -> Result<AgentConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = path.parent().unwrap_or(Path::new(""));
        Self::parse_in(&text, dir).map_err(|e| match e {
            ConfigError::Parse { source, .. } => ConfigError::Parse {
                path: path.to_path_buf(),
                source,
            },
            other => other,
        })
    }

    /// Parses `text`; relative key files are relative to the current directory.
    pub fn parse(text: &str) -> Result<AgentConfig, ConfigError> {
        Self::parse_in(text, Path::new(""))
    }

    /// Parses `text`; relative key files are relative to `dir`.
    fn parse_in(text: &str, dir: &Path) -> Result<AgentConfig, ConfigError> {
        let f: FileConfig = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: PathBuf::from("<text>"),
            source,
        })?;
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        let mut interfaces = Vec::new();
        let mut seen = HashSet::new();
        for i in f.interfaces {
            if !valid_iface_name(&i.name) {
                return invalid(format!("interfaces: '{}' is not an interface name", i.name));
            }
            if !seen.insert(i.name.clone()) {
                return invalid(format!("interfaces: '{}' is listed twice", i.name));
            }
            let mode = match i.mode.as_deref() {
                None => AttachMode::Auto,
                Some(m) => m.parse().map_err(|e: String| {
                    ConfigError::Invalid(format!("interfaces.{}: {e}", i.name))
                })?,
            };
            interfaces.push(IfaceConfig { name: i.name, mode });
        }
        let c = f.clock;
        let interval = match c.interval.as_deref() {
            None => Duration::from_millis(100),
            Some(text) => causeway_core::units::parse_duration(text)
                .map_err(|e| ConfigError::Invalid(format!("clock.interval: {e}")))?,
        };
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&interval) {
            return invalid(format!(
                "clock.interval must be in 10ms..=60s (got {interval:?})"
            ));
        }
        let burst = c.burst.unwrap_or(2);
        if !(1..=8).contains(&burst) {
            return invalid(format!("clock.burst must be in 1..=8 (got {burst})"));
        }
        if c.peers.is_empty() {
            return invalid("clock.peers: at least one peer is needed".into());
        }
        let mut names = HashSet::new();
        let mut addrs = HashSet::new();
        for p in &c.peers {
            if p.name.is_empty() || !names.insert(p.name.clone()) {
                return invalid(format!(
                    "clock.peers: name '{}' is empty or used twice",
                    p.name
                ));
            }
            if !addrs.insert(p.addr.ip()) {
                return invalid(format!(
                    "clock.peers: address {} is used twice",
                    p.addr.ip()
                ));
            }
            if p.addr.port() == 0 || p.addr.ip().is_unspecified() {
                return invalid(format!(
                    "clock.peers.{}: {} is not a peer address",
                    p.name, p.addr
                ));
            }
        }
        let control_group = resolve_group("control_group", f.control_group)?;
        let clock_map_group = resolve_group("clock_map_group", f.clock_map_group)?;
        let mut peers = c.peers;
        for p in &mut peers {
            if let Some(file) = &p.key_file {
                let path = dir.join(file);
                p.key = Some(super::probe_keys::read_key(&p.name, &path)?);
                p.key_file = Some(path);
            }
        }
        let clock = match c.synthetic {
            None => SyncClock::IDENTITY,
            Some(s) => {
                if s.drift_ppb.abs() > MAX_SYNTHETIC_DRIFT_PPB {
                    return invalid(format!(
                        "clock.synthetic.drift_ppb must be within ±{MAX_SYNTHETIC_DRIFT_PPB} (got {})",
                        s.drift_ppb
                    ));
                }
                SyncClock {
                    offset_ns: s.offset_ns,
                    drift_ppb: s.drift_ppb,
                    epoch_ns: s.epoch_ns.unwrap_or_else(raw_tai_now),
                }
            }
        };
        Ok(AgentConfig {
            host_id: f.host_id,
            control_socket: f.control_socket,
            control_group,
            clock_map_group,
            metrics: f.metrics,
            interfaces,
            // Dual-stack when any peer is IPv6 (kernel stamps need IPv4
            // sockets: see `bpf_maps::clock`).
            bind: c.bind.unwrap_or_else(|| {
                if peers.iter().any(|p| p.addr.is_ipv6()) {
                    SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, CLOCK_PORT))
                } else {
                    SocketAddr::from(([0, 0, 0, 0], CLOCK_PORT))
                }
            }),
            interval,
            fast_start: c.fast_start.unwrap_or(16),
            burst,
            kernel_stamps: c.kernel_stamps.unwrap_or(true),
            peers,
            clock,
            estimator: EstimatorConfig::default(),
            steering: f
                .steering
                .map(super::steering::SteeringConfig::validate)
                .transpose()?,
            library_wan_paths: library_paths(f.library)?,
        })
    }
}

/// `[library] wan_paths`: distinct unicast addresses, at most
/// [`MAX_LIBRARY_PATHS`].
fn library_paths(l: Option<FileLibrary>) -> Result<Vec<std::net::IpAddr>, ConfigError> {
    let paths = l.map(|l| l.wan_paths).unwrap_or_default();
    if paths.len() > MAX_LIBRARY_PATHS {
        return Err(ConfigError::Invalid(format!(
            "library.wan_paths: at most {MAX_LIBRARY_PATHS} paths (got {})",
            paths.len()
        )));
    }
    for (i, a) in paths.iter().enumerate() {
        if a.is_unspecified() || a.is_multicast() {
            return Err(ConfigError::Invalid(format!(
                "library.wan_paths[{i}]: {a} is not a host's own unicast address"
            )));
        }
        if paths[..i].contains(a) {
            return Err(ConfigError::Invalid(format!(
                "library.wan_paths[{i}]: {a} names the same address as an earlier path"
            )));
        }
    }
    Ok(paths)
}

/// A group's id, looked up by name when given one.
fn resolve_group(key: &str, g: Option<FileGroup>) -> Result<Option<u32>, ConfigError> {
    let name = match g {
        None => return Ok(None),
        Some(FileGroup::Id(gid)) => return Ok(Some(gid)),
        Some(FileGroup::Name(name)) => name,
    };
    match nix::unistd::Group::from_name(&name) {
        Ok(Some(g)) => Ok(Some(g.gid.as_raw())),
        Ok(None) => Err(ConfigError::Invalid(format!(
            "{key}: no group named '{name}'"
        ))),
        Err(e) => Err(ConfigError::Invalid(format!(
            "{key}: cannot look up '{name}': {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
host_id = 7
[[interfaces]]
name = "veth0"
mode = "skb"
[clock]
interval = "50ms"
[[clock.peers]]
name = "b"
addr = "10.1.0.2:7339"
[clock.synthetic]
offset_ns = -5000
drift_ppb = 20000
"#;

    #[test]
    fn a_full_config_parses() {
        let c = AgentConfig::parse(GOOD).expect("valid");
        assert_eq!(c.host_id, 7);
        assert_eq!(
            c.interfaces,
            vec![IfaceConfig {
                name: "veth0".into(),
                mode: AttachMode::Skb
            }]
        );
        assert_eq!(c.interval, Duration::from_millis(50));
        assert_eq!(c.bind, SocketAddr::from(([0, 0, 0, 0], CLOCK_PORT)));
        let v6 =
            AgentConfig::parse(&GOOD.replace("10.1.0.2:7339", "[fd00::2]:7339")).expect("valid");
        assert!(v6.bind.is_ipv6() && v6.bind.ip().is_unspecified());
        assert_eq!((c.clock.offset_ns, c.clock.drift_ppb), (-5000, 20000));
        assert!(c.kernel_stamps);
        assert_eq!(c.burst, 2);
        let single = AgentConfig::parse(
            &GOOD.replace("interval = \"50ms\"", "interval = \"50ms\"\nburst = 1"),
        )
        .expect("valid");
        assert_eq!(single.burst, 1);
        assert_eq!(c.control_group, None);
        let by_id =
            AgentConfig::parse(&GOOD.replace("host_id = 7", "host_id = 7\ncontrol_group = 4242"))
                .expect("valid");
        assert_eq!(by_id.control_group, Some(4242));
        let by_name = AgentConfig::parse(
            &GOOD.replace("host_id = 7", "host_id = 7\ncontrol_group = \"root\""),
        )
        .expect("valid");
        assert_eq!(by_name.control_group, Some(0));
        let with_unit =
            AgentConfig::parse(&GOOD.replace("interval = \"50ms\"", "interval = \"250ms\""))
                .expect("valid");
        assert_eq!(with_unit.interval, Duration::from_millis(250));
        assert!(c.library_wan_paths.is_empty());
        let lib = AgentConfig::parse(&format!(
            "{GOOD}\n[library]\nwan_paths = [\"10.0.1.10\", \"fd00::a\"]\n"
        ))
        .expect("valid");
        assert_eq!(
            lib.library_wan_paths,
            vec![
                "10.0.1.10".parse::<std::net::IpAddr>().expect("ip"),
                "fd00::a".parse().expect("ip")
            ]
        );
    }

    #[test]
    fn bad_configs_name_what_is_wrong() {
        let cases = [
            (GOOD.replace("veth0", "a/b"), "not an interface name"),
            (GOOD.replace("skb", "warp"), "unknown XDP mode"),
            (
                GOOD.replace("interval = \"50ms\"", "interval = \"1ms\""),
                "clock.interval must be in 10ms..=60s",
            ),
            (
                GOOD.replace("interval = \"50ms\"", "interval = \"50\""),
                "clock.interval: '50' is not a duration: a duration needs a unit",
            ),
            // The old key is refused, not ignored.
            (
                GOOD.replace("interval = \"50ms\"", "interval_ms = 50"),
                "unknown field `interval_ms`",
            ),
            (
                GOOD.replace("interval = \"50ms\"", "interval = \"50ms\"\nburst = 0"),
                "clock.burst must be in 1..=8",
            ),
            (
                GOOD.replace("interval = \"50ms\"", "interval = \"50ms\"\nburst = 9"),
                "clock.burst must be in 1..=8",
            ),
            (
                GOOD.replace("drift_ppb = 20000", "drift_ppb = 20000000"),
                "drift_ppb",
            ),
            (
                GOOD.replace("10.1.0.2:7339", "0.0.0.0:7339"),
                "not a peer address",
            ),
            (
                GOOD.replace("host_id = 7", "host_id = 7\nbogus = 1"),
                "unknown field",
            ),
            (
                GOOD.replace(
                    "host_id = 7",
                    "host_id = 7\ncontrol_group = \"no-such-group-cw\"",
                ),
                "no group named 'no-such-group-cw'",
            ),
            (
                GOOD.replace(
                    "[[clock.peers]]\nname = \"b\"\naddr = \"10.1.0.2:7339\"\n",
                    "",
                ),
                "at least one peer",
            ),
        ];
        let library = |paths: &str| format!("{GOOD}\n[library]\nwan_paths = [{paths}]\n");
        let nine = (1..=9)
            .map(|k| format!("\"10.0.{k}.1\""))
            .collect::<Vec<_>>();
        let cases = cases.into_iter().chain([
            (library("\"10.0.1\""), "invalid IP address syntax"),
            (
                library("\"0.0.0.0\""),
                "library.wan_paths[0]: 0.0.0.0 is not",
            ),
            (
                library("\"10.0.1.10\", \"10.0.1.10\""),
                "library.wan_paths[1]: 10.0.1.10 names the same address",
            ),
            (library(&nine.join(", ")), "at most 8 paths (got 9)"),
            (
                format!("{GOOD}\n[library]\npaths = []\n"),
                "unknown field `paths`",
            ),
        ]);
        for (text, needle) in cases {
            let err = AgentConfig::parse(&text).expect_err(needle).to_string();
            let chain = format!("{err} {:?}", AgentConfig::parse(&text).err());
            assert!(chain.contains(needle), "{needle}: got {chain}");
        }
    }
}
