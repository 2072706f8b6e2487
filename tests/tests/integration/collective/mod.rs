//! The collective library on the agent's clock maps and the emulated WAN.

mod convergence;
mod peer_clock;
mod tagging;
mod testbed;
mod trace_clock;
mod wan_estimates;
