//! The steering program's maps from userspace: set a path's mark and state,
//! put a flow on a path or take it off, and read everything back.

use std::path::Path;

use aya::{
    maps::{Array, HashMap, Map, MapData, MapError, PerCpuArray},
    Ebpf,
};
use bpf_maps::paths::{
    FlowKey, PathCounters, PathEntry, MAP_PATH_COUNT, MAP_PATH_FLOWS, MAP_PATH_TABLE, MAX_PATHS,
    PATH_COUNTER_SLOTS, PATH_UNSTEERED_SLOT, PATH_UP,
};

use crate::map_handles::{self, OpenMapError};

/// A steering map could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum PathMapsError {
    #[error("map {name}: {reason}")]
    Open { name: &'static str, reason: String },
    #[error("{what}: {source}")]
    Map {
        what: String,
        #[source]
        source: MapError,
    },
    #[error("path {0} is out of range (paths are 0-{max})", max = MAX_PATHS - 1)]
    BadPath(u32),
    #[error("path {0} is not configured (it has no mark); set it first: causeway paths set --path {0} --mark M")]
    Unconfigured(u32),
}

impl From<OpenMapError> for PathMapsError {
    fn from(e: OpenMapError) -> Self {
        match e {
            OpenMapError::Missing { name } => Self::Open {
                name,
                reason: "not in the object".into(),
            },
            OpenMapError::Pin { name, path, source } => Self::Open {
                name,
                reason: format!("pinned at {}: {source}", path.display()),
            },
            OpenMapError::Map { name, source } => Self::Open {
                name,
                reason: source.to_string(),
            },
        }
    }
}

/// One path as `causeway paths show` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PathRow {
    pub path: u32,
    pub mark: u32,
    pub up: bool,
    /// Flows listed on this path.
    pub flows: usize,
    /// Frames and bytes the program steered onto it (all CPUs).
    pub packets: u64,
    pub bytes: u64,
}

/// Handles on the three steering maps.
pub struct PathMaps {
    flows: HashMap<MapData, FlowKey, u32>,
    table: Array<MapData, PathEntry>,
    counters: PerCpuArray<MapData, PathCounters>,
}

fn map_err(what: impl Into<String>) -> impl FnOnce(MapError) -> PathMapsError {
    let what = what.into();
    move |source| PathMapsError::Map { what, source }
}

impl PathMaps {
    /// The maps of a loaded object (tests).
    pub fn from_ebpf(ebpf: &Ebpf) -> Result<Self, PathMapsError> {
        Self::from_maps(
            map_handles::reopen(ebpf, MAP_PATH_FLOWS)?,
            map_handles::reopen(ebpf, MAP_PATH_TABLE)?,
            map_handles::reopen(ebpf, MAP_PATH_COUNT)?,
        )
    }

    /// The maps pinned in `dir` (an attachment's maps directory).
    pub fn open_pinned(dir: &Path) -> Result<Self, PathMapsError> {
        Self::from_maps(
            map_handles::open_pinned(dir, MAP_PATH_FLOWS)?,
            map_handles::open_pinned(dir, MAP_PATH_TABLE)?,
            map_handles::open_pinned(dir, MAP_PATH_COUNT)?,
        )
    }

    fn from_maps(flows: Map, table: Map, counters: Map) -> Result<Self, PathMapsError> {
        Ok(Self {
            flows: HashMap::try_from(flows).map_err(map_err(MAP_PATH_FLOWS))?,
            table: Array::try_from(table).map_err(map_err(MAP_PATH_TABLE))?,
            counters: PerCpuArray::try_from(counters).map_err(map_err(MAP_PATH_COUNT))?,
        })
    }

    fn check(path: u32) -> Result<(), PathMapsError> {
        if path < MAX_PATHS {
            Ok(())
        } else {
            Err(PathMapsError::BadPath(path))
        }
    }

    /// Path `path`'s entry.
    pub fn path(&self, path: u32) -> Result<PathEntry, PathMapsError> {
        Self::check(path)?;
        self.table
            .get(&path, 0)
            .map_err(map_err(format!("reading path {path}")))
    }

    /// Sets path `path`'s mark and state (one 8-byte write: the program sees
    /// the old entry or the new one).
    pub fn set_path(&mut self, path: u32, mark: u32, up: bool) -> Result<(), PathMapsError> {
        Self::check(path)?;
        let entry = PathEntry {
            mark,
            flags: if up { PATH_UP } else { 0 },
        };
        self.table
            .set(path, entry, 0)
            .map_err(map_err(format!("writing path {path}")))
    }

    /// Puts `flow` on `path` (replacing its previous path). Refuses a path
    /// that has no mark: its frames would be marked 0, the default route.
    pub fn route(&mut self, flow: &FlowKey, path: u32) -> Result<(), PathMapsError> {
        if self.path(path)?.mark == 0 {
            return Err(PathMapsError::Unconfigured(path));
        }
        self.flows
            .insert(flow, path, 0)
            .map_err(map_err("writing the flow"))
    }

    /// Takes `flow` off its path; true when it was listed.
    pub fn unroute(&mut self, flow: &FlowKey) -> Result<bool, PathMapsError> {
        match self.flows.remove(flow) {
            Ok(()) => Ok(true),
            Err(MapError::ElementNotFound) => Ok(false),
            Err(MapError::SyscallError(e)) if e.io_error.kind() == std::io::ErrorKind::NotFound => {
                Ok(false)
            }
            Err(e) => Err(map_err("removing the flow")(e)),
        }
    }

    /// Every listed flow and its path.
    pub fn flows(&self) -> Result<Vec<(FlowKey, u32)>, PathMapsError> {
        self.flows
            .iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_err("listing the flows"))
    }

    /// Counters per slot (paths, then the unsteered slot), summed over CPUs.
    pub fn counters(&self) -> Result<Vec<PathCounters>, PathMapsError> {
        (0..PATH_COUNTER_SLOTS)
            .map(|slot| {
                let per_cpu = self
                    .counters
                    .get(&slot, 0)
                    .map_err(map_err(format!("reading counters of slot {slot}")))?;
                Ok(per_cpu
                    .iter()
                    .fold(PathCounters::default(), |a, c| PathCounters {
                        packets: a.packets + c.packets,
                        bytes: a.bytes + c.bytes,
                    }))
            })
            .collect()
    }

    /// The configured paths (those with a mark), with their flows and counters.
    pub fn rows(&self) -> Result<Vec<PathRow>, PathMapsError> {
        let flows = self.flows()?;
        let counters = self.counters()?;
        let mut rows = Vec::new();
        for path in 0..MAX_PATHS {
            let e = self.path(path)?;
            if e.mark == 0 {
                continue;
            }
            let c = counters[path as usize];
            rows.push(PathRow {
                path,
                mark: e.mark,
                up: e.flags & PATH_UP != 0,
                flows: flows.iter().filter(|(_, p)| *p == path).count(),
                packets: c.packets,
                bytes: c.bytes,
            });
        }
        Ok(rows)
    }

    /// Frames the program did not steer (all CPUs).
    pub fn unsteered(&self) -> Result<PathCounters, PathMapsError> {
        Ok(self.counters()?[PATH_UNSTEERED_SLOT as usize])
    }
}
