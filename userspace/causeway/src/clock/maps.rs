//! The clock maps of a loaded or pinned eBPF object: the stamping
//! configuration, the stamp counters and the published per-peer estimates.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use aya::{
    maps::{Array, HashMap, Map, MapData, MapError, PerCpuArray},
    Ebpf,
};

use crate::map_handles::{self, OpenMapError};
use bpf_maps::clock::{
    ClockStampConfig, ClockStampCounters, PeerClock, PeerClockKey, MAP_CLOCK_CONFIG,
    MAP_CLOCK_COUNTERS, MAP_CLOCK_PEERS,
};

/// A clock map could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum ClockMapsError {
    #[error("the eBPF object has no map {name}")]
    Missing { name: &'static str },
    #[error("opening the pinned map {path}: {source}")]
    Pin {
        path: PathBuf,
        #[source]
        source: MapError,
    },
    #[error("map {name}: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: MapError,
    },
}

impl From<OpenMapError> for ClockMapsError {
    fn from(e: OpenMapError) -> Self {
        match e {
            OpenMapError::Missing { name } => Self::Missing { name },
            OpenMapError::Pin { path, source, .. } => Self::Pin { path, source },
            OpenMapError::Map { name, source } => Self::Map { name, source },
        }
    }
}

fn err(name: &'static str) -> impl Fn(MapError) -> ClockMapsError {
    move |source| ClockMapsError::Map { name, source }
}

/// Handles on the three clock maps.
pub struct ClockMaps {
    config: Array<MapData, ClockStampConfig>,
    counters: PerCpuArray<MapData, ClockStampCounters>,
    peers: HashMap<MapData, PeerClockKey, PeerClock>,
}

impl ClockMaps {
    /// Second handles on the maps of a loaded object.
    pub fn from_ebpf(ebpf: &Ebpf) -> Result<Self, ClockMapsError> {
        let reopen = |name| map_handles::reopen(ebpf, name);
        Self::from_maps(
            reopen(MAP_CLOCK_CONFIG)?,
            reopen(MAP_CLOCK_COUNTERS)?,
            reopen(MAP_CLOCK_PEERS)?,
        )
    }

    /// The maps pinned in `dir` under their own names.
    pub fn from_pins(dir: &Path) -> Result<Self, ClockMapsError> {
        let open = |name| map_handles::open_pinned(dir, name);
        Self::from_maps(
            open(MAP_CLOCK_CONFIG)?,
            open(MAP_CLOCK_COUNTERS)?,
            open(MAP_CLOCK_PEERS)?,
        )
    }

    fn from_maps(config: Map, counters: Map, peers: Map) -> Result<Self, ClockMapsError> {
        Ok(ClockMaps {
            config: Array::try_from(config).map_err(err(MAP_CLOCK_CONFIG))?,
            counters: PerCpuArray::try_from(counters).map_err(err(MAP_CLOCK_COUNTERS))?,
            peers: HashMap::try_from(peers).map_err(err(MAP_CLOCK_PEERS))?,
        })
    }

    /// Turns kernel stamping on (port ≠ 0) or off, with the host transform.
    pub fn set_config(&mut self, cfg: &ClockStampConfig) -> Result<(), ClockMapsError> {
        self.config.set(0, cfg, 0).map_err(err(MAP_CLOCK_CONFIG))
    }

    pub fn config(&self) -> Result<ClockStampConfig, ClockMapsError> {
        self.config.get(&0, 0).map_err(err(MAP_CLOCK_CONFIG))
    }

    /// Stamp counters summed over CPUs.
    pub fn counters(&self) -> Result<ClockStampCounters, ClockMapsError> {
        let per_cpu = self.counters.get(&0, 0).map_err(err(MAP_CLOCK_COUNTERS))?;
        Ok(per_cpu
            .iter()
            .fold(ClockStampCounters::default(), |mut a, c| {
                a.rx_stamped += c.rx_stamped;
                a.tx_stamped += c.tx_stamped;
                a.skipped += c.skipped;
                a
            }))
    }

    /// Publishes (one map update) the estimate of the peer at `addr`.
    pub fn publish(&mut self, addr: IpAddr, value: &PeerClock) -> Result<(), ClockMapsError> {
        self.peers
            .insert(PeerClockKey::from(addr), value, 0)
            .map_err(err(MAP_CLOCK_PEERS))
    }

    /// The published estimate of the peer at `addr`, if any.
    pub fn peer(&self, addr: IpAddr) -> Result<Option<PeerClock>, ClockMapsError> {
        match self.peers.get(&PeerClockKey::from(addr), 0) {
            Ok(v) => Ok(Some(v)),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(source) => Err(ClockMapsError::Map {
                name: MAP_CLOCK_PEERS,
                source,
            }),
        }
    }
}
