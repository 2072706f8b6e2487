//! Attaching the XDP classifier to an interface, re-adopting an existing
//! attachment through its pins, and detaching it with every pin it made.

use std::{path::Path, str::FromStr};

use aya::programs::{ProgramInfo, XdpMode};
use bpf_maps::programs::XDP_CLASSIFIER_SPEC;
use serde::{Deserialize, Serialize};

use super::{
    bpffs,
    layout::{IfacePaths, Layout},
    link::{self, LinkState},
    load::{self, Hook, MapSource},
    netns::NetnsScope,
    rules,
    state::{self, AttachRecord},
    DatapathError,
};
use crate::classifier::RuleSet;

/// How the XDP program is attached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    /// Native if the driver supports it, else generic (the kernel decides).
    #[default]
    Auto,
    /// Generic XDP, in the kernel stack after the skb is built.
    Skb,
    /// Native XDP, in the driver.
    Driver,
}

impl AttachMode {
    fn xdp_mode(self) -> XdpMode {
        match self {
            Self::Auto => XdpMode::Default,
            Self::Skb => XdpMode::Skb,
            Self::Driver => XdpMode::Driver,
        }
    }
}

impl FromStr for AttachMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "skb" | "generic" => Ok(Self::Skb),
            "driver" | "native" | "drv" => Ok(Self::Driver),
            _ => Err(format!("unknown XDP mode '{s}': use auto, skb or driver")),
        }
    }
}

impl std::fmt::Display for AttachMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Skb => "skb",
            Self::Driver => "driver",
        })
    }
}

/// The result of [`attach`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Attached {
    pub iface: String,
    pub ifindex: u32,
    pub mode: AttachMode,
    pub prog_id: u32,
    pub link_id: u32,
    /// An existing, live attachment was found and kept.
    pub adopted: bool,
    /// Pins of a dead attachment (interface gone or half-made) were removed first.
    pub replaced_stale: Option<String>,
    /// Classifier generation after applying the rules, if rules were given.
    pub generation: Option<u64>,
    /// Something the operator should know about an adopted attachment.
    pub warning: Option<String>,
}

/// What the pins of an interface say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PinState {
    Absent,
    /// Attached to `ifindex` with these ids; program and maps are pinned.
    Live(LinkState),
    /// Pins exist but do not form a working attachment.
    Stale(String),
}

/// Reads the pins of `paths`; `ifindex` is the interface the link should
/// be attached to, when known.
pub fn inspect(paths: &IfacePaths, ifindex: Option<u32>) -> PinState {
    if !paths.pin_dir.exists() {
        return PinState::Absent;
    }
    let link = match link::read_pinned(&paths.xdp_link()) {
        Ok(link) => link,
        Err(e) => return PinState::Stale(format!("no usable link pin: {e}")),
    };
    if link.ifindex == 0 {
        return PinState::Stale(format!(
            "link {} is defunct: its interface was deleted",
            link.link_id
        ));
    }
    if let Some(expected) = ifindex.filter(|i| *i != link.ifindex) {
        return PinState::Stale(format!(
            "link {} is attached to ifindex {}, the interface now has ifindex {expected}",
            link.link_id, link.ifindex
        ));
    }
    match ProgramInfo::from_pin(paths.xdp_prog()) {
        Ok(info) if info.id() == link.prog_id => {}
        Ok(info) => {
            return PinState::Stale(format!(
                "pinned program {} is not the linked program {}",
                info.id(),
                link.prog_id
            ))
        }
        Err(e) => return PinState::Stale(format!("no usable program pin: {e}")),
    }
    if let Err(e) = rules::config(&paths.maps_dir) {
        return PinState::Stale(format!("classifier maps are not pinned: {e}"));
    }
    PinState::Live(link)
}

/// Attaches the classifier to `iface` (in the current network namespace)
/// and pins it, or adopts the live attachment already pinned there. With
/// `rules`, the rules are in the maps before the first frame is seen (or,
/// when adopting, replace the current ones atomically).
pub fn attach(
    layout: &Layout,
    scope: &NetnsScope,
    iface: &str,
    mode: AttachMode,
    rules: Option<&RuleSet>,
) -> Result<Attached, DatapathError> {
    let paths = layout.iface(scope, iface)?;
    let ifindex =
        nix::net::if_::if_nametoindex(iface).map_err(|_| DatapathError::UnknownInterface {
            name: iface.to_string(),
            scope: scope.to_string(),
        })?;
    let mut replaced_stale = None;
    match inspect(&paths, Some(ifindex)) {
        PinState::Live(link) => return adopt(&paths, iface, ifindex, mode, link, rules),
        PinState::Stale(reason) => {
            remove_pins(&paths)?;
            replaced_stale = Some(reason);
        }
        PinState::Absent => {}
    }
    bpffs::ensure(&layout.pin_root)?;
    let result = attach_fresh(&paths, iface, ifindex, mode, rules);
    let (link, generation) = match result {
        Ok(done) => done,
        Err(e) => {
            // Leave nothing half-made behind; the load error is the one to report.
            let _ = remove_pins(&paths);
            return Err(e);
        }
    };
    let record = AttachRecord {
        iface: iface.to_string(),
        ifindex,
        mode,
        prog_id: link.prog_id,
        link_id: link.link_id,
        attached_at_unix: state::now_unix(),
        object_digest: Some(state::object_digest()),
    };
    state::write_json(&paths.attach_record(), &record)?;
    Ok(Attached {
        iface: iface.to_string(),
        ifindex,
        mode,
        prog_id: link.prog_id,
        link_id: link.link_id,
        adopted: false,
        replaced_stale,
        generation,
        warning: None,
    })
}

fn adopt(
    paths: &IfacePaths,
    iface: &str,
    ifindex: u32,
    mode: AttachMode,
    link: LinkState,
    rules: Option<&RuleSet>,
) -> Result<Attached, DatapathError> {
    let record: Option<AttachRecord> = state::read_json(&paths.attach_record())?;
    let warning = match record.as_ref().and_then(|r| r.object_digest.clone()) {
        Some(d) if d != state::object_digest() => Some(format!(
            "the attached program was loaded from another build of the eBPF object \
             ({d}, this build: {}); detach and attach again to load this one",
            state::object_digest()
        )),
        Some(_) => None,
        None => Some("no attach record: mode and build of the attached program are unknown".into()),
    };
    let attached_mode = record.map_or(AttachMode::Auto, |r| r.mode);
    if mode != AttachMode::Auto && mode != attached_mode {
        return Err(DatapathError::ModeMismatch {
            iface: iface.to_string(),
            attached: attached_mode,
            requested: mode,
        });
    }
    let generation = rules
        .map(|r| rules::apply(&paths.maps_dir, r))
        .transpose()?;
    Ok(Attached {
        iface: iface.to_string(),
        ifindex,
        mode: attached_mode,
        prog_id: link.prog_id,
        link_id: link.link_id,
        adopted: true,
        replaced_stale: None,
        generation,
        warning,
    })
}

/// Loads the object with fresh maps, pins them, fills the rules, then
/// loads, pins and attaches the program and pins the link
/// ([`load::load_pin_attach`]).
fn attach_fresh(
    paths: &IfacePaths,
    iface: &str,
    ifindex: u32,
    mode: AttachMode,
    rules: Option<&RuleSet>,
) -> Result<(LinkState, Option<u64>), DatapathError> {
    let mut generation = None;
    let mut fill = |maps_dir: &Path| -> Result<(), DatapathError> {
        generation = rules.map(|r| rules::apply(maps_dir, r)).transpose()?;
        Ok(())
    };
    let attached = load::load_pin_attach(
        paths,
        iface,
        &XDP_CLASSIFIER_SPEC,
        Hook::Xdp {
            ifindex,
            mode: mode.xdp_mode(),
        },
        MapSource::Fresh(&mut fill),
    )?;
    match attached {
        load::Attached::Link(link) => Ok((link, generation)),
        // Only a TC hook attaches without a link (a clsact filter).
        load::Attached::Clsact(_) => Err(load::LoadError {
            step: load::LoadStep::TakeLink,
            program: XDP_CLASSIFIER_SPEC.name,
            iface: iface.to_string(),
            cause: load::LoadCause::NotBpfLink { needs: "5.9" },
        }
        .into()),
    }
}

/// What [`detach`] removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Detached {
    pub iface: String,
    /// The link that was detached, if it was still there.
    pub link: Option<LinkState>,
}

/// Detaches `iface`'s program and removes every pin and record of it. Works
/// when the interface is already gone.
pub fn detach(layout: &Layout, scope: &NetnsScope, iface: &str) -> Result<Detached, DatapathError> {
    let paths = layout.iface(scope, iface)?;
    if !paths.pin_dir.exists() {
        return Err(DatapathError::NotAttached {
            iface: iface.to_string(),
            scope: scope.to_string(),
            dir: paths.pin_dir,
        });
    }
    let link = link::read_pinned(&paths.xdp_link()).ok();
    remove_pins(&paths)?;
    Ok(Detached {
        iface: iface.to_string(),
        link,
    })
}

/// Unpins the link (the kernel detaches it when the last reference goes),
/// the program and the maps, removes the records and the directories that
/// become empty.
pub fn remove_pins(paths: &IfacePaths) -> Result<(), DatapathError> {
    for dir in [&paths.link_dir, &paths.prog_dir, &paths.maps_dir] {
        remove_files(dir)?;
        remove_dir(dir)?;
    }
    remove_dir(&paths.pin_dir)?;
    remove_dir_if_empty(&paths.scope_dir);
    remove_files(&paths.state_dir)?;
    remove_dir(&paths.state_dir)?;
    remove_dir_if_empty(&paths.state_scope_dir);
    Ok(())
}

fn remove_files(dir: &Path) -> Result<(), DatapathError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(DatapathError::io("list", dir, source)),
    };
    for entry in entries {
        let path = entry
            .map_err(|source| DatapathError::io("list", dir, source))?
            .path();
        std::fs::remove_file(&path).map_err(|source| DatapathError::io("remove", &path, source))?;
    }
    Ok(())
}

fn remove_dir(dir: &Path) -> Result<(), DatapathError> {
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(DatapathError::io("remove the directory", dir, e))
        }
        _ => Ok(()),
    }
}

/// Removes `dir` if nothing else is in it (another interface may be).
fn remove_dir_if_empty(dir: &Path) {
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print() {
        for mode in [AttachMode::Auto, AttachMode::Skb, AttachMode::Driver] {
            assert_eq!(mode.to_string().parse::<AttachMode>().unwrap(), mode);
        }
        assert_eq!("native".parse::<AttachMode>().unwrap(), AttachMode::Driver);
        assert!("hw".parse::<AttachMode>().is_err());
        assert_eq!(AttachMode::Skb.xdp_mode(), XdpMode::Skb);
    }

    #[test]
    fn missing_pins_are_absent_and_detach_says_not_attached() {
        let layout = Layout {
            pin_root: "/nonexistent/causeway-pins".into(),
            state_root: "/nonexistent/causeway-state".into(),
        };
        let paths = layout.iface(&NetnsScope::Root, "eth0").unwrap();
        assert_eq!(inspect(&paths, None), PinState::Absent);
        assert!(matches!(
            detach(&layout, &NetnsScope::Root, "eth0"),
            Err(DatapathError::NotAttached { .. })
        ));
    }
}
