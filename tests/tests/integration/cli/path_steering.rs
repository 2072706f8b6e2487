//! `causeway paths`: a live TCP flow across the `dual` testbed is moved
//! between the two WAN paths by map updates on domain 0's gateway (the
//! steering program at `br0` ingress sets `skb->mark`, the gateway's
//! `fwmark` rules pick the path): the emulators' counters show which path
//! carries it, and the connection never notices (every byte arrives, in
//! order, on the one socket).

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    thread,
    time::Duration,
};

use causeway_netsim::{Profile, Testbed};
use causeway_test_support::require_root;
use causeway_tests::{
    causeway_cli::{causeway, causeway_ok},
    netsim_support::two_hosts,
};

/// Steering attached by the test; detached on drop (before the testbed
/// deletes the namespace), even when the test fails.
struct Steering {
    netns: String,
}

impl Drop for Steering {
    fn drop(&mut self) {
        let _ = causeway(&["--netns", &self.netns, "paths", "detach", "--iface", "br0"]);
    }
}

/// Frames each path forwarded from domain 0 to domain 1 during `d`.
fn window(tb: &Testbed, d: Duration) -> [u64; 2] {
    let fwd = |p| {
        tb.path_stats(p)
            .expect("path stats")
            .a_to_b
            .counters
            .forwarded
    };
    let before = [fwd(0), fwd(1)];
    thread::sleep(d);
    [fwd(0) - before[0], fwd(1) - before[1]]
}

/// Asserts that path `on` carried the flow during a window and the other
/// path (almost) nothing, after a moment for frames already under way.
fn carried_by(tb: &Testbed, on: usize, what: &str) {
    thread::sleep(Duration::from_millis(300));
    let w = window(tb, Duration::from_secs(1));
    assert!(
        w[on] > 500 && w[1 - on] < 10,
        "{what}: frames forwarded per path in 1 s: {w:?} (expected path {on})"
    );
}

#[test]
fn a_live_flow_moves_between_paths_by_map_updates_alone() {
    require_root!("a_live_flow_moves_between_paths_by_map_updates_alone");
    let tb = two_hosts(Profile::Dual);
    let (a, b) = (tb.host(0, 0).clone(), tb.host(1, 0).clone());
    let gw = tb.gateway_netns(0).to_string();
    let marks: Vec<String> = tb
        .paths()
        .iter()
        .map(|p| format!("{}={:#x}", p.index, p.mark))
        .collect();
    let out = causeway_ok(&[
        "--netns", &gw, "paths", "attach", "--iface", "br0", "--path", &marks[0], "--path",
        &marks[1],
    ]);
    let _steering = Steering { netns: gw.clone() };
    assert!(out.contains("path steering attached"), "{out}");

    // A TCP flow from domain 0 to domain 1's primary address (the default
    // path, 0), sending as fast as the WAN takes it.
    let listener = tb
        .in_host(&b, || TcpListener::bind((b.ip, 0)))
        .expect("enter host")
        .expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let received = Arc::new(AtomicU64::new(0));
    let sink = {
        let received = received.clone();
        thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut buf = vec![0u8; 1 << 16];
            let mut off = 0u64;
            loop {
                match s.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        // Check the byte pattern as it comes, keep only a count.
                        for (i, x) in buf[..n].iter().enumerate() {
                            let at = off + i as u64;
                            assert_eq!(*x, (at % 251) as u8, "byte {at} arrived wrong");
                        }
                        off += n as u64;
                        received.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) => panic!("the receiving socket failed: {e}"),
                }
            }
        })
    };
    let mut stream = tb
        .in_host(&a, || TcpStream::connect((b.ip, port)))
        .expect("enter host")
        .expect("connect");
    let flow = format!(
        "tcp {} {}",
        stream.local_addr().expect("local"),
        stream.peer_addr().expect("peer")
    );
    let stop = Arc::new(AtomicBool::new(false));
    let source = {
        let stop = stop.clone();
        thread::spawn(move || -> u64 {
            let mut sent = 0u64;
            let mut buf = vec![0u8; 1 << 16];
            while !stop.load(Ordering::Relaxed) {
                for (i, x) in buf.iter_mut().enumerate() {
                    *x = ((sent + i as u64) % 251) as u8;
                }
                stream.write_all(&buf).expect("the sending socket failed");
                sent += buf.len() as u64;
            }
            stream
                .shutdown(std::net::Shutdown::Write)
                .expect("shutdown");
            sent
        })
    };
    let steer = |args: &[&str]| {
        let mut all = vec!["--netns", gw.as_str(), "paths"];
        all.extend_from_slice(args);
        causeway_ok(&all)
    };

    carried_by(&tb, 0, "unlisted flow, default route");
    steer(&["route", "--iface", "br0", "--path", "1", "--flow", &flow]);
    carried_by(&tb, 1, "flow put on path 1");
    steer(&["set", "--iface", "br0", "--path", "1", "--down"]);
    carried_by(&tb, 0, "path 1 down");
    steer(&["set", "--iface", "br0", "--path", "1"]);
    carried_by(&tb, 1, "path 1 up again");

    let shown: serde_json::Value =
        serde_json::from_str(&steer(&["show", "--iface", "br0", "--flows", "--json"]))
            .expect("paths show --json");
    let br0 = &shown[0];
    assert_eq!(br0["iface"], "br0");
    assert_eq!(br0["paths"][1]["flows"], 1, "{shown}");
    assert_eq!(br0["paths"][1]["up"], true, "{shown}");
    assert!(br0["paths"][1]["packets"].as_u64() > Some(1000), "{shown}");
    assert_eq!(
        br0["paths"][0]["packets"], 0,
        "nothing was put on path 0: {shown}"
    );
    assert!(br0["unsteered_packets"].as_u64() > Some(1000), "{shown}");
    assert_eq!(br0["flows"][0]["flow"], flow.as_str(), "{shown}");

    steer(&["unroute", "--iface", "br0", "--flow", &flow]);
    carried_by(&tb, 0, "flow taken off its path");

    stop.store(true, Ordering::Relaxed);
    let sent = source.join().expect("sender");
    sink.join().expect("receiver");
    assert_eq!(
        received.load(Ordering::Relaxed),
        sent,
        "every byte arrived on the one connection"
    );

    // Bad input changes nothing and says what was wrong.
    let bad = causeway(&[
        "--netns",
        &gw,
        "paths",
        "route",
        "--iface",
        "br0",
        "--path",
        "1",
        "--flow",
        &flow,
        "--flow",
        "tcp nowhere",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("PROTO SRC:PORT DST:PORT"), "{err}");
    let shown = steer(&["show", "--iface", "br0", "--flows", "--json"]);
    assert!(!shown.contains(&flow), "a bad route wrote nothing: {shown}");

    steer(&["detach", "--iface", "br0"]);
    let gone = causeway(&["--netns", &gw, "paths", "show", "--iface", "br0"]);
    assert_eq!(gone.status.code(), Some(1), "detached: nothing to show");
}
