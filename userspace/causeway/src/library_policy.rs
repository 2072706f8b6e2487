//! The policy `causeway policy example` prints: classes and rules that match
//! how the collective library tags its traffic ([`causeway_core::traffic`]:
//! a DSCP per kind of connection, peers on a port range, the bootstrap store
//! on `MASTER_PORT`), plus the agent's clock probes. Rendered from the same
//! constants the library uses, so the two cannot drift apart.

use std::fmt::Write as _;

use bpf_maps::clock::CLOCK_PORT;
use causeway_core::traffic::{ListenPorts, TrafficKind, DEFAULT_MASTER_PORT};

/// What the rendered policy assumes about the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LibrarySetup {
    /// `CAUSEWAY_PORT_BASE` / `CAUSEWAY_PORT_COUNT` of the ranks.
    pub ports: ListenPorts,
    /// torchrun's `MASTER_PORT`.
    pub master_port: u16,
}

impl Default for LibrarySetup {
    fn default() -> Self {
        LibrarySetup {
            ports: ListenPorts::default(),
            master_port: DEFAULT_MASTER_PORT,
        }
    }
}

/// Class ids of the rendered policy (0 is `default`: frames no rule matches).
pub const CLASSES: [(u8, &str); 6] = [
    (0, "default"),
    (1, "gradient"),
    (2, "latency"),
    (3, "control"),
    (4, "clock"),
    (5, "bulk"),
];

/// The policy text, commented, valid for `causeway policy check`.
pub fn render(setup: &LibrarySetup) -> String {
    let mut t = String::new();
    let ports = match setup.ports.last() {
        Some(last) => format!("\"{}-{last}\"", setup.ports.base),
        // The kernel picks the ports: nothing narrower than "any" to match.
        None => "\"1-65535\"".to_string(),
    };
    let _ = writeln!(
        t,
        "# Causeway policy for the collective library's traffic, as it tags it by
# default: ranks accept peers on ports {ports} (CAUSEWAY_PORT_BASE,
# CAUSEWAY_PORT_COUNT), the bootstrap store is on MASTER_PORT {master}, and
# every connection carries a DSCP per kind. Check it with
# `causeway policy check FILE`; apply it with `causeway policy apply FILE`.
# Regenerate for other ports: causeway policy example --port-base N.",
        master = setup.master_port
    );
    for (id, name) in CLASSES {
        let _ = writeln!(t, "\n[[class]]\nid = {id}\nname = \"{name}\"");
    }
    let rule = |t: &mut String, priority: u32, fields: &str, class: &str| {
        let _ = writeln!(
            t,
            "\n[[rule]]\npriority = {priority}\n{fields}\nclass = \"{class}\""
        );
    };
    let _ = writeln!(t, "\n# The agent's clock-sync probes (UDP {CLOCK_PORT}).");
    rule(
        &mut t,
        10,
        &format!("protocol = \"udp\"\ndst_port = {CLOCK_PORT}"),
        "clock",
    );
    rule(
        &mut t,
        11,
        &format!("protocol = \"udp\"\nsrc_port = {CLOCK_PORT}"),
        "clock",
    );
    for (i, kind) in TrafficKind::ALL.into_iter().enumerate() {
        let _ = writeln!(
            t,
            "\n# {kind:?} connections between ranks: DSCP {} (SO_PRIORITY {}), one end on the port range.",
            kind.dscp_name(),
            kind.priority()
        );
        let p = 20 + 2 * i as u32;
        for (offset, end) in [(0, "dst_port"), (1, "src_port")] {
            let fields = format!(
                "protocol = \"tcp\"\ndscp = \"{}\"\n{end} = {ports}",
                kind.dscp_name()
            );
            rule(&mut t, p + offset, &fields, kind.class_name());
        }
    }
    let _ = writeln!(
        t,
        "\n# The handshakes (sent before a connection is tagged) and anything else on the range."
    );
    rule(
        &mut t,
        40,
        &format!("protocol = \"tcp\"\ndst_port = {ports}"),
        "control",
    );
    rule(
        &mut t,
        41,
        &format!("protocol = \"tcp\"\nsrc_port = {ports}"),
        "control",
    );
    let _ = writeln!(t, "\n# The bootstrap store (rank 0, MASTER_PORT).");
    let master = setup.master_port;
    rule(
        &mut t,
        50,
        &format!("protocol = \"tcp\"\ndst_port = {master}"),
        "control",
    );
    rule(
        &mut t,
        51,
        &format!("protocol = \"tcp\"\nsrc_port = {master}"),
        "control",
    );
    let _ = writeln!(
        t,
        "\n# Any other TCP (checkpoint uploads, data loading): bulk."
    );
    rule(&mut t, 100, "protocol = \"tcp\"", "bulk");
    t
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use causeway_core::classifier::reference::{first_match, FrameFields};
    use causeway_core::policy::Policy;

    use super::*;

    fn class_of(policy: &Policy, proto: u8, dscp: u8, ports: (u16, u16)) -> String {
        let ip = |s: &str| s.parse::<IpAddr>().expect("address");
        let fields = FrameFields {
            src: ip("10.0.0.2"),
            dst: ip("10.1.0.2"),
            proto,
            dscp,
            ports: Some(ports),
            partial: None,
            fragment: None,
        };
        let class = match first_match(&policy.rules, &fields) {
            Some(i) => policy.rules.rules()[i].class,
            None => 0,
        };
        CLASSES
            .iter()
            .find(|(id, _)| *id == class)
            .map(|(_, n)| n.to_string())
            .expect("a class of the policy")
    }

    #[test]
    fn the_example_classifies_every_kind_of_library_connection() {
        for setup in [
            LibrarySetup::default(),
            LibrarySetup {
                ports: ListenPorts::new(41000, 16).expect("range"),
                master_port: 12345,
            },
        ] {
            let text = render(&setup);
            let policy = Policy::parse(&text, "policy example").expect("the example is valid");
            let (lo, hi) = (setup.ports.base, setup.ports.last().expect("a range"));
            const TCP: u8 = 6;
            for kind in TrafficKind::ALL {
                // Both directions of a connection to a rank's listener.
                for ports in [(40000, lo), (hi, 40001), (33000, hi)] {
                    let got = class_of(&policy, TCP, kind.dscp(), ports);
                    assert_eq!(got, kind.class_name(), "{kind:?} {ports:?}\n{text}");
                }
            }
            // The untagged handshake, the store, the clock, anything else.
            assert_eq!(class_of(&policy, TCP, 0, (40000, lo)), "control");
            let m = setup.master_port;
            assert_eq!(class_of(&policy, TCP, 40, (40000, m)), "control");
            assert_eq!(class_of(&policy, TCP, 0, (m, 40000)), "control");
            assert_eq!(class_of(&policy, 17, 46, (40000, CLOCK_PORT)), "clock");
            assert_eq!(class_of(&policy, TCP, 10, (40000, 443)), "bulk");
            assert_eq!(class_of(&policy, 17, 0, (40000, 53)), "default");
            if lo > 1 {
                assert_eq!(class_of(&policy, TCP, 10, (40000, lo - 1)), "bulk");
            }
        }
    }

    #[test]
    fn with_kernel_picked_ports_the_example_still_parses() {
        let setup = LibrarySetup {
            ports: ListenPorts::new(0, 0).expect("any"),
            ..LibrarySetup::default()
        };
        let policy = Policy::parse(&render(&setup), "example").expect("valid");
        let tcp_af11 = class_of(&policy, 6, TrafficKind::Bulk.dscp(), (40000, 50000));
        assert_eq!(tcp_af11, "gradient");
    }
}
