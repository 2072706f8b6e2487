//! Where timestamps come from.
//!
//! Every stamp of a host is on one timescale: CLOCK_TAI in nanoseconds,
//! passed through the host's `SyncClock` (`causeway::clock::source`). The
//! three sources:
//!
//! * [`Source::Kernel`]: eBPF stamps written into the probe by the TC egress
//!   (t1, t3) and XDP ingress (t2, t4) programs with `bpf_ktime_get_tai_ns`
//!   (see `bpf_maps::clock` and `ebpf/src/clock_probe.rs`). Closest to the
//!   wire: no socket, scheduler or syscall time inside the measurement.
//! * [`Source::SoTimestamping`]: the socket's software stamps
//!   (`SOF_TIMESTAMPING_{RX,TX}_SOFTWARE`): taken by the stack when the
//!   datagram is received (`__netif_receive_skb`) or handed to the driver;
//!   reported as CLOCK_REALTIME and converted to CLOCK_TAI here.
//! * [`Source::Userspace`]: `clock_gettime(CLOCK_TAI)` right before
//!   `sendto` and right after `recvmsg`: includes wake-up and scheduling
//!   delays, kept for comparison.

use std::fmt;

use bpf_maps::clock::{CLOCK_SOURCE_KERNEL, CLOCK_SOURCE_SO_TIMESTAMPING, CLOCK_SOURCE_USERSPACE};
use serde::{Deserialize, Serialize};

/// A timestamp source, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Kernel,
    SoTimestamping,
    Userspace,
}

impl Source {
    pub const ALL: [Source; 3] = [Source::Kernel, Source::SoTimestamping, Source::Userspace];

    /// How far one stamp of this source may be from the instant the
    /// datagram crossed the hook it stands for, beyond what the measured
    /// delays absorb: the kernel hooks sit between the qdisc and the
    /// driver (≈1 µs), socket stamps a little further up, userspace reads a
    /// syscall away. Conservative figures for the estimator's bound.
    pub fn stamp_uncertainty_ns(self) -> f64 {
        match self {
            Source::Kernel => 1_000.0,
            Source::SoTimestamping => 2_000.0,
            Source::Userspace => 5_000.0,
        }
    }

    /// `bpf_maps::clock::CLOCK_SOURCE_*`.
    pub fn wire(self) -> u32 {
        match self {
            Source::Kernel => CLOCK_SOURCE_KERNEL,
            Source::SoTimestamping => CLOCK_SOURCE_SO_TIMESTAMPING,
            Source::Userspace => CLOCK_SOURCE_USERSPACE,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Kernel => "kernel",
            Source::SoTimestamping => "so_timestamping",
            Source::Userspace => "userspace",
        })
    }
}
