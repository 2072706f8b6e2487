//! The TC egress program on an attached interface: attached as a TCX link
//! (Linux 6.6+) that shares the maps pinned by the XDP attachment (so the
//! clock configuration and the classifier rules are the same objects), and
//! pinned beside the XDP program so that a restarted agent adopts it:
//!
//! ```text
//! <pin dir>/prog/causeway_tc_egress
//! <pin dir>/link/causeway_tc_egress
//! ```
//! Detaching the interface removes these pins with the others, which
//! detaches it.

use bpf_maps::programs::TC_EGRESS_SPEC;

use super::{
    layout::IfacePaths,
    link,
    load::{self, Hook, LoadError, MapSource},
};

/// The TC egress attachment of one interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TcAttached {
    pub link_id: u32,
    pub prog_id: u32,
    /// A live pinned link was found and kept.
    pub adopted: bool,
}

/// The live TC egress link of `iface`, if one is pinned and attached to
/// `ifindex`.
pub fn live(paths: &IfacePaths, ifindex: u32) -> Option<TcAttached> {
    let state = link::read_pinned(&paths.link_dir.join(TC_EGRESS_SPEC.name)).ok()?;
    (state.ifindex == ifindex).then_some(TcAttached {
        link_id: state.link_id,
        prog_id: state.prog_id,
        adopted: true,
    })
}

/// Adopts the pinned TC egress link of `iface` if it is live on `ifindex`,
/// else attaches the program afresh (the XDP attachment must exist: its
/// pinned maps are reused).
pub fn ensure(paths: &IfacePaths, iface: &str, ifindex: u32) -> Result<TcAttached, LoadError> {
    if let Some(live) = live(paths, ifindex) {
        return Ok(live);
    }
    load::remove_program_pins(paths, iface, &TC_EGRESS_SPEC)?;
    let result = load::load_pin_attach(
        paths,
        iface,
        &TC_EGRESS_SPEC,
        Hook::TcEgress { ifindex },
        MapSource::Pinned,
    );
    match result {
        Ok(state) => Ok(TcAttached {
            link_id: state.link_id,
            prog_id: state.prog_id,
            adopted: false,
        }),
        Err(e) => {
            // Leave no half-made TC attachment; the load error is the one to report.
            let _ = load::remove_program_pins(paths, iface, &TC_EGRESS_SPEC);
            Err(e)
        }
    }
}

/// Detaches the TC egress program of `iface` (removes its pins).
pub fn remove(paths: &IfacePaths, iface: &str) -> Result<(), LoadError> {
    load::remove_program_pins(paths, iface, &TC_EGRESS_SPEC)
}
