//! Per-class egress shaping: the token-bucket model shared with the TC
//! program, the validated shaping table and the kernel maps it is written
//! to, and the HTB hierarchy that finishes the job in the qdisc.

pub mod bucket;
pub mod config;
pub mod htb;
pub mod live;
pub mod maps;

pub use bucket::{BucketError, BucketParams, Decision, SharedBucket};
pub use config::{ClassShaping, OverAction, ShapingError, ShapingTable};
pub use maps::{ShaperMapError, ShaperMaps, ShaperSnapshot};
