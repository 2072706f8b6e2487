//! Causeway's testbed: a userspace layer-2 WAN link emulator (this kernel has no
//! netem), network-namespace topologies of several domains joined by emulated WAN
//! paths, and the [`Testbed`] API used by tests and benchmarks.
//!
//! ```no_run
//! use causeway_netsim::{ParamsPatch, Profile, Testbed};
//!
//! let tb = Testbed::builder().domains(2).hosts_per_domain(2).wan(Profile::Dual).build()?;
//! let (a, b) = (tb.host(0, 0), tb.host(1, 0));
//! // Processes in a host: `ip netns exec` under the hood.
//! let out = tb.run(a, "ip", &["-br", "addr"])?;
//! // Rust code in a host (a thread that entered the namespace).
//! let sock = tb.in_host(b, || std::net::UdpSocket::bind("0.0.0.0:9000"))??;
//! // Path 1 of `dual` is reached through the peer's path-1 address.
//! let via_path1 = b.ip_via(1).expect("dual has two paths");
//! tb.set_path(0, &ParamsPatch { rate_bps: Some(50_000_000), ..Default::default() })?;
//! tb.cut_path(1)?;
//! println!("{:?}", tb.path_stats(0)?.a_to_b.counters);
//! # drop((out, sock, via_path1));
//! // Dropping `tb` stops the emulators and deletes every namespace.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Layers, from the bottom:
//! - [`core`]: the pure, virtual-clock link model (delay line, rate serializer,
//!   drop-tail queue, loss, jitter, reordering);
//! - [`emulator`] (+ `forward`, [`sys`]): AF_PACKET I/O threads driving one core per direction;
//! - [`control`]: the JSON-lines control socket of the `causeway-wanem` process;
//! - [`topology`] (a pure plan) and [`network`] (makes it real), [`testbed`] (the API);
//! - [`probe`] and [`load`]: RTT probing and UDP load for tests and the bench.
//!
//! `unsafe` code lives in [`sys`] only.

#![deny(unsafe_code)]

pub mod control;
pub mod core;
pub mod csum;
pub mod emulator;
mod forward;
pub mod load;
pub mod netns;
pub mod network;
pub mod params;
pub mod probe;
pub mod profile;
pub mod rng;
pub mod spin_budget;
#[allow(unsafe_code)]
pub mod sys;
pub mod testbed;
pub mod topology;

pub use crate::core::{Counters, LinkCore, Verdict};
pub use emulator::{Dir, DirStats, Emulator, EmulatorConfig, EmulatorError, EmulatorStats};
pub use params::{LinkParams, ParamsError, ParamsPatch};
pub use profile::Profile;
pub use testbed::{NsChild, Testbed, TestbedBuilder, TestbedError};
pub use topology::{Host, Path, Plan};
