//! Raw Ethernet frames for the classifier, shaper and clock tests and the
//! benchmarks, built with `causeway-wire`. Every builder is deterministic
//! (the differential test's frames depend only on its seeded RNG): source
//! 02:00:00:00:00:02, destination 02:00:00:00:00:01, IPv4 id 0x1234, TTL
//! and hop limit 64, IPv6 flow label 0xabcde unless set, UDP checksum 0
//! unless asked for, payload bytes counting up from 0.

use std::net::{Ipv4Addr, Ipv6Addr};

use causeway_wire::{checksum::IpPair, ethernet, ethertype, ip_proto, ipv4, ipv6, tcp, udp, vlan};

pub use causeway_wire::ipv4::{DONT_FRAG, MORE_FRAGS};

pub const ETH_IPV4: u16 = ethertype::IPV4;
pub const ETH_IPV6: u16 = ethertype::IPV6;
pub const ETH_ARP: u16 = ethertype::ARP;
pub const ETH_LLDP: u16 = ethertype::LLDP;
pub const TPID_8021Q: u16 = ethertype::VLAN;
pub const TPID_8021AD: u16 = ethertype::QINQ;

/// Ethernet header plus one VLAN tag per entry of `tags` (each a TPID; the
/// i-th tag's TCI is 100 + i).
pub fn eth(tags: &[u16], ethertype: u16) -> Vec<u8> {
    let mut f = vec![0u8; ethernet::HEADER_LEN + tags.len() * vlan::TAG_LEN];
    let first = tags.first().copied().unwrap_or(ethertype);
    ethernet::Repr {
        dst: [0x02, 0, 0, 0, 0, 0x01],
        src: [0x02, 0, 0, 0, 0, 0x02],
        ethertype: first,
    }
    .emit(&mut f)
    .expect("room for the Ethernet header");
    for i in 0..tags.len() {
        let next = tags.get(i + 1).copied().unwrap_or(ethertype);
        let at = ethernet::HEADER_LEN + i * vlan::TAG_LEN;
        vlan::Repr {
            tci: 100 + i as u16,
            ethertype: next,
        }
        .emit(&mut f[at..])
        .expect("room for the tag");
    }
    f
}

/// Fields of an IPv4 header; `frag` is the raw flags+offset field.
#[derive(Clone, Copy, Debug)]
pub struct V4 {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub proto: u8,
    pub dscp: u8,
    pub ecn: u8,
    pub frag: u16,
    /// Bytes of options (a multiple of 4, at most 40).
    pub options: usize,
}

impl V4 {
    pub fn new(src: [u8; 4], dst: [u8; 4], proto: u8) -> Self {
        Self {
            src: src.into(),
            dst: dst.into(),
            proto,
            dscp: 0,
            ecn: 0,
            frag: 0,
            options: 0,
        }
    }

    /// The header's type-of-service byte: DSCP and ECN.
    pub fn with_tos(self, tos: u8) -> Self {
        Self {
            dscp: tos >> 2,
            ecn: tos & 0b11,
            ..self
        }
    }

    fn repr(&self) -> ipv4::Repr {
        ipv4::Repr {
            dscp: self.dscp,
            ecn: self.ecn,
            ident: 0x1234,
            frag: self.frag,
            options_len: self.options,
            ..ipv4::Repr::new(self.src, self.dst, self.proto)
        }
    }
}

/// IPv4 header (total length and checksum filled in) followed by `payload`.
pub fn ipv4(h: V4, payload: &[u8]) -> Vec<u8> {
    let repr = h.repr();
    let mut p = vec![0u8; repr.header_len() + payload.len()];
    repr.emit(&mut p, payload.len())
        .unwrap_or_else(|e| panic!("IPv4 header {h:?}: {e}"));
    p[repr.header_len()..].copy_from_slice(payload);
    p
}

/// Fields of an IPv6 header.
#[derive(Clone, Copy, Debug)]
pub struct V6 {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next: u8,
    pub dscp: u8,
    pub ecn: u8,
    pub flow: u32,
}

impl V6 {
    pub fn new(src: &str, dst: &str, next: u8) -> Self {
        Self {
            src: src.parse().expect("IPv6 source"),
            dst: dst.parse().expect("IPv6 destination"),
            next,
            dscp: 0,
            ecn: 0,
            flow: 0xabcde,
        }
    }

    /// The traffic class: DSCP and ECN.
    pub fn with_traffic_class(self, tc: u8) -> Self {
        Self {
            dscp: tc >> 2,
            ecn: tc & 0b11,
            ..self
        }
    }

    fn repr(&self) -> ipv6::Repr {
        ipv6::Repr {
            traffic_class: (self.dscp << 2) | (self.ecn & 0b11),
            flow_label: self.flow,
            ..ipv6::Repr::new(self.src, self.dst, self.next)
        }
    }
}

/// IPv6 header (payload length filled in) followed by `payload`.
pub fn ipv6(h: V6, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; ipv6::HEADER_LEN + payload.len()];
    h.repr()
        .emit(&mut p, payload.len())
        .unwrap_or_else(|e| panic!("IPv6 header {h:?}: {e}"));
    p[ipv6::HEADER_LEN..].copy_from_slice(payload);
    p
}

/// An IPv6 extension header of `kind` whose length field is `len_field`:
/// hop-by-hop (0), routing (43), destination options (60) are
/// `(len_field + 1) * 8` bytes long, AH (51) `(len_field + 2) * 4` bytes.
/// A routing header is of type 4 (segment routing) with no segments left.
pub fn ext(kind: u8, next: u8, len_field: u8) -> Vec<u8> {
    let repr = ipv6::ExtRepr::Generic {
        kind,
        next,
        len_field,
    };
    let mut h = vec![0u8; repr.header_len()];
    repr.emit(&mut h)
        .unwrap_or_else(|e| panic!("extension header {kind}: {e}"));
    if kind == ip_proto::ROUTING {
        h[2] = 4; // routing type; segments left (h[3]) stays 0
    }
    h
}

/// IPv6 fragment header (identification 0xdeadbeef).
pub fn frag6(next: u8, offset_units: u16, more: bool) -> Vec<u8> {
    let repr = ipv6::ExtRepr::Fragment {
        next,
        offset_units,
        more,
        ident: 0xdead_beef,
    };
    let mut h = vec![0u8; ipv6::FRAGMENT_LEN];
    repr.emit(&mut h)
        .unwrap_or_else(|e| panic!("fragment header: {e}"));
    h
}

/// UDP header (length filled in, checksum 0) followed by `payload_len`
/// bytes counting up from 0.
pub fn udp(sport: u16, dport: u16, payload_len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..payload_len).map(|i| i as u8).collect();
    udp_with(sport, dport, &payload, 0)
}

/// UDP header whose checksum field holds `checksum` as given, then `payload`.
pub fn udp_with(sport: u16, dport: u16, payload: &[u8], checksum: u16) -> Vec<u8> {
    let mut u = vec![0u8; udp::HEADER_LEN + payload.len()];
    udp::Repr {
        src_port: sport,
        dst_port: dport,
    }
    .emit(&mut u, payload.len())
    .unwrap_or_else(|e| panic!("UDP header: {e}"));
    let mut seg = udp::Packet::new_unchecked(&mut u[..]);
    seg.set_checksum(checksum);
    seg.payload_mut().copy_from_slice(payload);
    u
}

/// TCP header (20 bytes, SYN, seq 1, window 65535, checksum 0) followed by
/// `payload_len` bytes counting up from 0.
pub fn tcp(sport: u16, dport: u16, payload_len: usize) -> Vec<u8> {
    let mut t = vec![0u8; tcp::HEADER_LEN + payload_len];
    tcp::Repr {
        src_port: sport,
        dst_port: dport,
        seq: 1,
        ack: 0,
        flags: tcp::flags::SYN,
        window: 0xffff,
    }
    .emit(&mut t)
    .unwrap_or_else(|e| panic!("TCP header: {e}"));
    for (i, b) in t[tcp::HEADER_LEN..].iter_mut().enumerate() {
        *b = i as u8;
    }
    t
}

/// Ethernet + IPv4 `h` (protocol UDP) + UDP from `sport` to `dport` with
/// `payload`, the UDP checksum computed.
pub fn ipv4_udp_checked(h: V4, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut seg = udp_with(sport, dport, payload, 0);
    udp::Packet::new_unchecked(&mut seg[..]).fill_checksum(&IpPair::V4(h.src, h.dst));
    cat(&[
        &eth(&[], ETH_IPV4),
        &ipv4(
            V4 {
                proto: ip_proto::UDP,
                ..h
            },
            &seg,
        ),
    ])
}

/// Whether the IPv4 header of an untagged frame carries a right checksum.
pub fn ipv4_checksum_valid(frame: &[u8]) -> bool {
    frame
        .get(ethernet::HEADER_LEN..)
        .and_then(|l3| ipv4::Packet::new_checked(l3).ok())
        .is_some_and(|p| p.verify_checksum())
}

/// Concatenates parts into one frame.
pub fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Pads a frame with zeros to at least `len` bytes (Ethernet minimum: 60).
pub fn pad(mut frame: Vec<u8>, len: usize) -> Vec<u8> {
    if frame.len() < len {
        frame.resize(len, 0);
    }
    frame
}

/// An ARP request, padded to the Ethernet minimum.
pub fn arp() -> Vec<u8> {
    let mut f = eth(&[], ETH_ARP);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&[
        0x02, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
    ]);
    pad(f, ethernet::MIN_FRAME_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes the hand-written builders of the classifier tests produced
    /// before they moved onto causeway-wire: the differential test's frames
    /// must stay what its seeds made.
    #[test]
    fn frames_are_byte_for_byte_what_the_tests_always_built() {
        let f = cat(&[
            &eth(&[TPID_8021AD, TPID_8021Q], ETH_IPV4),
            &ipv4(
                V4 {
                    dscp: 46,
                    frag: 0x2000,
                    options: 4,
                    ..V4::new([10, 1, 0, 1], [10, 2, 0, 1], 17)
                },
                &udp(4791, 29501, 2),
            ),
        ]);
        let expect: Vec<u8> = [
            &[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2][..],
            &[0x88, 0xa8, 0, 100, 0x81, 0x00, 0, 101, 0x08, 0x00],
            &[0x46, 46 << 2, 0, 34, 0x12, 0x34, 0x20, 0x00, 64, 17],
            &[0x30, 0xda],
            &[10, 1, 0, 1, 10, 2, 0, 1, 1, 1, 1, 0],
            &[0x12, 0xb7, 0x73, 0x3d, 0, 10, 0, 0, 0, 1],
        ]
        .concat();
        assert_eq!(f, expect);
        let v6 = ipv6(
            V6 {
                dscp: 10,
                ..V6::new("fd00::1", "fd00::2", 43)
            },
            &cat(&[&ext(43, 44, 0), &frag6(6, 3, true), &tcp(1, 2, 1)]),
        );
        let head = [0x62, 0x8a, 0xbc, 0xde, 0, 37, 43, 64];
        assert_eq!(&v6[..8], &head);
        assert_eq!(&v6[40..48], &[44, 0, 4, 0, 0, 0, 0, 0]);
        assert_eq!(&v6[48..56], &[6, 0, 0, 0x19, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(
            &v6[56..],
            &[0, 1, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0, 0]
        );
        assert_eq!(ext(51, 17, 1).len(), 12);
        assert_eq!(arp().len(), 60);
    }

    #[test]
    fn checked_udp_frames_verify() {
        let f = ipv4_udp_checked(V4::new([10, 0, 0, 1], [10, 1, 0, 2], 0), 12345, 7007, b"hi");
        assert!(ipv4_checksum_valid(&f));
        let ip = ipv4::Packet::new_checked(&f[14..]).expect("ip");
        let seg = udp::Packet::new_checked(ip.payload()).expect("udp");
        assert!(seg.verify_checksum(&IpPair::V4(ip.src_addr(), ip.dst_addr())));
        let mut bad = f.clone();
        bad[24] ^= 1;
        assert!(!ipv4_checksum_valid(&bad));
    }
}
