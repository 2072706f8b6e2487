//! The TC egress program on an attached interface. It shares the maps
//! pinned by the XDP attachment (so the clock configuration and the
//! classifier rules are the same objects) and is attached in one of two
//! modes, chosen by the kernel ([`load::tc_uses_tcx`]):
//!
//! - **TCX** (Linux 6.6+): a bpf_link, pinned beside the XDP program so
//!   that a restarted agent adopts it:
//!   ```text
//!   <pin dir>/prog/causeway_tc_egress
//!   <pin dir>/link/causeway_tc_egress
//!   ```
//! - **clsact** (older kernels, e.g. Debian bookworm's 6.1): a `bpf` filter
//!   on the egress hook of a `clsact` qdisc (added if missing). There is no
//!   link to pin; the filter's priority and handle are recorded in
//!   `<state dir>/tc-clsact.json` so that it can be adopted and detached.
//!
//! Detaching the interface removes these pins and the filter, which
//! detaches it.

use std::process::Command;

use bpf_maps::programs::TC_EGRESS_SPEC;

use super::{
    layout::IfacePaths,
    link,
    load::{self, Attached, ClsactFilter, Hook, LoadCause, LoadError, LoadStep, MapSource},
    state,
};

/// How the TC egress program is attached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TcMode {
    /// A TCX bpf_link (Linux 6.6+).
    #[default]
    Tcx,
    /// A `bpf` filter on a `clsact` qdisc (kernels without TCX).
    Clsact,
}

impl std::fmt::Display for TcMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Tcx => "tcx",
            Self::Clsact => "clsact",
        })
    }
}

/// The TC egress attachment of one interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TcAttached {
    /// The TCX link's id (0 for a clsact filter, which has no link).
    pub link_id: u32,
    pub prog_id: u32,
    /// A live attachment was found and kept.
    pub adopted: bool,
    pub mode: TcMode,
}

fn clsact_record(paths: &IfacePaths) -> std::path::PathBuf {
    paths.state_dir.join("tc-clsact.json")
}

/// The live TC egress attachment of `iface`, if its link is pinned and
/// attached to `ifindex` (TCX), or its clsact filter is recorded for
/// `ifindex` and its program still pinned.
pub fn live(paths: &IfacePaths, ifindex: u32) -> Option<TcAttached> {
    if let Ok(state) = link::read_pinned(&paths.link_dir.join(TC_EGRESS_SPEC.name)) {
        return (state.ifindex == ifindex).then_some(TcAttached {
            link_id: state.link_id,
            prog_id: state.prog_id,
            adopted: true,
            mode: TcMode::Tcx,
        });
    }
    let filter: ClsactFilter = state::read_json(&clsact_record(paths)).ok().flatten()?;
    let pinned = paths.prog_dir.join(TC_EGRESS_SPEC.name).exists();
    (filter.ifindex == ifindex && pinned).then_some(TcAttached {
        link_id: 0,
        prog_id: filter.prog_id,
        adopted: true,
        mode: TcMode::Clsact,
    })
}

/// The mode of the recorded TC attachment of an interface, if any.
pub fn mode(paths: &IfacePaths) -> Option<TcMode> {
    if paths.link_dir.join(TC_EGRESS_SPEC.name).exists() {
        Some(TcMode::Tcx)
    } else if clsact_record(paths).exists() {
        Some(TcMode::Clsact)
    } else {
        None
    }
}

/// Adopts the TC egress attachment of `iface` if it is live on `ifindex`,
/// else attaches the program afresh (the XDP attachment must exist: its
/// pinned maps are reused).
pub fn ensure(paths: &IfacePaths, iface: &str, ifindex: u32) -> Result<TcAttached, LoadError> {
    if let Some(live) = live(paths, ifindex) {
        return Ok(live);
    }
    remove(paths, iface)?;
    let result = load::load_pin_attach(
        paths,
        iface,
        &TC_EGRESS_SPEC,
        Hook::TcEgress { ifindex },
        MapSource::Pinned,
    )
    .and_then(|attached| match attached {
        Attached::Link(state) => Ok(TcAttached {
            link_id: state.link_id,
            prog_id: state.prog_id,
            adopted: false,
            mode: TcMode::Tcx,
        }),
        Attached::Clsact(filter) => {
            let record = std::fs::create_dir_all(&paths.state_dir)
                .map_err(|source| LoadCause::Io {
                    path: paths.state_dir.clone(),
                    source,
                })
                .and_then(|()| {
                    state::write_json(&clsact_record(paths), &filter)
                        .map_err(|e| LoadCause::Datapath(Box::new(e)))
                });
            if let Err(cause) = record {
                let _ = load::detach_clsact(iface, &filter);
                return Err(error(iface, LoadStep::PinLink, cause));
            }
            Ok(TcAttached {
                link_id: 0,
                prog_id: filter.prog_id,
                adopted: false,
                mode: TcMode::Clsact,
            })
        }
    });
    if result.is_err() {
        // Leave no half-made TC attachment; the load error is the one to report.
        let _ = load::remove_program_pins(paths, iface, &TC_EGRESS_SPEC);
    }
    result
}

/// Detaches the TC egress program of `iface`: removes its clsact filter
/// (if it has one) and its pins.
pub fn remove(paths: &IfacePaths, iface: &str) -> Result<(), LoadError> {
    let record = clsact_record(paths);
    if let Ok(Some(filter)) = state::read_json::<ClsactFilter>(&record) {
        load::detach_clsact(iface, &filter)
            .map_err(|c| error(iface, LoadStep::RemoveStalePins, c))?;
    }
    state::remove_if_present(&record).map_err(|e| {
        error(
            iface,
            LoadStep::RemoveStalePins,
            LoadCause::Datapath(Box::new(e)),
        )
    })?;
    load::remove_program_pins(paths, iface, &TC_EGRESS_SPEC)
}

fn error(iface: &str, step: LoadStep, cause: LoadCause) -> LoadError {
    LoadError {
        step,
        program: TC_EGRESS_SPEC.name,
        iface: iface.to_string(),
        cause,
    }
}

/// `tc -j <args>` in the current network namespace, if it succeeds.
fn tc_json(args: &[&str]) -> Option<serde_json::Value> {
    let out = Command::new("tc").arg("-j").args(args).output().ok()?;
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

/// Whether `iface` has a clsact qdisc.
pub(crate) fn has_clsact(iface: &str) -> bool {
    tc_json(&["qdisc", "show", "dev", iface]).is_some_and(|v| qdiscs_have_clsact(&v))
}

fn qdiscs_have_clsact(qdiscs: &serde_json::Value) -> bool {
    qdiscs
        .as_array()
        .is_some_and(|a| a.iter().any(|q| q["kind"] == "clsact"))
}

/// Removes `iface`'s clsact qdisc (and every filter on it); best effort.
pub(crate) fn remove_clsact(iface: &str) {
    let _ = Command::new("tc")
        .args(["qdisc", "del", "dev", iface, "clsact"])
        .output();
}

/// Whether a `bpf` filter running program `prog_id` is on `iface`'s egress
/// (or, with `ingress`, ingress) hook.
pub(crate) fn filter_present(iface: &str, prog_id: u32, ingress: bool) -> bool {
    let hook = if ingress { "ingress" } else { "egress" };
    tc_json(&["filter", "show", "dev", iface, hook])
        .is_some_and(|v| filters_run_program(&v, prog_id))
}

fn filters_run_program(filters: &serde_json::Value, prog_id: u32) -> bool {
    filters.as_array().is_some_and(|a| {
        a.iter()
            .any(|f| f["options"]["prog"]["id"].as_u64() == Some(u64::from(prog_id)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_json_output_is_read_for_clsact_qdiscs_and_bpf_filters() {
        let qdiscs = serde_json::json!([
            {"kind": "noqueue", "handle": "0:"},
            {"kind": "clsact", "handle": "ffff:", "parent": "ffff:fff1"}
        ]);
        assert!(qdiscs_have_clsact(&qdiscs));
        assert!(!qdiscs_have_clsact(&serde_json::json!([{"kind": "htb"}])));
        let filters = serde_json::json!([
            {"protocol": "all", "pref": 49152, "kind": "bpf"},
            {"protocol": "all", "pref": 49152, "kind": "bpf", "options": {
                "handle": "0x1", "bpf_name": "causeway_tc_egress", "direct-action": true,
                "prog": {"id": 42, "tag": "ab", "jited": 1}}}
        ]);
        assert!(filters_run_program(&filters, 42));
        assert!(!filters_run_program(&filters, 43));
    }

    #[test]
    fn modes_print_as_status_shows_them() {
        assert_eq!(TcMode::Tcx.to_string(), "tcx");
        assert_eq!(TcMode::Clsact.to_string(), "clsact");
        assert_eq!(
            serde_json::to_value(TcMode::Clsact).ok(),
            Some(serde_json::json!("clsact"))
        );
    }
}
