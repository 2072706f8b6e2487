//! WAN path steering on a gateway: attach the TC ingress program
//! `causeway_tc_steer` to the LAN-facing interface ([`attach`]), then move
//! flows between paths by writing its maps ([`maps`]): a flow's path, or a
//! path's mark and up/down state, is one map update, so re-routing never
//! touches a connection. The kernel side and the map layout are described
//! in `bpf_maps::paths`; the reference model is `causeway_core::paths::steer`.

pub mod attach;
pub mod flow;
pub mod maps;

pub use attach::{attach, detach, is_attached, SteerAttached, SteerError};
pub use flow::{parse_flow, FlowSpec, FlowSpecError};
pub use maps::{PathMaps, PathMapsError, PathRow};
