//! Causeway's controller: loads the eBPF programs, applies policy to their
//! maps, and serves the `causeway` CLI.

pub mod agent;
pub mod classifier;
pub mod clock;
pub mod datapath;
pub mod ebpf_object;
mod map_handles;
pub mod policy;
pub mod shaper;
pub mod stats;

pub use causeway_core::units;
