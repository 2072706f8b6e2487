//! XDP admission end to end through the real `causeway` binary: a policy
//! with an `[admission]` table of 10,000 prefixes is applied on A's veth;
//! B floods A's training port from a source outside them with datagrams
//! larger than the MTU (so every one is a first fragment and two later
//! fragments), and sends the same from its admitted address. The flood and
//! its later fragments are dropped in XDP and counted per reason (`causeway
//! stats`), the admitted datagrams are delivered whole.

use std::{
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    time::Duration,
};

use causeway::stats::InterfaceStats;
use causeway_test_support::{netns::VethLink, require_root};
use causeway_tests::causeway_cli::{causeway_ok, Attachment};
use serde::Deserialize;

#[derive(Deserialize)]
struct Report {
    interfaces: Vec<InterfaceStats>,
}

/// 3,000 payload bytes: 3,008 of UDP, fragments of 1,480 + 1,480 + 48.
const PAYLOAD: usize = 3_000;
const FLOOD: u64 = 200;
const ADMITTED: u64 = 20;
const SPOOFED_SRC: &str = "10.77.117.99";

fn policy(admitted: &str) -> String {
    let mut prefixes = vec![format!("\"{admitted}/32\"")];
    for i in 0..9_999u32 {
        prefixes.push(format!("\"172.{}.{}.0/24\"", 16 + i / 256, i % 256));
    }
    format!(
        r#"
[[class]]
id = 0
name = "default"
[[class]]
id = 1
name = "gradient"

[[rule]]
priority = 10
protocol = "udp"
dst_port = "5000-5100"
class = "gradient"

[admission]
ports = ["5000-5100", 3190]
prefixes = [{}]
"#,
        prefixes.join(", ")
    )
}

fn stats(ns: &str, iface: &str) -> InterfaceStats {
    let out = causeway_ok(&["--netns", ns, "stats", "--iface", iface, "--json"]);
    let mut report: Report = serde_json::from_str(&out).expect("stats --json parses");
    report.interfaces.remove(0)
}

#[test]
fn a_spoofed_flood_and_its_later_fragments_are_dropped() {
    require_root!("a_spoofed_flood_and_its_later_fragments_are_dropped");
    let link = VethLink::new(117);
    let a = link.a.name().to_string();
    link.b.ip(&[
        "addr",
        "add",
        &format!("{SPOOFED_SRC}/32"),
        "dev",
        &link.b_if,
    ]);
    let dir = std::env::temp_dir().join(format!("causeway-admission-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let policy_file = dir.join("policy.toml");
    std::fs::write(&policy_file, policy(&link.b_addr)).expect("policy file");

    let _attached = Attachment::new(&a, &link.a_if, &["--mode", "driver"]);
    let applied = causeway_ok(&[
        "--netns",
        &a,
        "policy",
        "apply",
        "--iface",
        &link.a_if,
        policy_file.to_str().expect("utf-8 path"),
    ]);
    assert!(applied.contains("1 rules"), "{applied}");

    let a_ip: Ipv4Addr = link.a_addr.parse().expect("address");
    let receiver = link
        .a
        .in_ns(move || UdpSocket::bind(SocketAddrV4::new(a_ip, 5000)).expect("bind"));
    receiver
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let (b_addr, spoofed) = (link.b_addr.clone(), SPOOFED_SRC);
    let (admitted, outsider) = link.b.in_ns(move || {
        let bind = |ip: &str| UdpSocket::bind((ip, 0)).expect("bind in B");
        (bind(&b_addr), bind(spoofed))
    });
    let datagram = vec![7u8; PAYLOAD];
    let to = SocketAddrV4::new(a_ip, 5000);
    for _ in 0..FLOOD {
        outsider.send_to(&datagram, to).expect("send");
        std::thread::sleep(Duration::from_micros(300));
    }
    for _ in 0..ADMITTED {
        admitted.send_to(&datagram, to).expect("send");
        std::thread::sleep(Duration::from_micros(300));
    }

    let mut buf = vec![0u8; 65_536];
    let mut delivered = 0u64;
    while let Ok((n, from)) = receiver.recv_from(&mut buf) {
        assert_eq!(
            from.ip().to_string(),
            link.b_addr,
            "only admitted traffic arrives"
        );
        assert_eq!(n, PAYLOAD, "reassembled whole");
        delivered += 1;
    }
    assert_eq!(delivered, ADMITTED, "every admitted datagram arrives");

    let s = stats(&a, &link.a_if);
    let drops = |name: &str| s.reason(name).map_or(0, |r| r.drops);
    assert_eq!(
        drops("adm-source"),
        FLOOD,
        "first fragments: {:?}",
        s.reasons
    );
    assert_eq!(
        drops("adm-fragment"),
        2 * FLOOD,
        "later fragments: {:?}",
        s.reasons
    );
    assert_eq!(s.admission_drops(), 3 * FLOOD);
    // Admitted first fragments carry the port and match the rule; their
    // later fragments carry no ports and fall to the default class.
    let class = |name: &str| s.class(name).map_or(0, |c| c.packets);
    assert_eq!(class("gradient"), ADMITTED, "{:?}", s.classes);
    assert_eq!(class("default"), 2 * ADMITTED, "{:?}", s.classes);
    let text = causeway_ok(&["--netns", &a, "stats", "--iface", &link.a_if]);
    assert!(
        text.contains(&format!("admission drops: {}", 3 * FLOOD)) && text.contains("adm-fragment"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
