//! WAN path steering on a gateway: attach the TC ingress program
//! `causeway_tc_steer` to the LAN-facing interface ([`attach`]), then move
//! flows between paths by writing its maps ([`maps`]): a flow's path, or a
//! path's mark and up/down state, is one map update, so re-routing never
//! touches a connection. The kernel side and the map layout are described
//! in `bpf_maps::paths`; the reference model is `causeway_core::paths::steer`.
//! [`monitor`] is the controller: it probes the paths and moves flows off a
//! path that dies, and back when it returns.

pub mod attach;
pub mod flow;
pub mod maps;
pub mod monitor;

pub use attach::{attach, detach, is_attached, SteerAttached, SteerError};
pub use flow::{parse_flow, FlowSpec, FlowSpecError};
pub use maps::{PathMaps, PathMapsError, PathRow};

/// The controller's latest estimates, in the steered interface's state
/// directory (`causeway paths show` reads them).
pub const MONITOR_FILE: &str = "monitor.json";

/// The controller's estimates of `dirs`' interface, when it wrote them in
/// the last 5 s (an older file belongs to a controller that stopped).
pub fn read_monitor(dirs: &crate::datapath::IfacePaths) -> Option<Vec<monitor::PathHealth>> {
    let file = dirs.state_dir.join(MONITOR_FILE);
    let age = std::fs::metadata(&file)
        .ok()?
        .modified()
        .ok()?
        .elapsed()
        .ok()?;
    if age > std::time::Duration::from_secs(5) {
        return None;
    }
    crate::datapath::state::read_json(&file).ok().flatten()
}
