//! WAN paths between two domains: what each one can carry, and how to split
//! cross-domain bytes over them (issue 14's deterministic cores).
//!
//! ```text
//! probe replies, losses,      ┌──────────────┐ PathEstimate  ┌────────┐ weights
//! delivery-rate samples  ───► │ estimator.rs │ ────────────► │ split  │ ───────►
//! (time as an argument)       └──────────────┘ (per path)    │ .rs    │ (per path)
//!                                                            └────────┘
//! ```
//! - [`estimator`]: per path, smoothed RTT with variance, the window's
//!   minimum RTT, a loss rate, a bandwidth estimate (windowed max of
//!   delivery-rate and packet-train samples) and up/down state with
//!   hysteresis.
//! - [`split`]: the fluid optimum (each path gets bytes while its one-way
//!   delay plus queued/rate is below the others'), and [`split::Weights`],
//!   which follows it smoothly, without flapping, and drops a dead path at once.
//! - [`failover`]: which path a steered flow belongs on as paths die and
//!   return (home while up, else the live path with the lowest RTT).
//! - [`steer`]: the reference model of the kernel's per-flow path steering
//!   (`ebpf/src/steer.rs`: flow → path → `skb->mark`).
//!
//! Pure and deterministic: every input, "now" included, comes in as an
//! argument (nanoseconds on any monotonic timescale); nothing here reads a
//! clock, a socket or a map, so the tests drive it on virtual time.

pub mod estimator;
pub mod failover;
pub mod split;
pub mod steer;

#[cfg(test)]
mod estimator_tests;
#[cfg(test)]
mod split_tests;

pub use estimator::{EstimatorConfig, PathEstimate, PathEstimator, PathState};
pub use split::{completion, fluid_split, Split, Weights, WeightsConfig};
