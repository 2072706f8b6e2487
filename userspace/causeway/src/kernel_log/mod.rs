//! The eBPF programs' log records (aya-log): the per-interface switch
//! (`CLS_FLAG_LOG` in the interface's pinned classifier config) and a
//! reader of the interface's record buffer.
//!
//! Each attached interface has one buffer (aya-log's `AYA_LOGS` ring
//! buffer, shared by its XDP and TC programs and pinned with their maps).
//! A ring buffer has one consumer position: two readers at once (the
//! agent and `causeway log`) each get a part of the records.
//!
//! Records are rate-limited in the kernel (`bpf_maps::log`): at most
//! `LOG_RECORDS_PER_WINDOW` per event, CPU and second.

// Registers the ring buffer's fd with tokio (`AsyncFd::register_with_interest`).
#[allow(unsafe_code)]
mod reader;

use std::path::{Path, PathBuf};

use aya::maps::{Array, Map, MapData};
use bpf_maps::classifier::{ClassifierConfig, CLS_FLAG_LOG, MAP_CLASSIFIER_CONFIG};

pub use reader::{LogLine, Reader};

/// Why the switch or the buffer could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum KernelLogError {
    #[error("cannot open the pinned map {path}")]
    Pin {
        path: PathBuf,
        #[source]
        source: Box<aya::maps::MapError>,
    },
    #[error("cannot {what} the classifier config {path}")]
    Config {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: Box<aya::maps::MapError>,
    },
    #[error("cannot open the log buffer of program {prog_id}")]
    Buffer {
        prog_id: u32,
        #[source]
        source: Box<aya_log::Error>,
    },
    #[error("cannot wait for log records")]
    Poll(#[source] std::io::Error),
}

fn config_map(
    maps_dir: &Path,
) -> Result<(PathBuf, Array<MapData, ClassifierConfig>), KernelLogError> {
    let path = maps_dir.join(MAP_CLASSIFIER_CONFIG);
    let pin = |source| KernelLogError::Pin {
        path: path.clone(),
        source: Box::new(source),
    };
    let data = MapData::from_pin(&path).map_err(pin)?;
    let array = Array::try_from(Map::Array(data)).map_err(pin)?;
    Ok((path, array))
}

/// Whether the programs of the interface whose maps are in `maps_dir` log.
pub fn enabled(maps_dir: &Path) -> Result<bool, KernelLogError> {
    let (path, map) = config_map(maps_dir)?;
    let config = map.get(&0, 0).map_err(|source| KernelLogError::Config {
        what: "read",
        path,
        source: Box::new(source),
    })?;
    Ok(config.flags & CLS_FLAG_LOG != 0)
}

/// Switches logging on or off for the interface whose maps are in
/// `maps_dir`; returns whether it was on. A read-modify-write of the
/// config: the caller holds the state lock, as every writer of it does.
pub fn set_enabled(maps_dir: &Path, on: bool) -> Result<bool, KernelLogError> {
    let (path, mut map) = config_map(maps_dir)?;
    let err = |what, path: &PathBuf| {
        let path = path.clone();
        move |source| KernelLogError::Config {
            what,
            path,
            source: Box::new(source),
        }
    };
    let mut config = map.get(&0, 0).map_err(err("read", &path))?;
    let was = config.flags & CLS_FLAG_LOG != 0;
    if on {
        config.flags |= CLS_FLAG_LOG;
    } else {
        config.flags &= !CLS_FLAG_LOG;
    }
    map.set(0, config, 0).map_err(err("write", &path))?;
    Ok(was)
}
