//! The namespace guard removes what it made, also when the test panics.

use std::net::UdpSocket;
use std::time::Duration;

use causeway_test_support::netns::{unique_name, Netns, VethLink};
use causeway_test_support::require_root;

fn exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}

#[test]
fn namespaces_and_veths_go_on_drop_and_on_panic() {
    require_root!();
    let link = VethLink::new(201);
    let (a, b) = (link.a.name().to_string(), link.b.name().to_string());
    assert!(exists(&a) && exists(&b));
    // The link carries a datagram from A to B.
    let b_bind = format!("{}:7070", link.b_addr);
    let rx = link
        .b
        .in_ns(move || UdpSocket::bind(b_bind).expect("bind in B"));
    rx.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let tx = link
        .a
        .in_ns(|| UdpSocket::bind("0.0.0.0:0").expect("bind in A"));
    tx.send_to(b"over the veth", format!("{}:7070", link.b_addr))
        .expect("send");
    let mut buf = [0u8; 32];
    let (n, _) = rx.recv_from(&mut buf).expect("datagram arrives");
    assert_eq!(&buf[..n], b"over the veth");
    drop((rx, tx));
    drop(link);
    assert!(!exists(&a) && !exists(&b), "dropped");

    let mut name = String::new();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ns = Netns::new("cwg");
        name = ns.name().to_string();
        ns.in_ns(|| panic!("deliberate panic inside the namespace"));
    }));
    assert!(r.is_err());
    assert!(
        !name.is_empty() && !exists(&name),
        "unwinding removed {name}"
    );
    assert!(unique_name("x") != unique_name("x"));
}
