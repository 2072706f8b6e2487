//! The state of every attachment, read from the pins and the kernel.

use serde::Serialize;

use super::{
    attach::{inspect, AttachMode, PinState},
    layout::Layout,
    link,
    netns::NetnsScope,
    rules,
    state::{self, AttachRecord, PolicyRecord},
    tc::{self, TcMode},
    DatapathError,
};

/// One attached interface as `causeway status` reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InterfaceStatus {
    /// The scope directory: `root`, `netns-NAME`, `netns-ino-N`.
    pub scope: String,
    /// The `--netns` name that reaches it, if any.
    pub netns: Option<String>,
    pub iface: String,
    /// `live`, or `stale: <why>`.
    pub health: String,
    pub ifindex: Option<u32>,
    pub mode: Option<AttachMode>,
    /// How the TC egress program is attached (`tcx` or `clsact`), if it is.
    pub tc_mode: Option<TcMode>,
    pub prog_id: Option<u32>,
    pub link_id: Option<u32>,
    /// From the classifier's config map.
    pub generation: Option<u64>,
    pub rule_count: Option<u32>,
    pub active_set: Option<u32>,
    /// The policy file last applied, if any.
    pub policy_source: Option<String>,
    pub attached_at_unix: Option<u64>,
    /// Whether the program was loaded from this build's eBPF object
    /// (unknown without an attach record).
    pub same_build: Option<bool>,
}

/// The status of every attachment (only `scope`'s when given).
pub fn status(
    layout: &Layout,
    scope: Option<&NetnsScope>,
) -> Result<Vec<InterfaceStatus>, DatapathError> {
    let mut out = Vec::new();
    for (scope, iface) in layout.attachments(scope)? {
        let paths = layout.iface(&scope, &iface)?;
        let record: Option<AttachRecord> = state::read_json(&paths.attach_record()).ok().flatten();
        let policy: Option<PolicyRecord> = state::read_json(&paths.policy_record()).ok().flatten();
        let (health, link) = match inspect(&paths, None) {
            PinState::Live(link) => ("live".to_string(), Some(link)),
            // Show the ids of a defunct link too, when it is still pinned.
            PinState::Stale(why) => (
                format!("stale: {why}"),
                link::read_pinned(&paths.xdp_link()).ok(),
            ),
            PinState::Absent => continue,
        };
        let config = rules::config(&paths.maps_dir).ok();
        out.push(InterfaceStatus {
            scope: scope.dir_name(),
            netns: scope.netns_name().map(str::to_string),
            iface,
            health,
            ifindex: link.map(|l| l.ifindex),
            mode: record.as_ref().map(|r| r.mode),
            tc_mode: tc::mode(&paths),
            prog_id: link.map(|l| l.prog_id),
            link_id: link.map(|l| l.link_id),
            generation: config.map(|c| c.generation),
            rule_count: config.map(|c| c.rule_count),
            active_set: config.map(|c| c.active_set),
            policy_source: policy.map(|p| p.source),
            attached_at_unix: record.as_ref().map(|r| r.attached_at_unix),
            same_build: record
                .and_then(|r| r.object_digest)
                .map(|d| d == state::object_digest()),
        });
    }
    Ok(out)
}
