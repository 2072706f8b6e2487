//! The kernel's netem as the WAN between two domains, and the same profile
//! on the userspace emulator, so that a test can run one workload over
//! both and print the results side by side (the two emulators cross-check
//! each other).
//!
//! netem's topology: host A (`eth0`, 10.97.1.2) — router (`ra` 10.97.1.1,
//! `rb` 10.97.2.1, forwarding) — host B (`eth0`, 10.97.2.2), netem on both
//! router egresses, offloads off on every veth end (frames no larger than
//! the MTU, as the emulator sees them). netem is missing from the
//! development host's kernel; Debian's kernels in the VM stage have it.

use std::net::Ipv4Addr;

use causeway_netsim::{params::LinkParams, Profile, Testbed};
use causeway_test_support::netns::Netns;

/// One direction's WAN profile, applied alike to both emulators.
#[derive(Clone, Copy, Debug)]
pub struct WanProfile {
    pub one_way_delay_ms: u64,
    pub jitter_ms: u64,
    pub rate_mbit: u64,
    /// Loss probability in [0, 1].
    pub loss: f64,
}

/// Ethernet frame bytes of a full-MTU frame (what both emulators count).
pub const FULL_FRAME: u64 = 1514;

impl WanProfile {
    pub fn rate_bps(&self) -> u64 {
        self.rate_mbit * 1_000_000
    }

    /// The bandwidth-delay product over the round trip, bytes.
    pub fn bdp_bytes(&self) -> u64 {
        self.rate_bps() * 2 * self.one_way_delay_ms / 8 / 1000
    }

    /// The drop-tail queue both emulators get: one BDP (the emulator's
    /// floor is one maximum frame, 65535 bytes).
    pub fn queue_bytes(&self) -> u64 {
        self.bdp_bytes().max(65_535)
    }

    /// The userspace emulator's parameters.
    pub fn link_params(&self) -> LinkParams {
        LinkParams {
            delay_ns: self.one_way_delay_ms * 1_000_000,
            jitter_ns: self.jitter_ms * 1_000_000,
            rate_bps: self.rate_bps(),
            loss: self.loss,
            queue_bytes: self.queue_bytes(),
            ..LinkParams::default()
        }
    }

    /// netem's arguments. The emulator's queue counts only frames waiting
    /// for serialization, but netem's `limit` (packets) counts every frame
    /// it holds, those in the delay line too: so the limit is one BDP of
    /// delay line plus the queue, in full frames.
    pub fn netem_args(&self) -> Vec<String> {
        let limit = (self.bdp_bytes() + self.queue_bytes()).div_ceil(FULL_FRAME);
        let mut a = vec!["delay".to_string(), format!("{}ms", self.one_way_delay_ms)];
        if self.jitter_ms > 0 {
            // Uniform like the emulator's (netem's default distribution).
            a.push(format!("{}ms", self.jitter_ms));
        }
        a.extend([
            "rate".to_string(),
            format!("{}mbit", self.rate_mbit),
            "loss".to_string(),
            format!("{}%", self.loss * 100.0),
            "limit".to_string(),
            limit.to_string(),
        ]);
        a
    }

    /// The userspace emulator's two-domain testbed, one host per domain.
    pub fn netsim_testbed(&self) -> Testbed {
        Testbed::builder()
            .domains(2)
            .hosts_per_domain(1)
            .wan(Profile::Custom(vec![self.link_params()]))
            .build()
            .unwrap_or_else(|e| panic!("building the emulator's testbed for {self:?}: {e}"))
    }
}

/// Two hosts in two namespaces, their interface and address each.
pub struct Ends<'a> {
    pub a_netns: &'a str,
    pub a_ip: Ipv4Addr,
    pub b_netns: &'a str,
    pub b_ip: Ipv4Addr,
}

impl<'a> Ends<'a> {
    /// Host 0 of domains 0 and 1 of the emulator's testbed.
    pub fn of_testbed(tb: &'a Testbed) -> Self {
        let (a, b) = (tb.host(0, 0), tb.host(1, 0));
        Ends {
            a_netns: &a.netns,
            a_ip: a.ip,
            b_netns: &b.netns,
            b_ip: b.ip,
        }
    }
}

/// The netem topology (namespaces deleted on drop).
pub struct NetemWan {
    pub a: Netns,
    pub router: Netns,
    pub b: Netns,
}

pub const NETEM_A_IP: Ipv4Addr = Ipv4Addr::new(10, 97, 1, 2);
pub const NETEM_B_IP: Ipv4Addr = Ipv4Addr::new(10, 97, 2, 2);

impl NetemWan {
    pub fn new(profile: &WanProfile) -> Self {
        let wan = NetemWan {
            a: Netns::new("cwa"),
            router: Netns::new("cwr"),
            b: Netns::new("cwb"),
        };
        let r = &wan.router;
        for (host, side, net) in [(&wan.a, "ra", 1), (&wan.b, "rb", 2)] {
            r.ip(&[
                "link",
                "add",
                side,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                host.name(),
            ]);
            r.ip(&["addr", "add", &format!("10.97.{net}.1/24"), "dev", side]);
            r.ip(&["link", "set", side, "up"]);
            host.ip(&["addr", "add", &format!("10.97.{net}.2/24"), "dev", "eth0"]);
            host.ip(&["link", "set", "eth0", "up"]);
            host.ip(&["route", "add", "default", "via", &format!("10.97.{net}.1")]);
            offloads_off(host.name(), "eth0");
            offloads_off(r.name(), side);
            let mut tc = vec!["tc", "qdisc", "add", "dev", side, "root", "netem"];
            let args = profile.netem_args();
            tc.extend(args.iter().map(String::as_str));
            let out = r.exec(&tc);
            assert!(
                out.status.success(),
                "{tc:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        r.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        wan
    }

    pub fn ends(&self) -> Ends<'_> {
        Ends {
            a_netns: self.a.name(),
            a_ip: NETEM_A_IP,
            b_netns: self.b.name(),
            b_ip: NETEM_B_IP,
        }
    }

    /// Changes both directions' netem to `profile`.
    pub fn set(&self, profile: &WanProfile) {
        for side in ["ra", "rb"] {
            let mut tc = vec!["tc", "qdisc", "change", "dev", side, "root", "netem"];
            let args = profile.netem_args();
            tc.extend(args.iter().map(String::as_str));
            let out = self.router.exec(&tc);
            assert!(
                out.status.success(),
                "{tc:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

fn offloads_off(netns: &str, iface: &str) {
    causeway_netsim::netns::in_netns(netns, || {
        causeway_netsim::sys::netif::disable_offloads(iface)
    })
    .unwrap_or_else(|e| panic!("entering {netns}: {e}"))
    .unwrap_or_else(|e| panic!("offloads of {iface} in {netns}: {e}"));
}
