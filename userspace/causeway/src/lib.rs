//! Causeway's controller: loads the eBPF programs, applies policy to their
//! maps, and serves the `causeway` CLI. The pure models (policy, classifier
//! rules, shaping plan, clock estimator, units) are `causeway_core`, which
//! builds without the eBPF toolchain; they are re-exported under the same
//! paths here (`causeway::policy`, `causeway::shaper::bucket`, …).
#![deny(unsafe_code)]

pub mod agent;
pub mod classifier;
pub mod clock;
pub mod datapath;
pub mod ebpf_object;
pub mod kernel_log;
pub mod library_policy;
mod map_handles;
pub mod paths;
pub mod shaper;
pub mod stats;

pub use causeway_core::{policy, units};
