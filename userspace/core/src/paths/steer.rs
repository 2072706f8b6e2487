//! The reference model of the kernel's path steering (`ebpf/src/steer.rs`):
//! which path, and which mark, a frame gets from the flow and path tables.
//! The differential test `steer_testrun` runs random frames through both.

use std::{collections::HashMap, net::IpAddr};

use bpf_maps::paths::{FlowKey, PathEntry, MAX_PATHS, PATH_UNSTEERED_SLOT, PATH_UP};

use crate::classifier::reference::{self, FrameFields};

/// What the program does with one frame: the counter slot it is counted in
/// and the mark it sets (`None`: the mark is left as it came).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Steer {
    pub slot: u32,
    pub mark: Option<u32>,
}

impl Steer {
    const UNSTEERED: Self = Self {
        slot: PATH_UNSTEERED_SLOT,
        mark: None,
    };
}

/// The flow key of a parsed frame, or `None` for a later fragment (it has
/// no ports, so its flow is unknown). A frame read only in part is keyed on
/// what was read: the protocol the parser ended on, ports 0 without them.
pub fn flow_key(f: &FrameFields) -> Option<FlowKey> {
    if f.fragment.is_some_and(|x| x.later) {
        return None;
    }
    let (sport, dport) = f.ports.unwrap_or((0, 0));
    Some(match (f.src, f.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            FlowKey::v4(s.octets(), d.octets(), f.proto, sport, dport)
        }
        (s, d) => FlowKey::v6(v6(s), v6(d), f.proto, sport, dport),
    })
}

fn v6(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V6(a) => a.octets(),
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
    }
}

/// Steers one whole frame (from its Ethernet header).
pub fn steer(frame: &[u8], flows: &HashMap<FlowKey, u32>, paths: &[PathEntry]) -> Steer {
    let Ok(fields) = reference::parse(frame) else {
        return Steer::UNSTEERED;
    };
    let Some(path) = flow_key(&fields).and_then(|k| flows.get(&k).copied()) else {
        return Steer::UNSTEERED;
    };
    match paths.get(path as usize) {
        Some(p) if path < MAX_PATHS && p.flags & PATH_UP != 0 => Steer {
            slot: path,
            mark: Some(p.mark),
        },
        _ => Steer::UNSTEERED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp_v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12] = 0x08;
        let mut ip = vec![0x45, 0, 0, 28, 0, 1, 0x40, 0, 64, 17, 0, 0];
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        f.extend_from_slice(&ip);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    #[test]
    fn a_listed_flow_on_an_up_path_gets_its_mark_and_nothing_else_does() {
        let key = FlowKey::v4([10, 0, 0, 10], [10, 1, 0, 10], 17, 4000, 5201);
        let flows = HashMap::from([(key, 1u32)]);
        let mut paths = vec![PathEntry::default(); MAX_PATHS as usize];
        paths[1] = PathEntry {
            mark: 0x1001,
            flags: PATH_UP,
        };
        let frame = udp_v4([10, 0, 0, 10], [10, 1, 0, 10], 4000, 5201);
        assert_eq!(
            steer(&frame, &flows, &paths),
            Steer {
                slot: 1,
                mark: Some(0x1001)
            }
        );
        // The reverse direction is another flow.
        let back = udp_v4([10, 1, 0, 10], [10, 0, 0, 10], 5201, 4000);
        assert_eq!(steer(&back, &flows, &paths), Steer::UNSTEERED);
        // A path that is down steers nothing.
        paths[1].flags = 0;
        assert_eq!(steer(&frame, &flows, &paths), Steer::UNSTEERED);
        // Not IP, and cut short.
        assert_eq!(steer(&[0u8; 60], &flows, &paths), Steer::UNSTEERED);
        assert_eq!(steer(&frame[..20], &flows, &paths), Steer::UNSTEERED);
    }
}
