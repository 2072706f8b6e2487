//! Causeway's testbed: a userspace layer-2 WAN link emulator (this kernel has no
//! netem), network-namespace topologies of several domains joined by emulated WAN
//! paths, and the [`Testbed`] API used by tests and benchmarks.

pub mod core;
pub mod params;
pub mod rng;

pub use crate::core::{Counters, LinkCore, Verdict};
pub use params::{LinkParams, ParamsError, ParamsPatch};
