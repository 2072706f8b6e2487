//! Who this rank is (torchrun's variables + a domain label) and how the
//! communicator behaves (timeouts, streams, chunking), from the environment or a builder.

use std::net::IpAddr;
use std::time::Duration;

use causeway_core::units::{parse_bytes, parse_duration, parse_rate_bps, UnitError};

use crate::cost::CostModel;
use crate::error::{ConfigError, Rank};
use crate::schedule::Algorithm;

/// Identity of this rank in the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub rank: Rank,
    pub world: usize,
    pub local_rank: Option<usize>,
    /// Host name or IP of rank 0's key-value store.
    pub master_addr: String,
    pub master_port: u16,
    /// Network domain (data centre, cluster) of this rank (`default` when nothing named one).
    pub domain: String,
    /// Where `domain` came from; every rank's claim is compared at rendezvous.
    pub domain_claim: DomainClaim,
    /// Ranks with equal host ids talk through shared memory.
    pub host_id: String,
    /// Address to accept peer connections on (default: the one that reaches the master).
    pub listen_ip: Option<IpAddr>,
}

/// How a rank learned its domain. At rendezvous every rank publishes its claim
/// and all must agree (see [`CollectiveError::DomainUnset`](crate::CollectiveError::DomainUnset)
/// and [`DomainConflict`](crate::CollectiveError::DomainConflict)); when no rank
/// names a domain the job is one domain, `default`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DomainClaim {
    /// `CAUSEWAY_DOMAIN` (or the builder's `domain`).
    pub named: Option<String>,
    /// `CAUSEWAY_TOPOLOGY`: the file and the domain it gives every rank of the world.
    pub file: Option<(String, Vec<String>)>,
}

/// Tunables; every field has an environment variable (see [`Options::from_env`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// An operation fails when no peer it waits for made progress for this long.
    pub timeout: Duration,
    pub rendezvous_timeout: Duration,
    /// Parallel TCP connections to a peer in another domain / in the same domain.
    pub streams_wan: usize,
    pub streams_lan: usize,
    /// Use shared memory between ranks with the same host id.
    pub shm: bool,
    pub shm_ring_bytes: usize,
    /// Largest piece of a block one transfer carries; pipelining granularity.
    pub chunk_bytes: usize,
    /// Lanes in flight at once.
    pub window: usize,
    /// Force an algorithm (when it applies to the operation).
    pub algorithm: Option<Algorithm>,
    /// Measure α-β per link class at start-up.
    pub probe: bool,
    pub probe_bytes: usize,
    /// Link costs used when not probed; `CAUSEWAY_COST` overrides apply after probing too.
    pub cost: CostModel,
    pub cost_overrides: Option<String>,
    /// SO_SNDBUF/SO_RCVBUF for connections to other domains (`None`: autotuning).
    pub wan_socket_buffer: Option<usize>,
    /// TCP congestion control for connections to other domains (when the kernel allows it).
    pub wan_congestion: Option<String>,
    /// Loss-based congestion controls, first the kernel takes, that the paced
    /// bulk connections across domains switch to while the path loses nothing
    /// (`CAUSEWAY_TCP_CC_LOSSLESS`, `reno`; `off` = never; see
    /// [`crate::estimates::cc_choice`]). Only with `wan_congestion` set and
    /// pacing on.
    pub wan_lossless_congestion: Vec<String>,
    /// Rate of the WAN path between two domains, bit/s per direction, when known:
    /// connections across domains are paced to share just below it.
    pub wan_rate_bps: Option<u64>,
    /// Pace the bulk connections across domains to their share of the
    /// estimated (or configured) WAN rate (`CAUSEWAY_WAN_PACING`, 1 = default;
    /// see [`crate::estimates`]).
    pub wan_pacing: bool,
    /// Until start-up ends, clamp the receive windows of the bulk
    /// connections across domains so that together they keep at most this
    /// multiple of the path's measured BDP in flight
    /// (`CAUSEWAY_WAN_INFLIGHT_GAIN`, `1.5`; 0 = off; see
    /// [`crate::estimates::inflight`]).
    pub wan_inflight_gain: Option<f64>,
    /// Bytes each rank exchanges both ways with its counterpart across the
    /// WAN at start-up to warm the connections (`CAUSEWAY_WARM_BYTES`,
    /// `4mb`; 0 = off; see [`crate::warm`]).
    pub wan_warm_bytes: usize,
    /// One more connection to each peer in another domain, with no pacing
    /// cap and its own congestion control (`tcp::LATENCY_CONGESTION`), for
    /// transfers of at most `latency_bytes`.
    pub wan_latency_stream: bool,
    pub latency_bytes: usize,
    /// Transfers across domains of at most this many bytes go on the latency
    /// connection and, as a copy, on a bulk one: under random loss the copy
    /// that arrives whole first completes the transfer, so one lost segment
    /// does not add a retransmission's round trip
    /// (`CAUSEWAY_WAN_DUPLICATE_BYTES`, `64kb`; 0 = off; needs the latency
    /// connection).
    pub wan_duplicate_bytes: usize,
    /// Codec of the payloads that cross domains when a call names none
    /// (`CAUSEWAY_WAN_CODEC`; a lossy one applies to allreduce and
    /// reduce-scatter only, see [`crate::CallOptions`]).
    pub wan_codec: crate::codec::CodecSpec,
    /// This rank's own address on each WAN path to other domains, in path order
    /// (`CAUSEWAY_WAN_PATHS`, comma-separated; empty: one path). With two or
    /// more on both ends, bulk chunks are striped over the paths ([`crate::stripe`]).
    pub wan_paths: Vec<std::net::IpAddr>,
    /// The host agent's control socket, asked for the WAN paths when
    /// `wan_paths` is empty (`CAUSEWAY_AGENT_SOCKET`; unset: the agent's
    /// default, when it exists; see [`crate::agent_paths`]).
    pub agent_socket: Option<std::path::PathBuf>,
    /// Ports this rank may accept peers on (`CAUSEWAY_PORT_BASE`,
    /// `CAUSEWAY_PORT_COUNT`): the first free one is taken.
    pub ports: causeway_core::traffic::ListenPorts,
    /// Mutual TLS (`CAUSEWAY_TLS`, `CAUSEWAY_TLS_CERT`, `CAUSEWAY_TLS_KEY`,
    /// `CAUSEWAY_TLS_CA`): see [`crate::transport::tls_config`].
    pub tls: crate::transport::tls_config::TlsSettings,
    /// Transport inside a domain (`CAUSEWAY_TRANSPORT`: auto|tcp|rdma).
    pub transport: crate::transport::rdma::TransportChoice,
    /// Serve this rank's Prometheus metrics here (`CAUSEWAY_METRICS_ADDR`;
    /// the port is offset by the local rank: [`crate::metrics`]).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Write this rank's timeline into this directory (`CAUSEWAY_TRACE`: [`crate::trace`]).
    pub trace_dir: Option<std::path::PathBuf>,
    /// The agent's pinned peer clock map the trace reads its offsets from
    /// (`CAUSEWAY_CLOCK_MAP`, as [`crate::peer_clock`]).
    pub clock_map: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_secs(60),
            rendezvous_timeout: Duration::from_secs(120),
            streams_wan: 2,
            streams_lan: 2,
            shm: true,
            shm_ring_bytes: 4 << 20,
            chunk_bytes: 1 << 20,
            window: 4,
            algorithm: None,
            probe: true,
            probe_bytes: 1 << 20,
            cost: CostModel::default(),
            cost_overrides: None,
            wan_socket_buffer: Some(8 << 20),
            wan_congestion: Some("bbr".into()),
            wan_lossless_congestion: vec!["reno".into()],
            wan_rate_bps: None,
            wan_pacing: true,
            wan_inflight_gain: Some(crate::estimates::inflight::INFLIGHT_GAIN),
            wan_warm_bytes: 4 << 20,
            wan_latency_stream: true,
            latency_bytes: 256 << 10,
            wan_duplicate_bytes: 64 << 10,
            wan_codec: crate::codec::CodecSpec::None,
            wan_paths: Vec::new(),
            agent_socket: None,
            ports: causeway_core::traffic::ListenPorts::default(),
            tls: Default::default(),
            transport: Default::default(),
            metrics_addr: None,
            trace_dir: None,
            clock_map: None,
        }
    }
}

fn var(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn parse<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, ConfigError> {
    value.trim().parse().map_err(|_| ConfigError::InvalidVar {
        name: name.into(),
        value: value.into(),
        reason: format!("expected {}", std::any::type_name::<T>()),
    })
}

fn parse_var<T: std::str::FromStr>(name: &'static str) -> Result<Option<T>, ConfigError> {
    var(name).map(|v| parse(name, &v)).transpose()
}

/// Reads `name` with one of `causeway_core::units`' parsers (`30s`, `1mb`,
/// `200mbit`); the error names the variable and the value.
fn unit_var<T>(
    name: &'static str,
    parse: impl Fn(&str) -> Result<T, UnitError>,
) -> Result<Option<T>, ConfigError> {
    var(name)
        .map(|v| {
            parse(&v).map_err(|e| ConfigError::InvalidVar {
                name: name.into(),
                value: v.clone(),
                reason: e.to_string(),
            })
        })
        .transpose()
}

/// `CAUSEWAY_PORT_BASE` (0: the kernel picks) and `CAUSEWAY_PORT_COUNT`.
fn ports_from_env(
    d: causeway_core::traffic::ListenPorts,
) -> Result<causeway_core::traffic::ListenPorts, ConfigError> {
    let base = parse_var("CAUSEWAY_PORT_BASE")?.unwrap_or(d.base);
    let count = parse_var("CAUSEWAY_PORT_COUNT")?.unwrap_or(d.count);
    causeway_core::traffic::ListenPorts::new(base, count).ok_or_else(|| ConfigError::InvalidVar {
        name: "CAUSEWAY_PORT_COUNT".into(),
        value: count.to_string(),
        reason: format!("{count} ports from {base} must be at least one and end below 65536"),
    })
}

/// Variables that were renamed when their values got units: one that is
/// still set is an error, not silently ignored (the old value would be lost).
pub const RENAMED_VARS: &[(&str, &str)] = &[
    ("CAUSEWAY_TIMEOUT_MS", "CAUSEWAY_TIMEOUT=60s"),
    (
        "CAUSEWAY_RENDEZVOUS_TIMEOUT_MS",
        "CAUSEWAY_RENDEZVOUS_TIMEOUT=120s",
    ),
    ("CAUSEWAY_WAN_MBIT", "CAUSEWAY_WAN_RATE=200mbit"),
];

fn refuse_renamed_vars() -> Result<(), ConfigError> {
    for (old, new) in RENAMED_VARS {
        if let Some(value) = var(old) {
            return Err(ConfigError::InvalidVar {
                name: (*old).into(),
                value,
                reason: format!("renamed: write a value with a unit, e.g. {new}"),
            });
        }
    }
    Ok(())
}

/// `CAUSEWAY_TCP_CC_LOSSLESS`: `off`, or congestion control names separated
/// by commas (letters, digits, `_`; at most 15 bytes each, the kernel's limit).
fn parse_cc_list(v: &str) -> Result<Vec<String>, ConfigError> {
    let bad = |reason: &str| ConfigError::InvalidVar {
        name: "CAUSEWAY_TCP_CC_LOSSLESS".into(),
        value: v.into(),
        reason: reason.into(),
    };
    if v.trim() == "off" {
        return Ok(Vec::new());
    }
    v.split(',')
        .map(str::trim)
        .map(|n| {
            let ok = !n.is_empty()
                && n.len() < 16
                && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            ok.then(|| n.to_string())
                .ok_or_else(|| bad("expected `off` or names like `cubic,reno`"))
        })
        .collect()
}

impl Options {
    /// Defaults overridden by `CAUSEWAY_TIMEOUT`, `CAUSEWAY_RENDEZVOUS_TIMEOUT`
    /// (durations: `30s`, `500ms`), `CAUSEWAY_STREAMS_WAN`, `CAUSEWAY_STREAMS_LAN`,
    /// `CAUSEWAY_SHM` (0/1), `CAUSEWAY_CHUNK_BYTES` (a size: `1mb`, `64kb`, `4096`),
    /// `CAUSEWAY_WINDOW`, `CAUSEWAY_ALGO` (ring|tree|hier), `CAUSEWAY_PROBE` (0/1),
    /// `CAUSEWAY_PROBE_BYTES` (a size), `CAUSEWAY_COST` (`wan=LATENCY:BANDWIDTH,…`,
    /// e.g. `wan=20ms:200mbit,domain=50us:10gbit`), `CAUSEWAY_SOCKET_BUFFER` (a size,
    /// or `auto` for the kernel's autotuning), `CAUSEWAY_TCP_CC` (congestion control
    /// across domains, `default` = the system's), `CAUSEWAY_TCP_CC_LOSSLESS`
    /// (`reno`; a list such as `cubic,reno`, or `off`), `CAUSEWAY_WAN_RATE` (WAN rate per
    /// direction, e.g. `200mbit`: pace connections across domains; unset = off),
    /// `CAUSEWAY_LATENCY_STREAM` (0/1) and `CAUSEWAY_LATENCY_BYTES` (a size: transfers
    /// up to it take the extra uncapped connection across domains),
    /// `CAUSEWAY_WAN_CODEC` (`none`, `bf16`, `fp16`, `int8[:BLOCK[:stochastic]]`,
    /// `topk:1%`, `lz4`, `zstd[:LEVEL]`: [`crate::codec::CodecSpec::parse`]),
    /// `CAUSEWAY_TRANSPORT` (`auto`, `tcp`, `rdma`: links inside a domain over
    /// RDMA where both ends have a device, see [`crate::transport::rdma`]). Sizes and
    /// rates are read by `causeway_core::units` (sizes in powers of 1024, bare
    /// numbers are bytes and bit/s). A variable of [`RENAMED_VARS`] that is set is
    /// an error.
    pub fn from_env() -> Result<Self, ConfigError> {
        refuse_renamed_vars()?;
        let mut o = Options::default();
        let size = |name| -> Result<Option<usize>, ConfigError> {
            unit_var(name, |v| {
                let bytes = parse_bytes(v)?;
                // A size that does not fit in memory is refused by validate().
                Ok(usize::try_from(bytes).unwrap_or(usize::MAX))
            })
        };
        // A size where `0` turns the feature off.
        let size_or_off = |name| -> Result<Option<usize>, ConfigError> {
            match var(name) {
                Some(v) if v.trim() == "0" => Ok(Some(0)),
                _ => size(name),
            }
        };
        if let Some(d) = unit_var("CAUSEWAY_TIMEOUT", parse_duration)? {
            o.timeout = d;
        }
        if let Some(d) = unit_var("CAUSEWAY_RENDEZVOUS_TIMEOUT", parse_duration)? {
            o.rendezvous_timeout = d;
        }
        o.streams_wan = parse_var("CAUSEWAY_STREAMS_WAN")?.unwrap_or(o.streams_wan);
        o.streams_lan = parse_var("CAUSEWAY_STREAMS_LAN")?.unwrap_or(o.streams_lan);
        o.shm = parse_var::<u8>("CAUSEWAY_SHM")?
            .map(|v| v != 0)
            .unwrap_or(o.shm);
        o.chunk_bytes = size("CAUSEWAY_CHUNK_BYTES")?.unwrap_or(o.chunk_bytes);
        o.window = parse_var("CAUSEWAY_WINDOW")?.unwrap_or(o.window);
        o.probe = parse_var::<u8>("CAUSEWAY_PROBE")?
            .map(|v| v != 0)
            .unwrap_or(o.probe);
        o.probe_bytes = size("CAUSEWAY_PROBE_BYTES")?.unwrap_or(o.probe_bytes);
        if let Some(a) = var("CAUSEWAY_ALGO") {
            o.algorithm = Some(Algorithm::parse(&a).ok_or_else(|| ConfigError::InvalidVar {
                name: "CAUSEWAY_ALGO".into(),
                value: a.clone(),
                reason: "expected ring, tree or hier".into(),
            })?);
        }
        if let Some(spec) = var("CAUSEWAY_COST") {
            o.cost.apply_overrides(&spec)?;
            o.cost_overrides = Some(spec);
        }
        if let Some(cc) = var("CAUSEWAY_TCP_CC") {
            o.wan_congestion = (cc != "default").then_some(cc);
        }
        if let Some(list) = var("CAUSEWAY_TCP_CC_LOSSLESS") {
            o.wan_lossless_congestion = parse_cc_list(&list)?;
        }
        match var("CAUSEWAY_SOCKET_BUFFER") {
            Some(v) if v.trim().eq_ignore_ascii_case("auto") => o.wan_socket_buffer = None,
            Some(_) => o.wan_socket_buffer = size("CAUSEWAY_SOCKET_BUFFER")?,
            None => {}
        }
        o.wan_pacing = parse_var::<u8>("CAUSEWAY_WAN_PACING")?.map_or(o.wan_pacing, |v| v != 0);
        if let Some(g) = parse_var::<f64>("CAUSEWAY_WAN_INFLIGHT_GAIN")? {
            o.wan_inflight_gain = if g == 0.0 {
                None
            } else if g.is_finite() && g >= 1.0 {
                Some(g)
            } else {
                return Err(ConfigError::InvalidVar {
                    name: "CAUSEWAY_WAN_INFLIGHT_GAIN".into(),
                    value: g.to_string(),
                    reason: "expected 0 (off) or a gain of at least 1".into(),
                });
            };
        }
        o.wan_latency_stream = parse_var::<u8>("CAUSEWAY_LATENCY_STREAM")?
            .map(|v| v != 0)
            .unwrap_or(o.wan_latency_stream);
        o.latency_bytes = size("CAUSEWAY_LATENCY_BYTES")?.unwrap_or(o.latency_bytes);
        o.wan_duplicate_bytes =
            size_or_off("CAUSEWAY_WAN_DUPLICATE_BYTES")?.unwrap_or(o.wan_duplicate_bytes);
        o.wan_warm_bytes = size_or_off("CAUSEWAY_WARM_BYTES")?.unwrap_or(o.wan_warm_bytes);
        if let Some(bps) = unit_var("CAUSEWAY_WAN_RATE", parse_rate_bps)? {
            o.wan_rate_bps = Some(bps);
        }
        if let Some(c) = var("CAUSEWAY_WAN_CODEC") {
            o.wan_codec =
                crate::codec::CodecSpec::parse(&c).map_err(|e| ConfigError::InvalidVar {
                    name: "CAUSEWAY_WAN_CODEC".into(),
                    value: c.clone(),
                    reason: e.to_string(),
                })?;
        }
        if let Some(t) = var("CAUSEWAY_TRANSPORT") {
            o.transport = crate::transport::rdma::TransportChoice::parse(&t).ok_or_else(|| {
                ConfigError::InvalidVar {
                    name: "CAUSEWAY_TRANSPORT".into(),
                    value: t.clone(),
                    reason: "expected auto, tcp or rdma".into(),
                }
            })?;
        }
        if let Some(p) = var("CAUSEWAY_WAN_PATHS") {
            o.wan_paths = crate::stripe::parse_paths(&p)?;
        }
        if let Some(p) = var("CAUSEWAY_AGENT_SOCKET") {
            o.agent_socket = Some(p.trim().into());
        }
        o.ports = ports_from_env(o.ports)?;
        o.tls = crate::transport::tls_config::TlsSettings::from_env()?;
        crate::observe_env::from_env(&mut o)?;
        o.validate()?;
        Ok(o)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |what: &str| Err(ConfigError::Invalid(what.into()));
        if self.streams_wan == 0
            || self.streams_lan == 0
            || self.streams_wan > 64
            || self.streams_lan > 64
        {
            return bad("streams per peer must be 1..=64");
        }
        if !(64..=(16 << 20)).contains(&self.chunk_bytes) {
            return bad("chunk size must be 64 B ..= 16 MiB");
        }
        if self.window == 0 || self.window > 1024 {
            return bad("window must be 1..=1024");
        }
        if self.shm_ring_bytes < 4096 {
            return bad("shared-memory ring must be at least 4 KiB");
        }
        if self.timeout.is_zero() {
            return bad("timeout must be positive");
        }
        if self.wan_rate_bps == Some(0) {
            return bad("WAN rate must be positive");
        }
        Ok(())
    }
}

impl Identity {
    /// From `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`, plus
    /// `CAUSEWAY_DOMAIN` or `CAUSEWAY_TOPOLOGY` (a file of `RANKS DOMAIN` lines such as
    /// `0-3 east`), `CAUSEWAY_HOST_ID` and `CAUSEWAY_ADDR`.
    pub fn from_env() -> Result<Self, ConfigError> {
        let need = |n: &'static str| var(n).ok_or(ConfigError::MissingVar(n));
        let rank: usize = parse("RANK", &need("RANK")?)?;
        let world: usize = parse("WORLD_SIZE", &need("WORLD_SIZE")?)?;
        if world == 0 {
            return Err(ConfigError::EmptyWorld);
        }
        if rank >= world {
            return Err(ConfigError::RankOutOfRange { rank, world });
        }
        let local_rank = parse_var::<usize>("LOCAL_RANK")?;
        if let (Some(l), Some(lw)) = (local_rank, parse_var::<usize>("LOCAL_WORLD_SIZE")?) {
            if l >= lw {
                return Err(ConfigError::InvalidVar {
                    name: "LOCAL_RANK".into(),
                    value: l.to_string(),
                    reason: format!("must be below LOCAL_WORLD_SIZE={lw}"),
                });
            }
        }
        let master_addr = need("MASTER_ADDR")?;
        let master_port: u16 = parse("MASTER_PORT", &need("MASTER_PORT")?)?;
        let domain_claim = DomainClaim {
            named: var("CAUSEWAY_DOMAIN"),
            file: var("CAUSEWAY_TOPOLOGY")
                .map(|path| domain_map_from_file(&path, world).map(|m| (path, m)))
                .transpose()?,
        };
        // CAUSEWAY_DOMAIN wins here; the rendezvous refuses it if the file disagrees.
        let domain = match &domain_claim {
            DomainClaim { named: Some(d), .. } => d.clone(),
            DomainClaim {
                file: Some((_, map)),
                ..
            } => map[rank].clone(),
            _ => "default".into(),
        };
        let listen_ip = var("CAUSEWAY_ADDR")
            .map(|a| parse::<IpAddr>("CAUSEWAY_ADDR", &a))
            .transpose()?;
        Ok(Identity {
            rank,
            world,
            local_rank,
            master_addr,
            master_port,
            domain,
            domain_claim,
            host_id: var("CAUSEWAY_HOST_ID").unwrap_or_else(default_host_id),
            listen_ip,
        })
    }
}

/// Host name plus network namespace: ranks in different namespaces on one machine
/// (the emulated testbed) are different hosts, as their traffic must cross the network.
pub fn default_host_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    format!("{}/{}", host.trim(), netns)
}

/// Looks `rank` up in a topology file: lines `RANKS DOMAIN`, RANKS being `3` or `0-3`.
pub fn domain_from_file(path: &str, rank: Rank) -> Result<String, ConfigError> {
    let err = |reason: String| ConfigError::Topology {
        path: path.into(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    domain_from_text(&text, rank).map_err(err)
}

pub(crate) fn domain_from_text(text: &str, rank: Rank) -> Result<String, String> {
    let mut found = None;
    for (lo, hi, domain) in topology_lines(text)? {
        if (lo..=hi).contains(&rank) {
            if found.is_some() {
                return Err(format!("rank {rank} is listed twice"));
            }
            found = Some(domain);
        }
    }
    found.ok_or_else(|| format!("rank {rank} is not listed"))
}

/// The `RANKS DOMAIN` lines of a topology file as (first rank, last rank, domain).
fn topology_lines(text: &str) -> Result<Vec<(Rank, Rank, String)>, String> {
    let mut out = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let (Some(ranks), Some(domain), None) = (it.next(), it.next(), it.next()) else {
            return Err(format!("line {}: expected `RANKS DOMAIN`", no + 1));
        };
        let num = |s: &str| {
            s.parse::<usize>()
                .map_err(|_| format!("line {}: {s:?} is not a rank", no + 1))
        };
        let (lo, hi) = match ranks.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(ranks)?, num(ranks)?),
        };
        if lo > hi {
            return Err(format!("line {}: empty range {ranks}", no + 1));
        }
        out.push((lo, hi, domain.to_string()));
    }
    Ok(out)
}

/// The whole map of a topology file: the domain of every rank below `world`.
pub fn domain_map_from_file(path: &str, world: usize) -> Result<Vec<String>, ConfigError> {
    let err = |reason: String| ConfigError::Topology {
        path: path.into(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    domain_map_from_text(&text, world).map_err(err)
}

/// Every rank below `world` must be listed exactly once, and no rank beyond it:
/// a file written for another world size would silently regroup the ranks.
pub(crate) fn domain_map_from_text(text: &str, world: usize) -> Result<Vec<String>, String> {
    if let Some((_, hi, _)) = topology_lines(text)?.iter().find(|l| l.1 >= world) {
        return Err(format!("lists rank {hi}, beyond WORLD_SIZE {world}"));
    }
    (0..world).map(|r| domain_from_text(text, r)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_file_lines() {
        let t = "# two domains\n0-1 east\n2 west # a comment\n3 west\n";
        assert_eq!(domain_from_text(t, 1).as_deref(), Ok("east"));
        assert_eq!(domain_from_text(t, 3).as_deref(), Ok("west"));
        assert!(domain_from_text(t, 4).is_err());
        assert!(domain_from_text("0-2 a\n2 b\n", 2)
            .unwrap_err()
            .contains("twice"));
        assert!(domain_from_text("x a\n", 0).is_err());
        assert!(domain_from_text("0 a b\n", 0).is_err());
    }

    #[test]
    fn topology_map_covers_the_world_exactly() {
        let t = "0-1 east\n2-3 west\n";
        assert_eq!(
            domain_map_from_text(t, 4),
            Ok(vec![
                "east".into(),
                "east".into(),
                "west".into(),
                "west".into()
            ])
        );
        assert!(domain_map_from_text(t, 5).unwrap_err().contains("rank 4"));
        assert!(domain_map_from_text(t, 3).unwrap_err().contains("beyond"));
        assert!(domain_map_from_text("0 a\n1 a\n9 b\n", 2)
            .unwrap_err()
            .contains("rank 9"));
        assert!(domain_map_from_text("0-1 a\n1 b\n", 2)
            .unwrap_err()
            .contains("twice"));
    }

    #[test]
    fn options_validate() {
        assert!(Options::default().validate().is_ok());
        assert!(Options {
            window: 0,
            ..Options::default()
        }
        .validate()
        .is_err());
        assert!(Options {
            chunk_bytes: 1,
            ..Options::default()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn lossless_congestion_lists() {
        assert_eq!(
            parse_cc_list("cubic, reno"),
            Ok(vec!["cubic".into(), "reno".into()])
        );
        assert_eq!(parse_cc_list("off"), Ok(Vec::new()));
        for bad in ["", "cubic,", "cu bic", "bbr;rm", "a_name_longer_than_15"] {
            let e = parse_cc_list(bad).expect_err(bad).to_string();
            assert!(e.contains("CAUSEWAY_TCP_CC_LOSSLESS"), "{e}");
        }
    }
}
