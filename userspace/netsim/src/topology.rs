//! The plan of a testbed: names, addresses, routes and the `ip` commands that
//! build it. Pure: nothing here touches the system, so the plan is unit-tested.
//!
//! Layout (tag `T`, domain `d`, host `i`, WAN path `p`):
//! - host namespace `cw-T-d{d}h{i}`: `eth0` = 10.d.0.(10+i)/24, default via 10.d.0.1;
//! - gateway namespace `cw-T-d{d}gw`: bridge `br0` = 10.d.0.1/24 with one port
//!   `h{i}` per host (the domain's LAN), and one routed veth `wan{p}` per WAN path;
//! - emulator namespace `cw-T-w{p}`: veths `ea` (to the lower domain's gateway)
//!   and `eb` (to the higher one), bridged by the emulator process;
//! - WAN path p is its own /30: 10.200.p.1 (lower domain) — 10.200.p.2 (higher).
//!
//! Path selection (the hosts' marks do not cross a veth into the gateway, so the
//! gateway decides from what the packet itself carries):
//! - **by address**: every host also owns 10.d.(1+p).(10+i) for each path p of its
//!   domain; a packet *to* 10.b.(1+p).x takes path p, and the host's route gives it
//!   the source 10.d.(1+p).y, so the replies take path p too. Addresses 10.b.0.x
//!   take the pair's default (first) path.
//! - **by fwmark** on the gateway: `ip rule fwmark 0x1000+p lookup 100+p`, where
//!   table 100+p routes the whole peer domain 10.b.0.0/16 over path p. Whatever
//!   runs in the gateway namespace (SO_MARK sockets, a TC/eBPF program on `br0`
//!   ingress setting `skb->mark`) chooses the path this way.
//! - **by DSCP**, for paths 0-5: a packet that enters the gateway from its LAN with
//!   the TOS byte [`PATH_TOS`]`[p]` (DSCP 1, 3, 4, 5, 6, 7: `IP_TOS` on a host's
//!   socket, or a host's TC/eBPF program rewriting the field, which unlike the mark
//!   survives the veth) takes path p: `ip rule iif br0 tos PATH_TOS[p] lookup
//!   100+p`. Replies follow their own DSCP (the default path unless the peer marks
//!   them too). The kernel only accepts these small DSCP values (TOS bits 0x1c) in
//!   a routing rule, and compares a packet's TOS under that mask: DSCP 2 (TOS 0x08)
//!   is left out because AF11, AF21, AF31 and AF41 (the collective library's bulk
//!   and latency tags among them) all read as 0x08 there, and would leave the
//!   default path.

use serde::{Deserialize, Serialize};

use crate::params::LinkParams;

/// First fwmark value: path p is selected by mark `MARK_BASE + p`.
pub const MARK_BASE: u32 = 0x1000;
/// First routing table: path p's table is `TABLE_BASE + p`.
pub const TABLE_BASE: u32 = 100;
/// TOS byte that selects path p at its gateway (module docs: 0x08 is what
/// the AF1x–AF4x DSCPs look like to a routing rule, so no path uses it).
pub const PATH_TOS: [u8; 6] = [0x04, 0x0c, 0x10, 0x14, 0x18, 0x1c];
/// The TOS bits a routing rule compares (`IPTOS_RT_MASK`).
pub const RULE_TOS_MASK: u8 = 0x1c;

/// A host of the testbed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub domain: usize,
    pub index: usize,
    pub netns: String,
    /// Primary address (reached over the default path from other domains).
    pub ip: std::net::Ipv4Addr,
    /// (path, address): reach this host over a given path by using this address.
    pub path_ips: Vec<(usize, std::net::Ipv4Addr)>,
}

impl Host {
    /// The address that makes traffic to this host take `path`.
    pub fn ip_via(&self, path: usize) -> Option<std::net::Ipv4Addr> {
        self.path_ips
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, ip)| *ip)
    }
}

/// A WAN path between two domains' gateways.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Path {
    pub index: usize,
    /// Lower-numbered domain (its gateway is on the emulator's side A).
    pub domain_a: usize,
    pub domain_b: usize,
    pub emulator_netns: String,
    pub gw_a_ip: std::net::Ipv4Addr,
    pub gw_b_ip: std::net::Ipv4Addr,
    /// The pair's default path (taken by plain 10.d.0.x addresses).
    pub default: bool,
    pub mark: u32,
    pub table: u32,
    /// TOS byte (DSCP << 2) that selects this path at the gateway, for paths
    /// 0-5 ([`PATH_TOS`]).
    pub tos: Option<u8>,
    pub params: LinkParams,
}

/// A full plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub tag: String,
    pub prefix: String,
    pub gateways: Vec<String>,
    pub hosts: Vec<Host>,
    pub paths: Vec<Path>,
}

/// Bad topology request.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    #[error("tag {0:?} must be 1-16 characters of [a-z0-9]")]
    Tag(String),
    #[error("domains must be 1..=199, got {0}")]
    Domains(usize),
    #[error("hosts per domain must be 1..=200, got {0}")]
    Hosts(usize),
    #[error("the profile must define at least one path per domain pair")]
    NoPath,
    #[error("{0} WAN paths needed, at most 254 fit the 10.200.p.0/30 and 10.d.(1+p).0/24 plans")]
    TooManyPaths(usize),
    #[error("path {index}: {source}")]
    Params {
        index: usize,
        source: crate::params::ParamsError,
    },
}

/// Namespace prefix of every testbed with this tag.
pub fn prefix(tag: &str) -> String {
    format!("cw-{tag}-")
}

fn ip(a: u8, b: u8, c: u8, d: u8) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(a, b, c, d)
}

impl Plan {
    /// Plan `domains` domains of `hosts` hosts, with `per_pair` paths between every
    /// pair of domains (first = default).
    pub fn new(
        tag: &str,
        domains: usize,
        hosts: usize,
        per_pair: &[LinkParams],
    ) -> Result<Self, PlanError> {
        if tag.is_empty()
            || tag.len() > 16
            || !tag
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        {
            return Err(PlanError::Tag(tag.to_string()));
        }
        if !(1..=199).contains(&domains) {
            return Err(PlanError::Domains(domains));
        }
        if !(1..=200).contains(&hosts) {
            return Err(PlanError::Hosts(hosts));
        }
        if per_pair.is_empty() {
            return Err(PlanError::NoPath);
        }
        let pairs = domains * (domains - 1) / 2;
        if pairs * per_pair.len() > 254 {
            return Err(PlanError::TooManyPaths(pairs * per_pair.len()));
        }
        let prefix = prefix(tag);
        let mut paths = Vec::new();
        for a in 0..domains {
            for b in a + 1..domains {
                for (k, params) in per_pair.iter().enumerate() {
                    let index = paths.len();
                    params
                        .validate()
                        .map_err(|source| PlanError::Params { index, source })?;
                    paths.push(Path {
                        index,
                        domain_a: a,
                        domain_b: b,
                        emulator_netns: format!("{prefix}w{index}"),
                        gw_a_ip: ip(10, 200, index as u8, 1),
                        gw_b_ip: ip(10, 200, index as u8, 2),
                        default: k == 0,
                        mark: MARK_BASE + index as u32,
                        table: TABLE_BASE + index as u32,
                        tos: PATH_TOS.get(index).copied(),
                        params: *params,
                    });
                }
            }
        }
        let mut hosts_out = Vec::new();
        for d in 0..domains {
            for i in 0..hosts {
                let last = 10 + i as u8;
                let path_ips = paths
                    .iter()
                    .filter(|p| p.domain_a == d || p.domain_b == d)
                    .map(|p| (p.index, ip(10, d as u8, 1 + p.index as u8, last)))
                    .collect();
                hosts_out.push(Host {
                    domain: d,
                    index: i,
                    netns: format!("{prefix}d{d}h{i}"),
                    ip: ip(10, d as u8, 0, last),
                    path_ips,
                });
            }
        }
        Ok(Plan {
            tag: tag.to_string(),
            gateways: (0..domains).map(|d| format!("{prefix}d{d}gw")).collect(),
            prefix,
            hosts: hosts_out,
            paths,
        })
    }

    pub fn domains(&self) -> usize {
        self.gateways.len()
    }

    /// Every namespace of the plan, in creation order.
    pub fn namespaces(&self) -> Vec<String> {
        let mut v = self.gateways.clone();
        v.extend(self.hosts.iter().map(|h| h.netns.clone()));
        v.extend(self.paths.iter().map(|p| p.emulator_netns.clone()));
        v
    }

    /// Gateway address of domain `d` for path `p` (or the LAN's main address).
    fn gw_lan_ip(d: usize, path: Option<usize>) -> String {
        format!("10.{d}.{}.1", path.map_or(0, |p| p + 1))
    }

    /// The (namespace, sysctl path, value) settings, applied right after the
    /// namespaces are created (before any interface, so `default` values apply).
    pub fn sysctls(&self) -> Vec<(String, &'static str, &'static str)> {
        let mut v = Vec::new();
        for gw in &self.gateways {
            v.push((gw.clone(), "net/ipv4/ip_forward", "1"));
            v.push((gw.clone(), "net/ipv4/conf/all/rp_filter", "0"));
            v.push((gw.clone(), "net/ipv4/conf/default/rp_filter", "0"));
            // The WAN is IPv4-only; keep IPv6 neighbour discovery off the emulated paths.
            v.push((gw.clone(), "net/ipv6/conf/all/disable_ipv6", "1"));
            v.push((gw.clone(), "net/ipv6/conf/default/disable_ipv6", "1"));
        }
        for h in &self.hosts {
            // Room for one BDP of a 1 Gbit/s × 100 ms path per TCP socket.
            v.push((h.netns.clone(), "net/ipv4/tcp_rmem", "4096 131072 33554432"));
            v.push((h.netns.clone(), "net/ipv4/tcp_wmem", "4096 65536 33554432"));
        }
        for p in &self.paths {
            // The emulator's veths must carry frames only, not speak IPv6 themselves.
            v.push((
                p.emulator_netns.clone(),
                "net/ipv6/conf/all/disable_ipv6",
                "1",
            ));
            v.push((
                p.emulator_netns.clone(),
                "net/ipv6/conf/default/disable_ipv6",
                "1",
            ));
        }
        v
    }

    /// The `ip` commands (arguments after `ip`) that build the links, addresses and
    /// routes, in order. Every one names its namespace with `-n`.
    pub fn ip_commands(&self) -> Vec<Vec<String>> {
        let mut c: Vec<Vec<String>> = Vec::new();
        let mut add = |ns: &str, args: &str| {
            let mut v = vec!["-n".to_string(), ns.to_string()];
            v.extend(args.split_whitespace().map(str::to_string));
            c.push(v);
        };
        for ns in self.namespaces() {
            add(&ns, "link set lo up");
        }
        for (d, gw) in self.gateways.iter().enumerate() {
            add(gw, "link add br0 type bridge");
            add(gw, "link set br0 up");
            add(
                gw,
                &format!("addr add {}/24 dev br0", Self::gw_lan_ip(d, None)),
            );
            for p in self
                .paths
                .iter()
                .filter(|p| p.domain_a == d || p.domain_b == d)
            {
                add(
                    gw,
                    &format!("addr add {}/24 dev br0", Self::gw_lan_ip(d, Some(p.index))),
                );
            }
        }
        for h in &self.hosts {
            let gw = &self.gateways[h.domain];
            let port = format!("h{}", h.index);
            add(
                &h.netns,
                &format!("link add eth0 type veth peer name {port} netns {gw}"),
            );
            add(gw, &format!("link set {port} master br0 up"));
            add(&h.netns, "link set eth0 up");
            add(&h.netns, &format!("addr add {}/24 dev eth0", h.ip));
            for (_, alias) in &h.path_ips {
                add(&h.netns, &format!("addr add {alias}/24 dev eth0"));
            }
            add(
                &h.netns,
                &format!("route add default via {}", Self::gw_lan_ip(h.domain, None)),
            );
            for p in self
                .paths
                .iter()
                .filter(|p| p.domain_a == h.domain || p.domain_b == h.domain)
            {
                let peer = if p.domain_a == h.domain {
                    p.domain_b
                } else {
                    p.domain_a
                };
                let src = h.ip_via(p.index).unwrap_or(h.ip);
                add(
                    &h.netns,
                    &format!(
                        "route add 10.{peer}.{}.0/24 via {} src {src}",
                        p.index + 1,
                        Self::gw_lan_ip(h.domain, None)
                    ),
                );
            }
        }
        for p in &self.paths {
            let sides = [
                (
                    &self.gateways[p.domain_a],
                    "ea",
                    p.gw_a_ip,
                    p.gw_b_ip,
                    p.domain_b,
                ),
                (
                    &self.gateways[p.domain_b],
                    "eb",
                    p.gw_b_ip,
                    p.gw_a_ip,
                    p.domain_a,
                ),
            ];
            for (gw, emu_if, local, remote, peer) in sides {
                let wan = format!("wan{}", p.index);
                add(
                    gw,
                    &format!(
                        "link add {wan} type veth peer name {emu_if} netns {}",
                        p.emulator_netns
                    ),
                );
                add(&p.emulator_netns, &format!("link set {emu_if} up"));
                add(gw, &format!("link set {wan} up"));
                add(gw, &format!("addr add {local}/30 dev {wan}"));
                add(
                    gw,
                    &format!("route add 10.{peer}.{}.0/24 via {remote}", p.index + 1),
                );
                // A path's own addresses win over the DSCP rules below: the
                // kernel matches `tos` under `RULE_TOS_MASK`, so a DSCP that
                // reads like another path's TOS must not move them.
                add(
                    gw,
                    &format!(
                        "rule add to 10.{peer}.{}.0/24 lookup main pref {}",
                        p.index + 1,
                        800 + p.index
                    ),
                );
                if p.default {
                    add(gw, &format!("route add 10.{peer}.0.0/24 via {remote}"));
                }
                add(
                    gw,
                    &format!("route add 10.{peer}.0.0/16 via {remote} table {}", p.table),
                );
                add(
                    gw,
                    &format!(
                        "rule add fwmark {:#x} lookup {} pref {}",
                        p.mark,
                        p.table,
                        1000 + p.index
                    ),
                );
                if let Some(tos) = p.tos {
                    let rule = format!(
                        "rule add iif br0 tos {tos:#x} lookup {} pref {}",
                        p.table,
                        900 + p.index
                    );
                    add(gw, &rule);
                }
            }
        }
        c
    }

    /// (gateway namespace, interface) of each WAN veth whose offloads must be off,
    /// so forwarded frames are segmented and checksummed before the emulator reads them.
    pub fn gateway_wan_ifaces(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        for p in &self.paths {
            for d in [p.domain_a, p.domain_b] {
                v.push((self.gateways[d].clone(), format!("wan{}", p.index)));
            }
        }
        v
    }
}

#[cfg(test)]
#[path = "topology_tests.rs"]
mod tests;
