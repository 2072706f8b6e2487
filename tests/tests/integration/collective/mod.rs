//! The collective library on the agent's clock maps and the emulated WAN.

mod agent_paths;
mod convergence;
mod multipath;
mod multipath_rate;
mod peer_clock;
mod tagging;
mod testbed;
mod trace_clock;
mod wan_estimates;
