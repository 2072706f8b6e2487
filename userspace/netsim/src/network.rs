//! Make a [`Plan`] real: namespaces, sysctls, links, addresses, routes, offloads.

use crate::netns::{self, NetnsError};
use crate::sys;
use crate::topology::Plan;

/// Create everything in the plan except the emulators. On error, what was made
/// is left for the caller to remove (by the plan's prefix).
pub fn create(plan: &Plan) -> Result<(), NetnsError> {
    for ns in plan.namespaces() {
        netns::ip(&["netns", "add", &ns])?;
    }
    for (ns, key, value) in plan.sysctls() {
        netns::sysctl(&ns, key, value)?;
    }
    for cmd in plan.ip_commands() {
        netns::ip(&cmd)?;
    }
    for (ns, iface) in plan.gateway_wan_ifaces() {
        netns::in_netns(&ns, || sys::netif::disable_offloads(&iface))?.map_err(|source| {
            NetnsError::Io {
                what: format!("offloads of {iface} in {ns}"),
                source,
            }
        })?;
    }
    Ok(())
}
