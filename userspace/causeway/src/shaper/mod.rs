//! Per-class egress shaping: the token-bucket model shared with the TC
//! program, the kernel maps it is written to, and the HTB hierarchy that
//! finishes the job in the qdisc.

pub mod bucket;

pub use bucket::{BucketError, BucketParams, Decision, SharedBucket};
