//! Clock synchronisation: the agent, kernel stamps, chrony as a reference.

mod agent;
mod auth;
mod chrony_reference;
mod control_group;
mod testbed;
