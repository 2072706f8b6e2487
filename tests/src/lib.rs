//! Helpers shared by the integration tests.

pub mod causeway_cli;
pub mod chrony;
pub mod clock_agent;
pub mod netns;
pub mod netsim_support;
pub mod shaper_net;
