//! Per-class egress shaping: the models (token bucket, program table, HTB
//! plan, validated shaping plan) come from `causeway_core::shaper`
//! (re-exported here); this module adds the kernel maps the table is
//! written to (`maps`), running `tc` for the HTB hierarchy (`htb`) and live
//! changes to an attached interface (`live`).

pub use causeway_core::shaper::*;

pub mod htb;
pub mod live;
pub mod maps;

pub use maps::{ShaperMapError, ShaperMaps, ShaperSnapshot};
