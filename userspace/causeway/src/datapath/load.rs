//! The one load → pin → attach sequence of the data path, for the XDP
//! classifier and the TC egress program alike, and its one error type.
//!
//! ```text
//! create pin dirs → load the object (fresh maps, or the pinned ones)
//!   → pin the maps (fresh only) → fill them (fresh only)
//!   → load the program → pin it → attach it → take its bpf_link
//!   → read the link → pin the link
//! ```
//! The link is pinned last, so that a complete set of pins always means a
//! complete attachment. The caller removes the pins of a failed sequence.

use std::{fmt, path::Path};

use aya::{
    programs::{links::FdLink, tc, SchedClassifier, TcAttachType, Xdp, XdpMode},
    util::KernelVersion,
    Ebpf, EbpfLoader,
};
use bpf_maps::programs::{ProgramKind, ProgramSpec};

use super::{layout::IfacePaths, link::LinkState, DatapathError};
use crate::ebpf_object::EBPF_OBJECT;

/// Where the program is hooked in.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Hook {
    /// XDP on `ifindex` in `mode`.
    Xdp { ifindex: u32, mode: XdpMode },
    /// TC egress on the interface: a TCX link on Linux 6.6+, else a
    /// `bpf` filter on a `clsact` qdisc (see [`tc_uses_tcx`]).
    TcEgress { ifindex: u32 },
    /// TC ingress on the interface (the path steering program), attached
    /// the same two ways as [`Hook::TcEgress`].
    TcIngress { ifindex: u32 },
}

impl Hook {
    /// The TC direction of a TC hook.
    fn tc_direction(self) -> Option<TcAttachType> {
        match self {
            Self::TcEgress { .. } => Some(TcAttachType::Egress),
            Self::TcIngress { .. } => Some(TcAttachType::Ingress),
            Self::Xdp { .. } => None,
        }
    }
}

/// Whether TC programs attach as TCX links (Linux 6.6+, as aya decides):
/// older kernels get a netlink filter on a `clsact` qdisc instead.
pub(crate) fn tc_uses_tcx() -> bool {
    KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0))
}

/// A TC program attached as a netlink `bpf` filter on the egress hook of a
/// `clsact` qdisc (kernels without TCX). It has no bpf_link to pin: the
/// filter itself keeps the program attached after this process exits, and
/// these numbers find it again to detach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClsactFilter {
    pub ifindex: u32,
    pub prog_id: u32,
    pub priority: u16,
    pub handle: u32,
    /// The `clsact` qdisc was added for this filter (and goes with it).
    pub added_qdisc: bool,
    /// On the ingress hook (records written before it existed are egress).
    #[serde(default)]
    pub ingress: bool,
}

impl ClsactFilter {
    fn direction(&self) -> TcAttachType {
        if self.ingress {
            TcAttachType::Ingress
        } else {
            TcAttachType::Egress
        }
    }
}

/// What the sequence attached: a pinned bpf_link, or a clsact filter.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Attached {
    Link(LinkState),
    Clsact(ClsactFilter),
}

/// Which maps the loaded object uses.
pub(crate) enum MapSource<'a> {
    /// New maps, pinned in the interface's maps directory and then filled
    /// by the callback before the program is attached.
    Fresh(&'a mut dyn FnMut(&Path) -> Result<(), DatapathError>),
    /// The maps already pinned there (by the XDP attachment).
    Pinned,
}

/// A step of the sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadStep {
    CreatePinDirs,
    ListPinnedMaps,
    LoadObject,
    PinMaps,
    FillMaps,
    FindProgram,
    LoadProgram,
    PinProgram,
    AddClsact,
    Attach,
    TakeLink,
    ReadLink,
    PinLink,
    RemoveStalePins,
}

impl fmt::Display for LoadStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::CreatePinDirs => "creating the pin directories",
            Self::ListPinnedMaps => "listing the pinned maps",
            Self::LoadObject => "loading the eBPF object",
            Self::PinMaps => "pinning the maps",
            Self::FillMaps => "filling the maps",
            Self::FindProgram => "finding the program",
            Self::LoadProgram => "loading the program into the kernel",
            Self::PinProgram => "pinning the program",
            Self::AddClsact => "adding the clsact qdisc",
            Self::Attach => "attaching the program",
            Self::TakeLink => "taking the link",
            Self::ReadLink => "reading the link",
            Self::PinLink => "pinning the link",
            Self::RemoveStalePins => "removing stale pins",
        })
    }
}

/// Why loading, pinning or attaching a program failed: the step, the
/// program, the interface and the cause.
#[derive(Debug, thiserror::Error)]
#[error("{step} ({program} on {iface})")]
pub struct LoadError {
    pub step: LoadStep,
    pub program: &'static str,
    pub iface: String,
    #[source]
    pub cause: LoadCause,
}

/// The cause of a [`LoadError`].
#[derive(Debug, thiserror::Error)]
pub enum LoadCause {
    #[error("{path}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Object(Box<aya::EbpfError>),
    #[error("the eBPF object has no program of this name and kind")]
    MissingProgram,
    #[error(transparent)]
    Program(Box<aya::programs::ProgramError>),
    #[error(transparent)]
    Pin(Box<aya::pin::PinError>),
    #[error(transparent)]
    Link(Box<aya::programs::links::LinkError>),
    #[error("the kernel attached it without a bpf_link, so it cannot stay attached after this process exits (needs Linux {needs} or later)")]
    NotBpfLink { needs: &'static str },
    #[error(transparent)]
    Datapath(Box<DatapathError>),
    #[error(transparent)]
    Tc(Box<tc::TcError>),
}

impl From<LoadError> for DatapathError {
    fn from(e: LoadError) -> Self {
        DatapathError::Load(Box::new(e))
    }
}

/// Runs the sequence for `spec` on `iface`; returns the pinned link (or,
/// for TC on a kernel without TCX, the clsact filter).
pub(crate) fn load_pin_attach(
    paths: &IfacePaths,
    iface: &str,
    spec: &'static ProgramSpec,
    hook: Hook,
    maps: MapSource<'_>,
) -> Result<Attached, LoadError> {
    let fail = |step: LoadStep| {
        move |cause: LoadCause| LoadError {
            step,
            program: spec.name,
            iface: iface.to_string(),
            cause,
        }
    };
    for dir in [&paths.maps_dir, &paths.prog_dir, &paths.link_dir] {
        std::fs::create_dir_all(dir)
            .map_err(|source| LoadCause::Io {
                path: dir.clone(),
                source,
            })
            .map_err(fail(LoadStep::CreatePinDirs))?;
    }
    let mut ebpf = match maps {
        MapSource::Fresh(fill) => {
            let mut ebpf = EbpfLoader::new()
                .load(EBPF_OBJECT)
                .map_err(|e| fail(LoadStep::LoadObject)(LoadCause::Object(Box::new(e))))?;
            pin_maps(&mut ebpf, &paths.maps_dir).map_err(fail(LoadStep::PinMaps))?;
            fill(&paths.maps_dir)
                .map_err(|e| fail(LoadStep::FillMaps)(LoadCause::Datapath(Box::new(e))))?;
            ebpf
        }
        MapSource::Pinned => {
            let names =
                pinned_map_names(&paths.maps_dir).map_err(fail(LoadStep::ListPinnedMaps))?;
            let mut loader = EbpfLoader::new();
            for name in &names {
                loader.map_pin_path(name.as_str(), paths.maps_dir.join(name));
            }
            loader
                .load(EBPF_OBJECT)
                .map_err(|e| fail(LoadStep::LoadObject)(LoadCause::Object(Box::new(e))))?
        }
    };
    let program = ebpf
        .program_mut(spec.name)
        .ok_or(LoadCause::MissingProgram)
        .map_err(fail(LoadStep::FindProgram))?;
    let prog_path = paths.prog_dir.join(spec.name);
    let link_path = paths.link_dir.join(spec.name);
    let program_cause = |e| LoadCause::Program(Box::new(e));
    let pin_cause = |e| LoadCause::Pin(Box::new(e));
    let link = match (spec.kind, hook) {
        (ProgramKind::Xdp, Hook::Xdp { ifindex, mode }) => {
            let p: &mut Xdp = program
                .try_into()
                .map_err(|_| fail(LoadStep::FindProgram)(LoadCause::MissingProgram))?;
            p.load()
                .map_err(program_cause)
                .map_err(fail(LoadStep::LoadProgram))?;
            p.pin(&prog_path)
                .map_err(pin_cause)
                .map_err(fail(LoadStep::PinProgram))?;
            let id = p
                .attach_to_if_index(ifindex, mode)
                .map_err(program_cause)
                .map_err(fail(LoadStep::Attach))?;
            let link = p
                .take_link(id)
                .map_err(program_cause)
                .map_err(fail(LoadStep::TakeLink))?;
            FdLink::try_from(link)
                .map_err(|_| fail(LoadStep::TakeLink)(LoadCause::NotBpfLink { needs: "5.9" }))?
        }
        (
            ProgramKind::SchedClassifier,
            Hook::TcEgress { ifindex } | Hook::TcIngress { ifindex },
        ) => {
            let direction = hook
                .tc_direction()
                .ok_or_else(|| fail(LoadStep::FindProgram)(LoadCause::MissingProgram))?;
            let p: &mut SchedClassifier = program
                .try_into()
                .map_err(|_| fail(LoadStep::FindProgram)(LoadCause::MissingProgram))?;
            p.load()
                .map_err(program_cause)
                .map_err(fail(LoadStep::LoadProgram))?;
            p.pin(&prog_path)
                .map_err(pin_cause)
                .map_err(fail(LoadStep::PinProgram))?;
            if !tc_uses_tcx() {
                return attach_clsact(p, iface, ifindex, direction)
                    .map(Attached::Clsact)
                    .map_err(|(step, cause)| fail(step)(cause));
            }
            let id = p
                .attach(iface, direction)
                .map_err(program_cause)
                .map_err(fail(LoadStep::Attach))?;
            let link = p
                .take_link(id)
                .map_err(program_cause)
                .map_err(fail(LoadStep::TakeLink))?;
            FdLink::try_from(link).map_err(|_| {
                fail(LoadStep::TakeLink)(LoadCause::NotBpfLink { needs: "6.6 (TCX)" })
            })?
        }
        _ => return Err(fail(LoadStep::FindProgram)(LoadCause::MissingProgram)),
    };
    let state = read_link(&link, &link_path, hook)
        .map_err(|e| fail(LoadStep::ReadLink)(LoadCause::Datapath(Box::new(e))))?;
    link.pin(&link_path)
        .map_err(pin_cause)
        .map_err(fail(LoadStep::PinLink))?;
    Ok(Attached::Link(state))
}

/// Attaches `p` as a `bpf` filter on the `direction` hook of `iface`'s
/// clsact qdisc, adding the qdisc if it is not there.
fn attach_clsact(
    p: &mut SchedClassifier,
    iface: &str,
    ifindex: u32,
    direction: TcAttachType,
) -> Result<ClsactFilter, (LoadStep, LoadCause)> {
    let has_clsact = super::tc::has_clsact(iface);
    if !has_clsact {
        tc::qdisc_add_clsact(iface)
            .map_err(|e| (LoadStep::AddClsact, LoadCause::Tc(Box::new(e))))?;
    }
    let undo_qdisc = |step, cause| {
        if !has_clsact {
            super::tc::remove_clsact(iface);
        }
        (step, cause)
    };
    let program_cause = |e| LoadCause::Program(Box::new(e));
    let prog_id = p
        .info()
        .map(|i| i.id())
        .map_err(|e| undo_qdisc(LoadStep::Attach, program_cause(e)))?;
    let id = p
        .attach(iface, direction)
        .map_err(|e| undo_qdisc(LoadStep::Attach, program_cause(e)))?;
    let link = p
        .take_link(id)
        .map_err(|e| undo_qdisc(LoadStep::TakeLink, program_cause(e)))?;
    let (priority, handle) = match (link.priority(), link.handle()) {
        (Ok(priority), Ok(handle)) => (priority, u32::from(handle)),
        (Err(e), _) | (_, Err(e)) => return Err(undo_qdisc(LoadStep::TakeLink, program_cause(e))),
    };
    // Dropping the link would detach the filter: it must outlive this
    // process (as a pinned link does), and `detach_clsact` removes it.
    std::mem::forget(link);
    Ok(ClsactFilter {
        ifindex,
        prog_id,
        priority,
        handle,
        added_qdisc: !has_clsact,
        ingress: matches!(direction, TcAttachType::Ingress),
    })
}

/// Removes the clsact filter `f` from `iface` (and its qdisc, if it was
/// added for it). A filter that is already gone (with its interface) is
/// not an error.
pub(crate) fn detach_clsact(iface: &str, f: &ClsactFilter) -> Result<(), LoadCause> {
    let Ok(link) = tc::SchedClassifierLink::attached(
        iface,
        f.direction(),
        f.priority,
        tc::TcHandle::from(f.handle),
        None,
    ) else {
        return Ok(()); // the interface is gone, and the filter with it
    };
    let detached = aya::programs::Link::detach(link);
    if f.added_qdisc {
        super::tc::remove_clsact(iface);
    }
    match detached {
        Err(e) if super::tc::filter_present(iface, f.prog_id, f.ingress) => {
            Err(LoadCause::Program(Box::new(e)))
        }
        _ => Ok(()),
    }
}

/// The link's ids; the ifindex of an XDP link from the kernel (fdinfo),
/// of a TC link the one it was attached to.
fn read_link(link: &FdLink, path: &Path, hook: Hook) -> Result<LinkState, DatapathError> {
    match hook {
        Hook::Xdp { .. } => super::link::read(link, path),
        Hook::TcEgress { ifindex } | Hook::TcIngress { ifindex } => {
            let info = link.info().map_err(|source| DatapathError::Link {
                what: format!("reading the link info of {}", path.display()),
                source: Box::new(source),
            })?;
            Ok(LinkState {
                link_id: info.id(),
                prog_id: info.program_id(),
                ifindex,
            })
        }
    }
}

/// Pins every map but the object's global data (`.data`, `.rodata`,
/// `.bss`: aya-log's level lives there), which bpffs cannot name (it
/// refuses dots) and which each loaded object keeps a copy of.
fn pin_maps(ebpf: &mut Ebpf, dir: &Path) -> Result<(), LoadCause> {
    for (name, map) in ebpf.maps() {
        if name.starts_with('.') {
            continue;
        }
        map.pin(dir.join(name))
            .map_err(|e| LoadCause::Pin(Box::new(e)))?;
    }
    Ok(())
}

fn pinned_map_names(dir: &Path) -> Result<Vec<String>, LoadCause> {
    let io = |source| LoadCause::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        if let Some(name) = entry.map_err(io)?.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

/// Removes the pins of `spec` (its link and program) if present: the
/// kernel detaches the link when its last reference goes.
pub(crate) fn remove_program_pins(
    paths: &IfacePaths,
    iface: &str,
    spec: &'static ProgramSpec,
) -> Result<(), LoadError> {
    for path in [
        paths.link_dir.join(spec.name),
        paths.prog_dir.join(spec.name),
    ] {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(LoadError {
                    step: LoadStep::RemoveStalePins,
                    program: spec.name,
                    iface: iface.to_string(),
                    cause: LoadCause::Io { path, source: e },
                })
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_step_the_program_and_the_interface() {
        let e = LoadError {
            step: LoadStep::Attach,
            program: bpf_maps::programs::TC_EGRESS,
            iface: "veth0".into(),
            cause: LoadCause::NotBpfLink { needs: "6.6 (TCX)" },
        };
        let text = e.to_string();
        assert_eq!(text, "attaching the program (causeway_tc_egress on veth0)");
        let cause = std::error::Error::source(&e).map(ToString::to_string);
        assert!(cause.is_some_and(|c| c.ends_with("(needs Linux 6.6 (TCX) or later)")));
    }
}
