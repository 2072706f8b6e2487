//! Causeway's testbed: a userspace layer-2 WAN link emulator (this kernel has no
//! netem), network-namespace topologies of several domains joined by emulated WAN
//! paths, and the [`Testbed`] API used by tests and benchmarks.

pub mod core;
pub mod params;
pub mod rng;

pub use crate::core::{Counters, LinkCore, Verdict};
pub use params::{LinkParams, ParamsError, ParamsPatch};
pub mod emulator;
mod forward;
pub mod sys;

pub use emulator::{Dir, DirStats, Emulator, EmulatorConfig, EmulatorError, EmulatorStats};
pub mod profile;
pub mod topology;

pub use profile::Profile;
pub use topology::{Host, Path, Plan};
pub mod netns;
pub mod testbed;

pub use testbed::{NsChild, Testbed, TestbedBuilder, TestbedError};
pub mod control;
pub mod csum;
pub mod load;
pub mod network;
pub mod probe;
