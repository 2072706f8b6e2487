//! Properties over every codec: what `emit` writes, `parse` reads back;
//! no accessor of a view that `new_checked` accepted panics, on any bytes.

use core::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use crate::checksum::IpPair;
use crate::{ethernet, ip_proto, ipv4, ipv6, probe, tcp, udp, vlan};

fn v4_repr() -> impl Strategy<Value = ipv4::Repr> {
    (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<u8>(),
        0u8..64,
        0u8..4,
        any::<u8>(),
    )
        .prop_flat_map(|(s, d, proto, dscp, ecn, ttl)| {
            (any::<u16>(), any::<u16>(), 0usize..=10).prop_map(move |(ident, frag, words)| {
                ipv4::Repr {
                    src: Ipv4Addr::from(s),
                    dst: Ipv4Addr::from(d),
                    protocol: proto,
                    dscp,
                    ecn,
                    ttl,
                    ident,
                    frag,
                    options_len: words * 4,
                }
            })
        })
}

fn v6_repr() -> impl Strategy<Value = ipv6::Repr> {
    (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        0u32..0x10_0000,
    )
        .prop_map(
            |(s, d, next_header, hop_limit, traffic_class, flow_label)| ipv6::Repr {
                src: Ipv6Addr::from(s),
                dst: Ipv6Addr::from(d),
                next_header,
                hop_limit,
                traffic_class,
                flow_label,
            },
        )
}

proptest! {
    #[test]
    fn ethernet_and_vlan_round_trip(dst: [u8; 6], src: [u8; 6], tci: u16, inner: u16, n in 0usize..3) {
        let mut buf = vec![0u8; ethernet::HEADER_LEN + n * vlan::TAG_LEN];
        let outer = if n == 0 { inner } else { crate::ethertype::QINQ };
        let repr = ethernet::Repr { dst, src, ethertype: outer };
        repr.emit(&mut buf).unwrap();
        for i in 0..n {
            let next = if i + 1 == n { inner } else { crate::ethertype::VLAN };
            vlan::Repr { tci, ethertype: next }.emit(&mut buf[14 + 4 * i..]).unwrap();
        }
        let f = ethernet::Frame::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(ethernet::Repr::parse(&f), repr);
        if n > 0 {
            let t = vlan::Tag::new_checked(f.payload()).unwrap();
            prop_assert_eq!(t.tci(), tci);
        }
        if !vlan::is_tpid(inner) {
            let l3 = vlan::locate_l3(&buf, 2).unwrap();
            prop_assert_eq!((l3.ethertype, l3.offset, l3.tags), (inner, 14 + 4 * n, n));
        }
    }

    #[test]
    fn ipv4_udp_round_trips_with_valid_checksums(ip in v4_repr(), sport: u16, dport: u16,
                                                 payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let ip = ipv4::Repr { protocol: ip_proto::UDP, ..ip };
        let l4 = udp::HEADER_LEN + payload.len();
        let mut buf = vec![0u8; ip.header_len() + l4];
        ip.emit(&mut buf, l4).unwrap();
        let h = ip.header_len();
        udp::Repr { src_port: sport, dst_port: dport }.emit(&mut buf[h..], payload.len()).unwrap();
        let addrs = IpPair::V4(ip.src, ip.dst);
        {
            let mut seg = udp::Packet::new_checked(&mut buf[h..]).unwrap();
            seg.payload_mut().copy_from_slice(&payload);
            seg.fill_checksum(&addrs);
        }
        let p = ipv4::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(ipv4::Repr::parse(&p), Ok(ip));
        let seg = udp::Packet::new_checked(p.payload()).unwrap();
        prop_assert_eq!(udp::Repr::parse(&seg), udp::Repr { src_port: sport, dst_port: dport });
        prop_assert!(seg.verify_checksum(&addrs));
        prop_assert_ne!(seg.checksum(), 0);
        prop_assert_eq!(seg.payload(), &payload[..]);
    }

    #[test]
    fn ipv6_ext_tcp_round_trips_with_valid_checksums(ip in v6_repr(), len_field in 0u8..4,
                                                     offset_units in 0u16..0x2000, more: bool, ident: u32,
                                                     t in (any::<u16>(), any::<u16>(), any::<u32>(), any::<u32>(), any::<u8>(), any::<u16>()),
                                                     payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let ip = ipv6::Repr { next_header: ip_proto::DEST_OPTS, ..ip };
        let dest = ipv6::ExtRepr::Generic { kind: ip_proto::DEST_OPTS, next: ip_proto::FRAGMENT, len_field };
        let frag = ipv6::ExtRepr::Fragment { next: ip_proto::TCP, offset_units, more, ident };
        let tcp_repr = tcp::Repr { src_port: t.0, dst_port: t.1, seq: t.2, ack: t.3, flags: t.4, window: t.5 };
        let (d, f) = (dest.header_len(), frag.header_len());
        let l4 = tcp::HEADER_LEN + payload.len();
        let mut buf = vec![0u8; ipv6::HEADER_LEN + d + f + l4];
        ip.emit(&mut buf, d + f + l4).unwrap();
        dest.emit(&mut buf[40..]).unwrap();
        frag.emit(&mut buf[40 + d..]).unwrap();
        let at = 40 + d + f;
        tcp_repr.emit(&mut buf[at..]).unwrap();
        buf[at + tcp::HEADER_LEN..].copy_from_slice(&payload);
        let addrs = IpPair::V6(ip.src, ip.dst);
        tcp::Packet::new_unchecked(&mut buf[at..]).fill_checksum(&addrs);

        let p = ipv6::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(ipv6::Repr::parse(&p), Ok(ip));
        prop_assert_eq!(ipv6::upper_layer(&p, 8), Ok((ip_proto::TCP, d + f)));
        let fh = ipv6::ExtHeader::new_checked(&p.payload()[d..], ip_proto::FRAGMENT).unwrap();
        prop_assert_eq!((fh.frag_offset_units(), fh.more_frags(), fh.frag_ident()), (offset_units, more, ident));
        let seg = tcp::Packet::new_checked(&p.payload()[d + f..]).unwrap();
        prop_assert_eq!(tcp::Repr::parse(&seg), Ok(tcp_repr));
        prop_assert!(seg.verify_checksum(&addrs));
        prop_assert_eq!(seg.payload(), &payload[..]);
    }

    #[test]
    fn probe_round_trips(kind: u8, flags: u16, seq: u32, sender: u32, nonce: u64, stamps: [[u64; 4]; 3]) {
        let repr = probe::Repr { kind, flags, seq, sender, nonce, stamps };
        let mut buf = [0u8; probe::PROBE_LEN];
        repr.emit(&mut buf).unwrap();
        prop_assert_eq!(probe::Repr::parse(&probe::Packet::new_checked(&buf[..]).unwrap()), Ok(repr));
    }

    /// Every accessor of every view, on arbitrary bytes: a view either is
    /// refused by `new_checked` or answers without panicking.
    #[test]
    fn checked_views_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..160), kind: u8) {
        let b = &bytes[..];
        let v4 = IpPair::V4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST);
        if let Ok(f) = ethernet::Frame::new_checked(b) {
            let _ = (f.dst(), f.src(), f.ethertype(), f.payload().len());
        }
        let _ = vlan::locate_l3(b, 4);
        if let Ok(t) = vlan::Tag::new_checked(b) {
            let _ = (t.pcp(), t.dei(), t.vid(), t.ethertype(), t.payload().len());
        }
        if let Ok(p) = ipv4::Packet::new_checked(b) {
            let _ = (p.options().len(), p.payload().len(), p.verify_checksum(), p.frag_offset());
            let _ = (p.src_addr(), p.dst_addr(), ipv4::Repr::parse(&p));
        }
        if let Ok(p) = ipv6::Packet::new_checked(b) {
            let _ = (p.payload().len(), p.flow_label(), ipv6::Repr::parse(&p), ipv6::upper_layer(&p, 8));
        }
        if let Ok(h) = ipv6::ExtHeader::new_checked(b, kind) {
            let _ = (h.payload().len(), h.frag_offset_units(), h.more_frags(), h.frag_ident());
        }
        if let Ok(p) = udp::Packet::new_checked(b) {
            let _ = (p.payload().len(), p.verify_checksum(&v4));
        }
        if let Ok(p) = tcp::Packet::new_checked(b) {
            let _ = (p.options().len(), p.payload().len(), p.verify_checksum(&v4), tcp::Repr::parse(&p));
        }
        if let Ok(p) = probe::Packet::new_checked(b) {
            let _ = (p.auth().len(), p.stamp(2, 3), probe::Repr::parse(&p));
        }
    }
}
