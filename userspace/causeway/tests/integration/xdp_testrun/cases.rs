//! The crafted frames of `xdp_testrun.rs`, each with what the classifier
//! must do with it under `policy()`: ≥ 30 frames covering truncation at every
//! header boundary, VLAN/QinQ, IPv4 options and fragments, each IPv6
//! extension header, non-IP, minimum-size and jumbo frames.

use bpf_maps::classifier::DEFAULT_CLASS;

use causeway_test_support::frames::*;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Expect {
    Unclassified,
    Pass(u32),
    Drop(u32),
}

pub const PEER: [u8; 4] = [10, 1, 2, 3];
pub const OUTSIDER: [u8; 4] = [192, 0, 2, 7];
pub const LOCAL: [u8; 4] = [10, 2, 0, 1];

pub fn v4_udp(tags: &[u16], h: V4, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    cat(&[&eth(tags, ETH_IPV4), &ipv4(h, &udp(sport, dport, payload))])
}

pub fn v6_frame(tags: &[u16], h: V6, payload: &[u8]) -> Vec<u8> {
    cat(&[&eth(tags, ETH_IPV6), &ipv6(h, payload)])
}

pub fn cases() -> Vec<(&'static str, Vec<u8>, Expect)> {
    use Expect::*;
    let udp4 = V4::new(PEER, LOCAL, 17);
    let out4 = V4::new(OUTSIDER, LOCAL, 17);
    let roce = |next| V6::new("fd00:3::1", "fd00:4::1", next);
    let pair = |next| V6::new("fd00:1::1", "fd00:2::1", next);
    let full = v4_udp(&[], udp4, 40000, 29501, 32);
    let truncate = |f: &Vec<u8>, n: usize| f[..n].to_vec();
    let mut bad_version = full.clone();
    bad_version[14] = 0x55;
    let mut ihl4 = full.clone();
    ihl4[14] = 0x44;
    let mut ihl15 = v4_udp(&[], udp4, 1, 29501, 0);
    ihl15[14] = 0x4f;
    let mut long_total = full.clone();
    long_total[16..18].copy_from_slice(&200u16.to_be_bytes());
    let mut short_total = full.clone();
    short_total[16..18].copy_from_slice(&19u16.to_be_bytes());
    let v6_udp = v6_frame(&[], roce(17), &udp(4791, 4791, 16));
    let mut v6_long_payload = v6_udp.clone();
    v6_long_payload[18..20].copy_from_slice(&500u16.to_be_bytes());
    let seven_dstopts: Vec<u8> = (0..7).flat_map(|_| ext(60, 60, 0)).collect();
    let first_frag4 = V4 {
        frag: 0x2000,
        ..out4
    };
    let later_frag4 = V4 { frag: 185, ..out4 };

    vec![
        ("ARP", arp(), Unclassified),
        ("LLDP", pad(eth(&[], ETH_LLDP), 60), Unclassified),
        (
            "Ethernet header only, IPv4 type",
            eth(&[], ETH_IPV4),
            Unclassified,
        ),
        (
            "VLAN tag cut",
            truncate(&v4_udp(&[TPID_8021Q], udp4, 1, 29501, 0), 16),
            Unclassified,
        ),
        (
            "QinQ inner tag cut",
            truncate(&v4_udp(&[TPID_8021AD, TPID_8021Q], udp4, 1, 29501, 0), 20),
            Unclassified,
        ),
        (
            "IPv4 fixed header cut",
            truncate(&full, 14 + 19),
            Unclassified,
        ),
        ("IPv4 version 5", bad_version, Unclassified),
        ("IPv4 IHL 4", ihl4, Unclassified),
        ("IPv4 IHL 15 beyond frame", ihl15, Unclassified),
        // Classified on the bytes present (the addresses and ports are there).
        ("IPv4 total length beyond frame", long_total, Pass(2)),
        ("IPv4 total length below IHL", short_total, Unclassified),
        (
            "three VLAN tags",
            v4_udp(&[TPID_8021Q; 3], udp4, 1, 29501, 0),
            Unclassified,
        ),
        (
            "802.1ad inside 802.1Q",
            v4_udp(&[TPID_8021Q, TPID_8021AD], udp4, 1, 29501, 0),
            Unclassified,
        ),
        (
            "IPv6 fixed header cut",
            truncate(&v6_udp, 14 + 39),
            Unclassified,
        ),
        ("IPv6 payload length beyond frame", v6_long_payload, Pass(9)),
        ("peer UDP to training port", full.clone(), Pass(2)),
        (
            "outsider UDP to training port",
            v4_udp(&[], out4, 40000, 29501, 32),
            Drop(15),
        ),
        (
            "outsider in 802.1Q",
            v4_udp(&[TPID_8021Q], out4, 1, 29599, 0),
            Drop(15),
        ),
        (
            "peer in QinQ",
            v4_udp(&[TPID_8021AD, TPID_8021Q], udp4, 1, 29500, 0),
            Pass(2),
        ),
        (
            "peer in 802.1Q over 802.1Q",
            v4_udp(&[TPID_8021Q, TPID_8021Q], udp4, 1, 29500, 0),
            Pass(2),
        ),
        (
            "peer with 12 bytes of IPv4 options",
            v4_udp(
                &[],
                V4 {
                    options: 12,
                    ..udp4
                },
                1,
                29550,
                4,
            ),
            Pass(2),
        ),
        (
            "peer with 40 bytes of IPv4 options",
            v4_udp(
                &[],
                V4 {
                    options: 40,
                    ..udp4
                },
                1,
                29550,
                4,
            ),
            Pass(2),
        ),
        (
            "outsider first fragment",
            v4_udp(&[], first_frag4, 1, 29501, 64),
            Drop(15),
        ),
        (
            "outsider later fragment: no ports",
            v4_udp(&[], later_frag4, 1, 29501, 64),
            Pass(DEFAULT_CLASS),
        ),
        (
            "later fragment to blocked net",
            v4_udp(
                &[],
                V4 {
                    dst: [10, 9, 1, 1].into(),
                    ..later_frag4
                },
                1,
                1,
                8,
            ),
            Drop(8),
        ),
        (
            "IPv4 datagram cut inside UDP header",
            truncate(&v4_udp(&[], out4, 1, 29501, 0), 14 + 20 + 7),
            // No ports in the bytes present: the default class (a policy
            // with `unclassified = "drop"` or admission drops it).
            Pass(DEFAULT_CLASS),
        ),
        (
            "UDP header cut: no ports",
            cat(&[&eth(&[], ETH_IPV4), &ipv4(out4, &udp(1, 29501, 0)[..7])]),
            Pass(DEFAULT_CLASS),
        ),
        (
            "TCP to 22",
            cat(&[
                &eth(&[], ETH_IPV4),
                &ipv4(V4::new(OUTSIDER, LOCAL, 6), &tcp(50000, 22, 0)),
            ]),
            Pass(3),
        ),
        (
            "TCP header 19 bytes",
            cat(&[
                &eth(&[], ETH_IPV4),
                &ipv4(V4::new(OUTSIDER, LOCAL, 6), &tcp(50000, 22, 0)[..19]),
            ]),
            Pass(DEFAULT_CLASS),
        ),
        (
            "ICMP",
            pad(
                cat(&[
                    &eth(&[], ETH_IPV4),
                    &ipv4(V4::new(OUTSIDER, LOCAL, 1), &[8, 0, 0, 0, 0, 1, 0, 1]),
                ]),
                60,
            ),
            Pass(7),
        ),
        (
            "EF DSCP",
            v4_udp(
                &[],
                V4 {
                    dscp: 46,
                    ..V4::new(OUTSIDER, LOCAL, 17)
                },
                123,
                123,
                8,
            ),
            Pass(5),
        ),
        (
            "minimum-size frame, padded",
            pad(v4_udp(&[], udp4, 1, 29501, 0), 60),
            Pass(2),
        ),
        (
            "jumbo 9000 B frame",
            v4_udp(&[], udp4, 1, 29501, 9000 - 14 - 20 - 8),
            Pass(2),
        ),
        (
            "outsider jumbo 9000 B frame",
            v4_udp(&[], out4, 1, 29501, 9000 - 14 - 20 - 8),
            Drop(15),
        ),
        (
            "IPv6 domain pair",
            v6_frame(&[], pair(17), &udp(1, 2, 8)),
            Pass(4),
        ),
        (
            "IPv6 in QinQ",
            v6_frame(&[TPID_8021AD, TPID_8021Q], pair(59), &[]),
            Pass(4),
        ),
        ("IPv6 UDP 4791", v6_udp.clone(), Pass(9)),
        (
            "IPv6 hop-by-hop",
            v6_frame(&[], roce(0), &cat(&[&ext(0, 17, 0), &udp(4791, 1, 0)])),
            Pass(9),
        ),
        (
            "IPv6 routing",
            v6_frame(&[], roce(43), &cat(&[&ext(43, 17, 2), &udp(4791, 1, 0)])),
            Pass(9),
        ),
        (
            "IPv6 destination options",
            v6_frame(&[], roce(60), &cat(&[&ext(60, 17, 1), &udp(4791, 1, 0)])),
            Pass(9),
        ),
        (
            "IPv6 AH",
            v6_frame(&[], roce(51), &cat(&[&ext(51, 17, 4), &udp(4791, 1, 0)])),
            Pass(9),
        ),
        (
            "IPv6 all five",
            v6_frame(
                &[],
                roce(0),
                &cat(&[
                    &ext(0, 43, 0),
                    &ext(43, 44, 0),
                    &frag6(51, 0, true),
                    &ext(51, 60, 4),
                    &ext(60, 17, 0),
                    &udp(4791, 1, 0),
                ]),
            ),
            Pass(9),
        ),
        (
            "IPv6 first fragment",
            v6_frame(
                &[],
                roce(44),
                &cat(&[&frag6(17, 0, true), &udp(4791, 1, 0)]),
            ),
            Pass(9),
        ),
        (
            "IPv6 later fragment: no ports",
            v6_frame(
                &[],
                roce(44),
                &cat(&[&frag6(17, 100, false), &udp(4791, 1, 0)]),
            ),
            Pass(DEFAULT_CLASS),
        ),
        (
            "IPv6 seven extension headers: address-only",
            v6_frame(&[], pair(60), &cat(&[&seven_dstopts, &udp(4791, 1, 0)])),
            Pass(4),
        ),
        (
            "IPv6 seven extension headers, RoCE",
            v6_frame(&[], roce(60), &cat(&[&seven_dstopts, &udp(4791, 1, 0)])),
            Pass(DEFAULT_CLASS),
        ),
        (
            "IPv6 extension header beyond payload",
            v6_frame(&[], roce(60), &[17, 3, 0, 0, 0, 0, 0, 0]),
            Pass(DEFAULT_CLASS),
        ),
        (
            "IPv6 UDP header cut",
            v6_frame(&[], roce(17), &udp(4791, 1, 0)[..6]),
            Pass(DEFAULT_CLASS),
        ),
    ]
}
