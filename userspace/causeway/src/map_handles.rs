//! Opening handles on the maps of Causeway's eBPF object, shared by the
//! classifier, shaper and clock map modules: a second handle on a map of
//! a loaded object, or a map pinned in a directory under its own name.
//! Each module converts [`OpenMapError`] into its own error type.

use std::path::{Path, PathBuf};

use aya::{
    maps::{Map, MapData, MapError},
    Ebpf,
};

/// A map handle could not be opened.
#[derive(Debug)]
pub(crate) enum OpenMapError {
    /// The loaded object has no map `name`.
    Missing { name: &'static str },
    /// Opening the pin at `path` of the map `name` failed.
    Pin {
        name: &'static str,
        path: PathBuf,
        source: MapError,
    },
    /// Any other failure on the map `name`.
    Map {
        name: &'static str,
        source: MapError,
    },
}

/// Opens a second handle on the map `name` of a loaded object, leaving the
/// object's own handle in place (so that it can still be pinned or used).
pub(crate) fn reopen(ebpf: &Ebpf, name: &'static str) -> Result<Map, OpenMapError> {
    let map = ebpf.map(name).ok_or(OpenMapError::Missing { name })?;
    let (Map::Array(data)
    | Map::PerCpuArray(data)
    | Map::HashMap(data)
    | Map::LruHashMap(data)
    | Map::LpmTrie(data)) = map
    else {
        return Err(OpenMapError::Map {
            name,
            source: MapError::InvalidMapType { map_type: 0 },
        });
    };
    let err = |source| OpenMapError::Map { name, source };
    let id = data.info().map_err(err)?.id();
    MapData::from_id(id)
        .and_then(Map::from_map_data)
        .map_err(err)
}

/// Opens the map pinned as `<dir>/<name>`.
pub(crate) fn open_pinned(dir: &Path, name: &'static str) -> Result<Map, OpenMapError> {
    let path = dir.join(name);
    let data =
        MapData::from_pin(&path).map_err(|source| OpenMapError::Pin { name, path, source })?;
    Map::from_map_data(data).map_err(|source| OpenMapError::Map { name, source })
}
