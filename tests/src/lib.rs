//! Helpers of the namespace tests and the benchmarks that need the
//! controller, the emulator or chrony (the generic plumbing, netns guards
//! and the root gate, is `causeway-test-support`).
#![deny(unsafe_code)]

pub mod causeway_cli;
pub mod chrony;
pub mod clock_agent;
pub mod netem_wan;
pub mod netsim_support;
pub mod prometheus;
pub mod shaper_net;
