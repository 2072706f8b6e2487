//! The peer clock estimates that the Causeway agent publishes, read from
//! its pinned BPF map (`docs/clock.md`, "What the library reads").
//!
//! The agent keeps, per owned interface, the hash map
//! `<pin root>/<scope>/<iface>/maps/CW_CLK_PEERS` ([`map_path`]) from the
//! peer's address to its estimate: the peer's clock reads
//! `local + offset_ns + drift_ppb · (local − ref_ns) / 10⁹`, where `local`
//! is this host's CLOCK_TAI, with `|error| ≤ error_bound_ns` at `ref_ns`.
//!
//! ```no_run
//! # fn main() -> Result<(), causeway_collective::peer_clock::PeerClockError> {
//! use causeway_collective::peer_clock::PeerClocks;
//! let clocks = PeerClocks::from_env()?; // CAUSEWAY_CLOCK_MAP=/sys/fs/bpf/causeway/root/eth0/maps/CW_CLK_PEERS
//! if let Some(r) = clocks.get("10.1.0.10".parse().unwrap())? {
//!     println!("peer − local = {} ns ± {} ns ({:?}, {} ns old)", r.offset_ns, r.error_bound_ns, r.source, r.age_ns());
//!     let on_peer = r.to_peer_ns(r.at_local_ns);
//! #   let _ = on_peer;
//! }
//! # Ok(()) }
//! ```
//!
//! **Bound for the value's age.** The published bound holds at `ref_ns`;
//! between `ref_ns` and the time asked for, the estimate is extrapolated
//! with the published drift, and the agent also publishes how fast its
//! bound grows doing so (`drift_bound_ppb`, derived from the same weights
//! as the bound itself: `docs/clock.md`): bound(t) = `error_bound_ns` +
//! `drift_bound_ppb` · |t − ref_ns| / 10⁹ (+1 ns for the agent's rounding).
//! A caller may replace that rate with its own
//! ([`PeerClocks::with_drift_error_ppm`]; 1000 ppm, twice the estimator's
//! largest drift, is the assumption-free worst case), or read
//! [`PeerClockReading::bound_at_ref_ns`] and [`PeerClockReading::age_ns`]
//! and decide itself.
//!
//! **Consistent reads.** With preallocated hash maps the kernel reuses a
//! replaced element at once (`kernel/bpf/hashtab.c`, `free_htab_elem` →
//! `pcpu_freelist_push`), so a lookup racing two updates can copy a mix of
//! two values. A value is accepted only when two consecutive lookups return
//! identical bytes, `generation` included ([`read_stable`]).
//!
//! **Access.** The pin is opened read-only (`BPF_OBJ_GET` with
//! `BPF_F_RDONLY`), so a training process needs read permission on the pin
//! and nothing else; nothing here writes to the map.

use std::{
    ffi::{CString, OsString},
    io,
    net::IpAddr,
    os::{fd::FromRawFd, unix::ffi::OsStrExt},
    path::{Path, PathBuf},
};

use aya::maps::{HashMap, Map, MapData, MapError};
use bpf_maps::clock::{
    PeerClock, PeerClockKey, CLOCK_SOURCE_KERNEL, CLOCK_SOURCE_SO_TIMESTAMPING,
    CLOCK_SOURCE_USERSPACE, MAP_CLOCK_PEERS,
};

/// Environment variable naming the pinned map a training process reads.
pub const CLOCK_MAP_ENV: &str = "CAUSEWAY_CLOCK_MAP";
pub use bpf_maps::DEFAULT_PIN_ROOT;
/// Worst-case |true drift − published drift|, ppm, whatever the estimate
/// says: twice the estimator's default `max_drift_ppm` (see the module docs).
pub const WORST_DRIFT_ERROR_PPM: f64 = 1000.0;
/// Lookups tried before a value that keeps changing is reported.
pub const READ_ATTEMPTS: usize = 8;

/// A peer clock estimate could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PeerClockError {
    #[error("{CLOCK_MAP_ENV} is not set: it names the agent's pinned {MAP_CLOCK_PEERS} map, e.g. {DEFAULT_PIN_ROOT}/root/eth0/maps/{MAP_CLOCK_PEERS}")]
    EnvUnset,
    #[error("bad {what} {value:?} for the clock map path: one non-empty path component expected")]
    BadPathPart { what: &'static str, value: String },
    #[error("opening the pinned clock map {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not the agent's {MAP_CLOCK_PEERS} map: {source}")]
    NotPeerMap {
        path: PathBuf,
        #[source]
        source: MapError,
    },
    #[error("looking up {peer} in {path}: {source}")]
    Lookup {
        path: PathBuf,
        peer: IpAddr,
        #[source]
        source: MapError,
    },
    #[error("the estimate of {peer} in {path} changed during each of {attempts} reads")]
    Unstable {
        path: PathBuf,
        peer: IpAddr,
        attempts: usize,
    },
    #[error("the estimate of {peer} in {path} has an unknown source {source_id}")]
    UnknownSource {
        path: PathBuf,
        peer: IpAddr,
        source_id: u32,
    },
    #[error("the drift error must be a finite number of ppm ≥ 0, got {0}")]
    BadDriftError(f64),
    #[error("reading CLOCK_TAI: {0}")]
    Clock(#[source] nix::Error),
}

/// Which timestamps an estimate came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClockSource {
    /// eBPF stamps at XDP ingress and TC egress.
    Kernel,
    /// The socket's SO_TIMESTAMPING software stamps.
    SoTimestamping,
    /// `clock_gettime` around `sendto` / `recvmsg`.
    Userspace,
}

impl ClockSource {
    /// The `CLOCK_SOURCE_*` value of the map.
    pub fn from_wire(v: u32) -> Option<Self> {
        match v {
            CLOCK_SOURCE_KERNEL => Some(Self::Kernel),
            CLOCK_SOURCE_SO_TIMESTAMPING => Some(Self::SoTimestamping),
            CLOCK_SOURCE_USERSPACE => Some(Self::Userspace),
            _ => None,
        }
    }
}

/// One peer's estimate, evaluated at local time `at_local_ns`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeerClockReading {
    /// The local CLOCK_TAI time the reading is for.
    pub at_local_ns: u64,
    /// Peer clock − local clock at `at_local_ns`, ns.
    pub offset_ns: f64,
    /// |true offset − `offset_ns`| ≤ this, ns: the published bound widened
    /// for `|at_local_ns − ref_ns|`.
    pub error_bound_ns: f64,
    /// Local time the published estimate refers to.
    pub ref_ns: u64,
    /// Published offset at `ref_ns`, ns.
    pub offset_at_ref_ns: i64,
    /// Peer rate − local rate, parts per 10⁹.
    pub drift_ppb: i64,
    /// The published bound, valid at `ref_ns`.
    pub bound_at_ref_ns: u64,
    /// The drift error the widening assumed, ppm: the published drift bound
    /// unless the caller set its own.
    pub drift_error_ppm: f64,
    pub source: ClockSource,
    /// Counts the agent's updates.
    pub generation: u64,
    /// Samples the estimate used.
    pub samples: u32,
    /// Smallest round-trip delay in the estimator's window, ns.
    pub min_rtt_ns: u64,
}

impl PeerClockReading {
    /// Evaluates a published value at local time `at_local_ns`; `None` for
    /// an unknown source.
    pub fn from_value(
        v: &PeerClock,
        at_local_ns: u64,
        drift_error_ppm: Option<f64>,
    ) -> Option<Self> {
        let drift_error_ppm = drift_error_ppm.unwrap_or(v.drift_bound_ppb as f64 * 1e-3);
        let mut r = PeerClockReading {
            at_local_ns,
            offset_ns: 0.0,
            error_bound_ns: 0.0,
            ref_ns: v.ref_ns,
            offset_at_ref_ns: v.offset_ns,
            drift_ppb: v.drift_ppb,
            bound_at_ref_ns: v.error_bound_ns,
            drift_error_ppm,
            source: ClockSource::from_wire(v.source)?,
            generation: v.generation,
            samples: v.samples,
            min_rtt_ns: v.min_rtt_ns,
        };
        r.offset_ns = r.offset_at(at_local_ns);
        r.error_bound_ns = r.bound_at(at_local_ns);
        Some(r)
    }

    /// `at_local_ns − ref_ns`, ns (negative when asked about an earlier time).
    pub fn age_ns(&self) -> i64 {
        since(self.ref_ns, self.at_local_ns) as i64
    }

    /// Peer clock − local clock at local time `local_ns`, ns.
    pub fn offset_at(&self, local_ns: u64) -> f64 {
        self.offset_at_ref_ns as f64
            + self.drift_ppb as f64 * since(self.ref_ns, local_ns) as f64 * 1e-9
    }

    /// The error bound at local time `local_ns`: the published bound + 1 ns
    /// (the agent rounds the offset) + `drift_error_ppm` · |local_ns − ref_ns|.
    pub fn bound_at(&self, local_ns: u64) -> f64 {
        let gap = since(self.ref_ns, local_ns).unsigned_abs() as f64;
        self.bound_at_ref_ns as f64 + 1.0 + self.drift_error_ppm * 1e-6 * gap
    }

    /// The peer clock's reading when the local clock reads `local_ns`
    /// (rounded to the ns; `None` outside `u64`).
    pub fn to_peer_ns(&self, local_ns: u64) -> Option<u64> {
        let peer = i128::from(local_ns) + self.offset_at(local_ns).round() as i128;
        u64::try_from(peer).ok()
    }
}

/// `to − from`, ns, without overflow.
fn since(from: u64, to: u64) -> i128 {
    i128::from(to) - i128::from(from)
}

/// Where the agent pins the map of `iface` in `scope`, laid out like
/// `causeway::datapath::Layout::iface(..).maps_dir`: `scope` is the scope's
/// directory name, `root`, `netns-<NAME>` or `netns-ino-<inode>`.
pub fn map_path(pin_root: &Path, scope: &str, iface: &str) -> Result<PathBuf, PeerClockError> {
    for (what, value) in [("scope", scope), ("interface name", iface)] {
        if value.is_empty() || value == "." || value == ".." || value.contains('/') {
            return Err(PeerClockError::BadPathPart {
                what,
                value: value.to_string(),
            });
        }
    }
    Ok(pin_root
        .join(scope)
        .join(iface)
        .join(bpf_maps::MAPS_DIR)
        .join(MAP_CLOCK_PEERS))
}

/// Reads through `lookup` until two consecutive copies are identical
/// (`generation` included), at most `attempts` lookups; `Err(None)` when
/// the value kept changing, `Err(Some(e))` when a lookup failed.
pub fn read_stable<E>(
    attempts: usize,
    mut lookup: impl FnMut() -> Result<Option<PeerClock>, E>,
) -> Result<Option<PeerClock>, Option<E>> {
    let mut last = lookup().map_err(Some)?;
    for _ in 1..attempts {
        let next = lookup().map_err(Some)?;
        if next == last {
            return Ok(next);
        }
        last = next;
    }
    Err(None)
}

fn check_drift_error_ppm(ppm: f64) -> Result<f64, PeerClockError> {
    if ppm.is_finite() && ppm >= 0.0 {
        Ok(ppm)
    } else {
        Err(PeerClockError::BadDriftError(ppm))
    }
}

/// This host's CLOCK_TAI, ns: the agent's local timescale.
pub fn local_tai_now() -> Result<u64, PeerClockError> {
    let t =
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_TAI).map_err(PeerClockError::Clock)?;
    Ok(t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// A read-only handle on an agent's pinned peer clock map.
pub struct PeerClocks {
    path: PathBuf,
    map: HashMap<MapData, PeerClockKey, PeerClock>,
    /// `None`: the published drift bound.
    drift_error_ppm: Option<f64>,
}

impl PeerClocks {
    /// Opens the pinned `CW_CLK_PEERS` map at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, PeerClockError> {
        let path = path.as_ref().to_path_buf();
        let fd = obj_get_read_only(&path).map_err(|source| PeerClockError::Open {
            path: path.clone(),
            source,
        })?;
        let not_peer = |source| PeerClockError::NotPeerMap {
            path: path.clone(),
            source,
        };
        let map = MapData::from_fd(fd)
            .and_then(Map::from_map_data)
            .and_then(HashMap::try_from)
            .map_err(not_peer)?;
        Ok(PeerClocks {
            path,
            map,
            drift_error_ppm: None,
        })
    }

    /// Opens the map named by `CAUSEWAY_CLOCK_MAP`.
    pub fn from_env() -> Result<Self, PeerClockError> {
        Self::open_env_value(std::env::var_os(CLOCK_MAP_ENV))
    }

    fn open_env_value(value: Option<OsString>) -> Result<Self, PeerClockError> {
        match value {
            Some(v) if !v.is_empty() => Self::open(PathBuf::from(v)),
            _ => Err(PeerClockError::EnvUnset),
        }
    }

    /// The drift error, ppm, used to widen bounds for age instead of the
    /// published drift bound (see the module docs); finite and ≥ 0.
    pub fn with_drift_error_ppm(mut self, ppm: f64) -> Result<Self, PeerClockError> {
        self.drift_error_ppm = Some(check_drift_error_ppm(ppm)?);
        Ok(self)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The estimate of `peer` now (CLOCK_TAI); `None` before one is published.
    pub fn get(&self, peer: IpAddr) -> Result<Option<PeerClockReading>, PeerClockError> {
        self.get_at(peer, local_tai_now()?)
    }

    /// The estimate of `peer` evaluated at local time `local_ns`.
    pub fn get_at(
        &self,
        peer: IpAddr,
        local_ns: u64,
    ) -> Result<Option<PeerClockReading>, PeerClockError> {
        let key = PeerClockKey::from(peer);
        let value = read_stable(READ_ATTEMPTS, || match self.map.get(&key, 0) {
            Ok(v) => Ok(Some(v)),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(e),
        })
        .map_err(|e| match e {
            Some(source) => PeerClockError::Lookup {
                path: self.path.clone(),
                peer,
                source,
            },
            None => PeerClockError::Unstable {
                path: self.path.clone(),
                peer,
                attempts: READ_ATTEMPTS,
            },
        })?;
        let Some(v) = value else { return Ok(None) };
        PeerClockReading::from_value(&v, local_ns, self.drift_error_ppm)
            .map(Some)
            .ok_or(PeerClockError::UnknownSource {
                path: self.path.clone(),
                peer,
                source_id: v.source,
            })
    }
}

/// `BPF_OBJ_GET` of the pin at `path` with `BPF_F_RDONLY` (aya's
/// `MapData::from_pin` asks for read-write access, which a reader neither
/// needs nor may have).
#[allow(unsafe_code)]
fn obj_get_read_only(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    const BPF_OBJ_GET: libc::c_long = 7;
    const BPF_F_RDONLY: u32 = 1 << 3;
    /// The `BPF_OBJ_*` member of `union bpf_attr` (include/uapi/linux/bpf.h).
    #[repr(C)]
    struct ObjAttr {
        pathname: u64,
        bpf_fd: u32,
        file_flags: u32,
        path_fd: i32,
        _pad: u32,
    }
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let attr = ObjAttr {
        pathname: c_path.as_ptr() as u64,
        bpf_fd: 0,
        file_flags: BPF_F_RDONLY,
        path_fd: 0,
        _pad: 0,
    };
    // SAFETY: `attr` is a valid, fully initialised prefix of `union
    // bpf_attr` for BPF_OBJ_GET whose `pathname` points at a NUL-terminated
    // string that outlives the call; the kernel only reads `size` bytes.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET,
            &attr as *const ObjAttr,
            std::mem::size_of::<ObjAttr>() as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: BPF_OBJ_GET succeeded, so `fd` is a new descriptor that
    // nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests;
