//! Clock synchronisation: the agent, kernel stamps, chrony as a reference.

mod agent;
mod chrony_reference;
mod testbed;
