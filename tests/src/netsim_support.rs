//! Helpers for the WAN-emulator testbed tests (`tests/tests/integration/netsim/`).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use causeway_netsim::probe::{probe_rtt, EchoServer, RttSamples};
use causeway_netsim::{Host, Profile, Testbed};

/// `domains` domains of `hosts` hosts each, joined by `profile`'s WAN
/// paths (torn down when dropped).
pub fn testbed(domains: usize, hosts: usize, profile: Profile) -> Testbed {
    let name = format!("{profile:?}");
    Testbed::builder()
        .domains(domains)
        .hosts_per_domain(hosts)
        .wan(profile)
        .build()
        .unwrap_or_else(|e| panic!("building a {domains} × {hosts} testbed on {name}: {e}"))
}

/// Two domains of one host each, joined by `profile`'s WAN paths.
pub fn two_hosts(profile: Profile) -> Testbed {
    testbed(2, 1, profile)
}

pub const ECHO_PORT: u16 = 7007;

/// Start a UDP echo responder in `host` on [`ECHO_PORT`].
pub fn echo_in(tb: &Testbed, host: &Host) -> EchoServer {
    let sock = tb
        .in_host(host, || UdpSocket::bind(("0.0.0.0", ECHO_PORT)))
        .expect("enter host")
        .expect("bind echo socket");
    EchoServer::start(sock).expect("start echo")
}

/// An unbound-port UDP socket inside `netns`.
pub fn socket_in(tb: &Testbed, netns: &str) -> UdpSocket {
    tb.in_netns(netns, || UdpSocket::bind("0.0.0.0:0"))
        .expect("enter netns")
        .expect("bind probe socket")
}

/// `n` echo probes to `ip`, 5 ms apart, each waiting up to `timeout`; the first
/// (ARP warm-up) probe is sent separately and not counted. The prober runs on a
/// SCHED_FIFO thread (best effort) so a busy machine does not inflate the RTTs.
pub fn rtts(sock: &UdpSocket, ip: Ipv4Addr, n: usize, timeout: Duration) -> RttSamples {
    let dst = SocketAddr::new(ip.into(), ECHO_PORT);
    std::thread::scope(|s| {
        s.spawn(|| {
            let _ = causeway_netsim::sys::set_realtime(5);
            let _ = probe_rtt(
                sock,
                dst,
                1,
                64,
                Duration::ZERO,
                timeout.max(Duration::from_millis(500)),
            );
            probe_rtt(sock, dst, n, 64, Duration::from_millis(5), timeout).expect("probe")
        })
        .join()
        .expect("probe thread")
    })
}

/// Median RTT in milliseconds (panics if every probe was lost).
pub fn median_ms(s: &RttSamples) -> f64 {
    s.median()
        .expect("at least one answered probe")
        .as_secs_f64()
        * 1e3
}

/// Asserts that the RTTs of `s` come from a path of `want_ms` round-trip
/// delay: the minimum within [want, want + 1) ms (the emulator never
/// forwards early; the 1 ms is this host's own stack), and the median within
/// want + 5 ms, because under load the emulator's wake-ups are late by
/// hundreds of µs and occasionally by milliseconds, which moves the median
/// and not the floor.
pub fn assert_rtt_ms(s: &RttSamples, want_ms: f64, what: &str) {
    let ms = |d: Option<std::time::Duration>| {
        d.expect("at least one answered probe").as_secs_f64() * 1e3
    };
    let (min, median) = (ms(s.min()), ms(s.median()));
    assert!(
        (want_ms..want_ms + 1.0).contains(&min) && median < want_ms + 5.0,
        "{what}: RTT min {min:.2} ms, median {median:.2} ms; expected a minimum in \
         [{want_ms}, {want_ms} + 1) ms and a median below {want_ms} + 5 ms"
    );
}

/// Names of all network namespaces starting with `prefix`.
pub fn namespaces_with(prefix: &str) -> Vec<String> {
    causeway_netsim::netns::list()
        .expect("list namespaces")
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect()
}
