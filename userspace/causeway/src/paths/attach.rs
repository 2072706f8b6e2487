//! Attaching the steering program to a gateway's LAN-facing interface
//! (TC ingress: a TCX link on Linux 6.6+, a clsact filter before), with its
//! own maps, pinned under `Layout::steer`; and detaching it.

use bpf_maps::{paths::MAX_PATHS, programs::TC_STEER_SPEC};

use crate::datapath::{
    attach::remove_pins,
    bpffs,
    layout::{IfacePaths, Layout},
    load::{self, Attached, ClsactFilter, Hook, LoadError, MapSource},
    netns::NetnsScope,
    state, DatapathError, TcMode,
};

use super::maps::{PathMaps, PathMapsError};

/// What `attach` did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SteerAttached {
    pub iface: String,
    pub prog_id: u32,
    /// The TCX link's id (0 for a clsact filter).
    pub link_id: u32,
    pub mode: TcMode,
    /// (path, mark) as configured, every path up.
    pub paths: Vec<(u32, u32)>,
}

/// Why attaching or detaching the steering program failed.
#[derive(Debug, thiserror::Error)]
pub enum SteerError {
    #[error("path {path}: {reason}")]
    BadPath { path: u32, reason: String },
    #[error("path steering is already attached to {iface} in the {scope}; `causeway paths set` changes its paths, `causeway paths detach` removes it")]
    AlreadyAttached { iface: String, scope: String },
    #[error("path steering is not attached to {iface} in the {scope}")]
    NotAttached { iface: String, scope: String },
    #[error(transparent)]
    Datapath(#[from] DatapathError),
    #[error(transparent)]
    Load(#[from] Box<LoadError>),
    #[error(transparent)]
    Maps(#[from] PathMapsError),
}

fn clsact_record(paths: &IfacePaths) -> std::path::PathBuf {
    paths.state_dir.join("steer-clsact.json")
}

/// Whether steering is attached to `iface` (its link or its clsact record).
pub fn is_attached(paths: &IfacePaths) -> bool {
    paths.link_dir.join(TC_STEER_SPEC.name).exists() || clsact_record(paths).exists()
}

/// Checks the (path, mark) list: ids in range and unique, marks non-zero.
fn validate(paths: &[(u32, u32)]) -> Result<(), SteerError> {
    for (i, &(path, mark)) in paths.iter().enumerate() {
        let bad = |reason: &str| SteerError::BadPath {
            path,
            reason: reason.to_string(),
        };
        if path >= MAX_PATHS {
            return Err(bad(&format!(
                "out of range (paths are 0-{})",
                MAX_PATHS - 1
            )));
        }
        if mark == 0 {
            return Err(bad("mark 0 is the unmarked default; give a non-zero mark"));
        }
        if paths[..i].iter().any(|&(p, _)| p == path) {
            return Err(bad("given twice"));
        }
    }
    Ok(())
}

/// Attaches the steering program to `iface` with `paths` (path, mark), all
/// up and with no flows yet. Nothing is left behind when it fails.
pub fn attach(
    layout: &Layout,
    scope: &NetnsScope,
    iface: &str,
    paths: &[(u32, u32)],
) -> Result<SteerAttached, SteerError> {
    validate(paths)?;
    let dirs = layout.steer(scope, iface)?;
    let _lock = state::StateLock::acquire(&layout.lock_file())?;
    if is_attached(&dirs) {
        return Err(SteerError::AlreadyAttached {
            iface: iface.to_string(),
            scope: scope.to_string(),
        });
    }
    let ifindex =
        nix::net::if_::if_nametoindex(iface).map_err(|_| DatapathError::UnknownInterface {
            name: iface.to_string(),
            scope: scope.to_string(),
        })?;
    bpffs::ensure(&layout.pin_root)?;
    let mut fill = |dir: &std::path::Path| -> Result<(), DatapathError> {
        let mut maps = PathMaps::open_pinned(dir).map_err(|e| DatapathError::Bpffs {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        for &(path, mark) in paths {
            maps.set_path(path, mark, true)
                .map_err(|e| DatapathError::Bpffs {
                    path: dir.to_path_buf(),
                    reason: e.to_string(),
                })?;
        }
        Ok(())
    };
    let attached = load::load_pin_attach(
        &dirs,
        iface,
        &TC_STEER_SPEC,
        Hook::TcIngress { ifindex },
        MapSource::Fresh(&mut fill),
    );
    let done = attached
        .map_err(Box::new)
        .map_err(SteerError::from)
        .and_then(|a| match a {
            Attached::Link(l) => Ok((l.prog_id, l.link_id, TcMode::Tcx)),
            Attached::Clsact(f) => {
                let recorded = std::fs::create_dir_all(&dirs.state_dir)
                    .map_err(|source| DatapathError::io("create", &dirs.state_dir, source))
                    .and_then(|()| state::write_json(&clsact_record(&dirs), &f));
                match recorded {
                    Ok(()) => Ok((f.prog_id, 0, TcMode::Clsact)),
                    Err(e) => {
                        let _ = load::detach_clsact(iface, &f);
                        Err(e.into())
                    }
                }
            }
        });
    match done {
        Ok((prog_id, link_id, mode)) => Ok(SteerAttached {
            iface: iface.to_string(),
            prog_id,
            link_id,
            mode,
            paths: paths.to_vec(),
        }),
        Err(e) => {
            // The load error is the one to report.
            let _ = remove_pins(&dirs);
            Err(e)
        }
    }
}

/// Detaches the steering program from `iface` and removes its pins, maps
/// and records. Works when the interface is gone.
pub fn detach(layout: &Layout, scope: &NetnsScope, iface: &str) -> Result<(), SteerError> {
    let dirs = layout.steer(scope, iface)?;
    let _lock = state::StateLock::acquire(&layout.lock_file())?;
    if !dirs.pin_dir.exists() && !dirs.state_dir.exists() {
        return Err(SteerError::NotAttached {
            iface: iface.to_string(),
            scope: scope.to_string(),
        });
    }
    if let Ok(Some(filter)) = state::read_json::<ClsactFilter>(&clsact_record(&dirs)) {
        load::detach_clsact(iface, &filter).map_err(|cause| {
            Box::new(LoadError {
                step: load::LoadStep::RemoveStalePins,
                program: TC_STEER_SPEC.name,
                iface: iface.to_string(),
                cause,
            })
        })?;
    }
    remove_pins(&dirs)?;
    // The `steer` roots go with their last attachment (only when empty).
    for root in [dirs.scope_dir.parent(), dirs.state_scope_dir.parent()]
        .into_iter()
        .flatten()
    {
        let _ = std::fs::remove_dir(root);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_lists_are_checked_before_anything_is_loaded() {
        assert!(validate(&[(0, 0x1000), (1, 0x1001)]).is_ok());
        let e = validate(&[(0, 0x1000), (0, 0x1001)]).unwrap_err();
        assert_eq!(e.to_string(), "path 0: given twice");
        assert!(matches!(
            validate(&[(MAX_PATHS, 1)]),
            Err(SteerError::BadPath { .. })
        ));
        assert!(validate(&[(2, 0)])
            .unwrap_err()
            .to_string()
            .contains("mark 0"));
    }
}
