//! How the collective library's traffic looks to the kernel: the DSCP and
//! `SO_PRIORITY` each kind of connection carries and the ports it uses.
//!
//! One home for both halves: the library tags its sockets with these
//! (`causeway_collective::transport::tagging`), and `causeway policy example`
//! writes the rules that classify them. A policy that matches these values
//! classifies the library's traffic by port and DSCP, not by address prefixes.

/// What a connection of the collective library carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrafficKind {
    /// The bulk data streams: gradient chunks (allreduce, reduce-scatter,
    /// allgather, broadcast of large buffers).
    Bulk,
    /// The latency stream across domains: transfers up to `CAUSEWAY_LATENCY_BYTES`.
    Latency,
    /// Bootstrap store, rendezvous, and the control connection beside a
    /// shared-memory channel (liveness, aborts).
    Control,
}

/// `TC_PRIO_BESTEFFORT` (include/uapi/linux/pkt_sched.h): the bulk streams
/// keep the default band. Not `TC_PRIO_BULK` (2): under `pfifo_fast` that
/// is the lowest band, where gradients would yield to any other traffic
/// (a checkpoint upload) on a host without Causeway's shaper.
pub const TC_PRIO_BESTEFFORT: u32 = 0;
/// `TC_PRIO_INTERACTIVE_BULK`.
pub const TC_PRIO_INTERACTIVE_BULK: u32 = 4;
/// `TC_PRIO_INTERACTIVE`: the highest priority a process may set without
/// `CAP_NET_ADMIN` (`sk_setsockopt`, `SO_PRIORITY` above 6 needs it).
pub const TC_PRIO_INTERACTIVE: u32 = 6;

impl TrafficKind {
    pub const ALL: [TrafficKind; 3] = [
        TrafficKind::Bulk,
        TrafficKind::Latency,
        TrafficKind::Control,
    ];

    /// DSCP (the upper six bits of the IPv4 TOS / IPv6 traffic class byte),
    /// after RFC 4594: high-throughput data AF11, low-latency data AF21,
    /// signalling CS5.
    pub fn dscp(self) -> u8 {
        match self {
            TrafficKind::Bulk => 10,
            TrafficKind::Latency => 18,
            TrafficKind::Control => 40,
        }
    }

    /// The DSCP's name as policy files write it.
    pub fn dscp_name(self) -> &'static str {
        match self {
            TrafficKind::Bulk => "af11",
            TrafficKind::Latency => "af21",
            TrafficKind::Control => "cs5",
        }
    }

    /// `SO_PRIORITY` (skb->priority: the band of `prio`/`pfifo_fast`, the
    /// VLAN PCP through an egress map).
    pub fn priority(self) -> u32 {
        match self {
            TrafficKind::Bulk => TC_PRIO_BESTEFFORT,
            TrafficKind::Latency => TC_PRIO_INTERACTIVE_BULK,
            TrafficKind::Control => TC_PRIO_INTERACTIVE,
        }
    }

    /// The class `causeway policy example` puts this kind into.
    pub fn class_name(self) -> &'static str {
        match self {
            TrafficKind::Bulk => "gradient",
            TrafficKind::Latency => "latency",
            TrafficKind::Control => "control",
        }
    }

    /// The TOS / traffic class byte (DSCP, ECN bits zero: the kernel sets ECT).
    pub fn tos(self) -> u8 {
        self.dscp() << 2
    }
}

/// torchrun's default `MASTER_PORT`: where rank 0 serves the bootstrap store.
pub const DEFAULT_MASTER_PORT: u16 = 29500;
/// First port a rank listens on for its peers (`CAUSEWAY_PORT_BASE`).
pub const DEFAULT_PORT_BASE: u16 = 29600;
/// Ports in the range (`CAUSEWAY_PORT_COUNT`): one per rank of a host.
pub const DEFAULT_PORT_COUNT: u16 = 400;

/// The ports ranks accept peer connections on: each rank takes the first
/// free one, so every connection between ranks has one end in the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenPorts {
    /// First port; 0 lets the kernel pick any (no port to classify by).
    pub base: u16,
    pub count: u16,
}

impl Default for ListenPorts {
    fn default() -> Self {
        ListenPorts {
            base: DEFAULT_PORT_BASE,
            count: DEFAULT_PORT_COUNT,
        }
    }
}

impl ListenPorts {
    /// A range of `count` ports from `base`, if it fits below 65536.
    pub fn new(base: u16, count: u16) -> Option<Self> {
        let fits = base == 0 || (count > 0 && u32::from(base) + u32::from(count) <= 65536);
        fits.then_some(ListenPorts { base, count })
    }

    /// The last port of the range (`None` when the kernel picks).
    pub fn last(&self) -> Option<u16> {
        (self.base != 0).then(|| self.base + (self.count - 1))
    }

    /// The ports to try in order; `[0]` when the kernel picks.
    pub fn candidates(&self) -> impl Iterator<Item = u16> {
        let (lo, hi) = match self.last() {
            Some(last) => (self.base, last),
            None => (0, 0),
        };
        lo..=hi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_distinct_dscps_and_unprivileged_priorities() {
        for a in TrafficKind::ALL {
            assert!(a.dscp() < 64);
            assert!(a.priority() <= TC_PRIO_INTERACTIVE);
            assert_eq!(a.tos() >> 2, a.dscp());
            for b in TrafficKind::ALL {
                if a != b {
                    assert_ne!(a.dscp(), b.dscp());
                    assert_ne!(a.class_name(), b.class_name());
                }
            }
        }
    }

    #[test]
    fn port_ranges_fit_below_65536() {
        let d = ListenPorts::default();
        assert_eq!(d.last(), Some(29999));
        assert_eq!(d.candidates().count(), 400);
        assert_eq!(
            ListenPorts::new(65535, 1).and_then(|p| p.last()),
            Some(65535)
        );
        assert!(ListenPorts::new(65535, 2).is_none());
        assert!(ListenPorts::new(1000, 0).is_none());
        let any = ListenPorts::new(0, 0).expect("kernel picks");
        assert_eq!(any.last(), None);
        assert_eq!(any.candidates().collect::<Vec<_>>(), vec![0]);
    }
}
