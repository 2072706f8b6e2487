//! End to end through the real `causeway` binary: two namespaces joined by a
//! veth pair, `causeway --netns A attach` + `policy apply`, real UDP and TCP
//! traffic of several classes from B to A, and `causeway stats --json` must
//! equal exactly what was sent.
//!
//! Exactness: IPv6 is off and neighbours are static, so the only frames on
//! the wire are the test's. A UDP datagram with `n` payload bytes is a frame
//! of 14 + 20 + 8 + n bytes (veth adds no padding or FCS). TCP segment
//! counts depend on timing, so they are checked two ways: the class's
//! packets and bytes equal what B's veth transmitted minus the UDP frames
//! (the kernel's own interface counters, which leave out the 14-byte
//! Ethernet header while XDP runs on the peer), and the bytes equal the header
//! arithmetic for that many segments (66 bytes of Ethernet + IPv4 + TCP with
//! timestamps per segment, 8 more for the SYN's options) plus the payload.

use causeway_test_support::require_root;
use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket},
    time::{Duration, Instant},
};

use causeway::stats::InterfaceStats;
use causeway_test_support::netns::VethLink;
use causeway_tests::causeway_cli::{causeway_ok, Attachment};
use nix::sys::socket::{setsockopt, sockopt::IpTos};
use serde::Deserialize;

#[derive(Deserialize)]
struct Report {
    interfaces: Vec<InterfaceStats>,
}

const ETH_HEADER: u64 = 14;
const UDP_OVERHEAD: u64 = ETH_HEADER + 20 + 8;
const TCP_PAYLOAD: usize = 64 * 1024;

/// One kind of UDP traffic: destination port, datagrams, payload size, TOS byte.
struct Flow {
    class: &'static str,
    port: u16,
    count: u64,
    payload: usize,
    tos: u8,
    delivered: bool,
}

const FLOWS: &[Flow] = &[
    Flow {
        class: "gradient",
        port: 5000,
        count: 10,
        payload: 1000,
        tos: 0,
        delivered: true,
    },
    Flow {
        class: "gradient",
        port: 5050,
        count: 10,
        payload: 1400,
        tos: 0,
        delivered: true,
    },
    Flow {
        class: "gradient",
        port: 5100,
        count: 10,
        payload: 1,
        tos: 0,
        delivered: true,
    },
    Flow {
        class: "parameter",
        port: 6000,
        count: 20,
        payload: 100,
        tos: 0,
        delivered: true,
    },
    // DSCP EF (46) in the TOS byte: clock. The same port without it: default.
    Flow {
        class: "clock",
        port: 3190,
        count: 10,
        payload: 48,
        tos: 46 << 2,
        delivered: true,
    },
    Flow {
        class: "default",
        port: 3190,
        count: 5,
        payload: 48,
        tos: 0,
        delivered: true,
    },
    // Dropped by the XDP rule: counted, never delivered.
    Flow {
        class: "bulk",
        port: 9999,
        count: 7,
        payload: 200,
        tos: 0,
        delivered: false,
    },
];

fn policy(subnet: &str) -> String {
    format!(
        r#"
[[class]]
id = 0
name = "default"
[[class]]
id = 1
name = "gradient"
[[class]]
id = 2
name = "parameter"
[[class]]
id = 3
name = "control"
[[class]]
id = 4
name = "clock"
[[class]]
id = 5
name = "bulk"

[[rule]]
priority = 10
protocol = "udp"
dst_port = 3190
dscp = "ef"
class = "clock"

[[rule]]
priority = 20
src = "{subnet}"
protocol = "udp"
dst_port = "5000-5100"
class = "gradient"

[[rule]]
priority = 30
protocol = 17
dst_port = 6000
class = "parameter"

[[rule]]
priority = 40
protocol = "tcp"
dst_port = 7000
class = "control"

[[rule]]
priority = 50
protocol = "udp"
dst_port = 9999
class = "bulk"
action = "drop"
"#
    )
}

fn stats(ns: &str, iface: &str) -> InterfaceStats {
    let out = causeway_ok(&["--netns", ns, "stats", "--iface", iface, "--json"]);
    let mut report: Report = serde_json::from_str(&out).expect("stats --json parses");
    assert_eq!(report.interfaces.len(), 1);
    report.interfaces.remove(0)
}

#[test]
fn stats_count_exactly_the_frames_sent_per_class() {
    require_root!("stats_count_exactly_the_frames_sent_per_class");
    let link = VethLink::new(1);
    let a = link.a.name().to_string();
    let dir = std::env::temp_dir().join(format!("causeway-traffic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy_file = dir.join("policy.toml");
    std::fs::write(&policy_file, policy("10.77.1.0/24")).unwrap();

    let _attached = Attachment::new(&a, &link.a_if, &["--mode", "driver"]);
    let applied = causeway_ok(&[
        "--netns",
        &a,
        "policy",
        "apply",
        "--iface",
        &link.a_if,
        policy_file.to_str().unwrap(),
    ]);
    assert!(applied.contains("5 rules"), "{applied}");

    // Nothing has crossed the link yet.
    let quiet = stats(&a, &link.a_if);
    assert_eq!(quiet.total().packets, 0, "unexpected frames: {quiet:?}");
    let tx_before = link.b.tx_counters(&link.b_if);

    // Receivers and the TCP listener live in A (sockets keep the namespace
    // they were made in); senders are made in B.
    let a_ip: Ipv4Addr = link.a_addr.parse().unwrap();
    let ports: Vec<u16> = FLOWS.iter().map(|f| f.port).collect();
    let (receivers, listener) = link.a.in_ns(move || {
        let mut receivers: Vec<(u16, UdpSocket)> = Vec::new();
        for port in ports {
            if !receivers.iter().any(|(p, _)| *p == port) {
                receivers.push((
                    port,
                    UdpSocket::bind(SocketAddrV4::new(a_ip, port)).unwrap(),
                ));
            }
        }
        (
            receivers,
            TcpListener::bind(SocketAddrV4::new(a_ip, 7000)).unwrap(),
        )
    });
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        got.len()
    });
    let sender = link.b.in_ns(|| UdpSocket::bind("0.0.0.0:0").unwrap());
    for flow in FLOWS {
        setsockopt(&sender, IpTos, &i32::from(flow.tos)).unwrap();
        for i in 0..flow.count {
            sender
                .send_to(
                    &vec![i as u8; flow.payload],
                    SocketAddrV4::new(a_ip, flow.port),
                )
                .unwrap();
            // Stay far below the veth ring and socket buffers.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let mut client = link
        .b
        .in_ns(move || TcpStream::connect(SocketAddrV4::new(a_ip, 7000)).unwrap());
    for chunk in vec![7u8; TCP_PAYLOAD].chunks(4096) {
        client.write_all(chunk).unwrap();
    }
    client.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(server.join().unwrap(), TCP_PAYLOAD);
    // The server closed: wait for its FIN, which the client ACKs at once.
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).unwrap();
    drop(client);

    // Every datagram that was not dropped was delivered.
    for (port, socket) in &receivers {
        socket
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 2048];
        let mut got = 0u64;
        while socket.recv(&mut buf).is_ok() {
            got += 1;
        }
        let expected: u64 = FLOWS
            .iter()
            .filter(|f| f.port == *port && f.delivered)
            .map(|f| f.count)
            .sum();
        assert_eq!(got, expected, "datagrams delivered to port {port}");
    }

    // Wait until the classifier has seen everything B transmitted.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (tx_packets, tx_bytes, seen) = loop {
        let (p, by) = link.b.tx_counters(&link.b_if);
        let seen = stats(&a, &link.a_if);
        // With an XDP program on the peer, veth counts a frame in
        // veth_xdp_rcv() (drivers/net/veth.c) as skb->len after
        // __dev_forward_skb() has pulled the Ethernet header: add it back.
        let (p, by) = (
            p - tx_before.0,
            by - tx_before.1 + ETH_HEADER * (p - tx_before.0),
        );
        if seen.total().packets == p || Instant::now() > deadline {
            break (p, by, seen);
        }
        std::thread::sleep(Duration::from_millis(100));
    };

    let class = |name: &str| {
        seen.class(name)
            .unwrap_or_else(|| panic!("no class {name}: {seen:?}"))
            .clone()
    };
    let mut udp_packets = 0;
    let mut udp_bytes = 0;
    for name in ["gradient", "parameter", "clock", "default", "bulk"] {
        let flows: Vec<&Flow> = FLOWS.iter().filter(|f| f.class == name).collect();
        let packets: u64 = flows.iter().map(|f| f.count).sum();
        let bytes: u64 = flows
            .iter()
            .map(|f| f.count * (UDP_OVERHEAD + f.payload as u64))
            .sum();
        let drops: u64 = flows.iter().filter(|f| !f.delivered).map(|f| f.count).sum();
        let c = class(name);
        assert_eq!(
            (c.packets, c.bytes, c.drops),
            (packets, bytes, drops),
            "class {name}"
        );
        udp_packets += packets;
        udp_bytes += bytes;
    }
    let control = class("control");
    assert_eq!(control.drops, 0);
    assert_eq!(
        (control.packets, control.bytes),
        (tx_packets - udp_packets, tx_bytes - udp_bytes),
        "TCP frames seen by XDP vs. sent by the veth"
    );
    assert_eq!(
        control.bytes,
        66 * control.packets + 8 + TCP_PAYLOAD as u64,
        "TCP bytes vs. header arithmetic for {} segments",
        control.packets
    );
    // SYN, the data (at most 1448 bytes a segment), FIN, and the last ACK.
    assert!(
        control.packets >= 3 + TCP_PAYLOAD.div_ceil(1448) as u64,
        "{control:?}"
    );
    assert_eq!(seen.unclassified.packets, 0, "{seen:?}");
    assert_eq!(seen.total().packets, tx_packets);
    assert_eq!(seen.total().bytes, tx_bytes);
    std::fs::remove_dir_all(&dir).unwrap();
}
