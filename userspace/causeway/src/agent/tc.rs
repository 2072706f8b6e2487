//! The TC egress program on an attached interface: attached as a TCX link
//! (Linux 6.6+) that shares the maps pinned by the XDP attachment (so the
//! clock configuration and the classifier rules are the same objects), and
//! pinned beside the XDP program so that a restarted agent adopts it:
//!
//! ```text
//! <pin dir>/prog/causeway_tc_egress
//! <pin dir>/link/causeway_tc_egress
//! ```
//! `causeway detach` removes these pins with the others, which detaches it.

use std::path::{Path, PathBuf};

use aya::{
    programs::{links::FdLink, SchedClassifier, TcAttachType},
    EbpfLoader,
};

use crate::{
    datapath::{link, IfacePaths},
    ebpf_object::EBPF_OBJECT,
};

/// The TC egress program's name in the object and in the pins.
pub const TC_PROGRAM: &str = "causeway_tc_egress";

/// Why the TC program could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum TcError {
    #[error("listing the pinned maps in {dir}: {source}")]
    Maps {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("loading the eBPF object with the maps pinned in {dir}: {source}")]
    Load {
        dir: PathBuf,
        #[source]
        source: Box<aya::EbpfError>,
    },
    #[error("{what} ({iface}): {source}")]
    Program {
        what: &'static str,
        iface: String,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("pinning {path}: {source}")]
    Pin {
        path: PathBuf,
        #[source]
        source: aya::pin::PinError,
    },
    #[error("the TC link is not a bpf_link (TCX needs Linux 6.6 or later)")]
    NotTcx,
    #[error("removing the stale pin {path}: {source}")]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The TC egress attachment of one interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TcAttached {
    pub link_id: u32,
    pub prog_id: u32,
    /// A live pinned link was found and kept.
    pub adopted: bool,
}

fn link_pin(paths: &IfacePaths) -> PathBuf {
    paths.link_dir.join(TC_PROGRAM)
}

fn prog_pin(paths: &IfacePaths) -> PathBuf {
    paths.prog_dir.join(TC_PROGRAM)
}

/// Adopts the pinned TC egress link of `iface` if it is live on `ifindex`,
/// else attaches the program afresh (the XDP attachment must exist: its
/// pinned maps are reused).
pub fn ensure(paths: &IfacePaths, iface: &str, ifindex: u32) -> Result<TcAttached, TcError> {
    if let Ok(state) = link::read_pinned(&link_pin(paths)) {
        if state.ifindex == ifindex {
            return Ok(TcAttached {
                link_id: state.link_id,
                prog_id: state.prog_id,
                adopted: true,
            });
        }
    }
    for stale in [link_pin(paths), prog_pin(paths)] {
        match std::fs::remove_file(&stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(TcError::Remove {
                    path: stale,
                    source: e,
                })
            }
            _ => {}
        }
    }
    attach_fresh(paths, iface)
}

fn attach_fresh(paths: &IfacePaths, iface: &str) -> Result<TcAttached, TcError> {
    let names = pinned_map_names(&paths.maps_dir)?;
    let mut loader = EbpfLoader::new();
    for name in &names {
        loader.map_pin_path(name.as_str(), paths.maps_dir.join(name));
    }
    let mut ebpf = loader.load(EBPF_OBJECT).map_err(|source| TcError::Load {
        dir: paths.maps_dir.clone(),
        source: Box::new(source),
    })?;
    let program_err = |what: &'static str| {
        let iface = iface.to_string();
        move |source| TcError::Program {
            what,
            iface,
            source,
        }
    };
    let prog: &mut SchedClassifier = ebpf
        .program_mut(TC_PROGRAM)
        .ok_or(aya::programs::ProgramError::NotLoaded)
        .map_err(program_err("finding the TC program"))?
        .try_into()
        .map_err(program_err("the TC program has the wrong type"))?;
    prog.load().map_err(program_err("loading the TC program"))?;
    let prog_path = prog_pin(paths);
    prog.pin(&prog_path).map_err(|source| TcError::Pin {
        path: prog_path,
        source,
    })?;
    let id = prog
        .attach(iface, TcAttachType::Egress)
        .map_err(program_err("attaching the TC program to egress"))?;
    let link = prog
        .take_link(id)
        .map_err(program_err("taking the TC link"))?;
    let link: FdLink = link.try_into().map_err(|_| TcError::NotTcx)?;
    let link_path = link_pin(paths);
    let info = link.info().ok();
    link.pin(&link_path).map_err(|source| TcError::Pin {
        path: link_path,
        source,
    })?;
    Ok(TcAttached {
        link_id: info.as_ref().map_or(0, |i| i.id()),
        prog_id: info.as_ref().map_or(0, |i| i.program_id()),
        adopted: false,
    })
}

fn pinned_map_names(dir: &Path) -> Result<Vec<String>, TcError> {
    let entries = std::fs::read_dir(dir).map_err(|source| TcError::Maps {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut names = Vec::new();
    for e in entries {
        let e = e.map_err(|source| TcError::Maps {
            dir: dir.to_path_buf(),
            source,
        })?;
        if let Some(name) = e.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    Ok(names)
}
