//! Authenticated clock probes between two agents on a veth pair: with a
//! shared key they sync on kernel stamps; an injector in the peer's
//! namespace (so with the peer's address) sends forged and untagged
//! responses and replays probes captured on the wire. Every one is counted
//! and none moves the estimate beyond its bound.

use std::{
    net::{IpAddr, UdpSocket},
    os::unix::fs::PermissionsExt,
    time::{Duration, Instant},
};

use causeway::clock::{
    auth::{seal, ProbeKey},
    probe::USER,
    source::raw_tai_now,
    Source, SyncClock,
};
use causeway_netsim::{csum::VNET_HDR_LEN, sys::packet::PacketSocket};
use causeway_test_support::{netns::VethLink, require_root};
use causeway_tests::clock_agent::Agent;

use bpf_maps::clock::{
    stamp_offset, CLOCK_PORT, FLAG_AUTH, PROBE_KIND_RESPONSE, PROBE_LEN, PROBE_OFF_AUTH,
    PROBE_OFF_FLAGS, PROBE_OFF_KIND, PROBE_OFF_SEQ,
};

const KEY_HEX: &str = "5a1e3c0ffee0ddba11c0de5eed0123456789abcdef0fedcba98765432100abcd";

/// Clock probes arriving on `iface` (run inside its namespace) for `dur`:
/// the UDP payloads of IPv4 datagrams from the clock port, as the socket
/// tap sees them (after XDP wrote its stamp).
fn capture_probes(iface: &str, dur: Duration) -> Vec<[u8; PROBE_LEN]> {
    let ifindex = nix::net::if_::if_nametoindex(iface).expect("interface index");
    let sock = PacketSocket::receiver(ifindex, 1 << 20).expect("AF_PACKET receiver");
    let mut bufs: Vec<Box<[u8]>> = (0..64)
        .map(|_| vec![0u8; 2048].into_boxed_slice())
        .collect();
    let (mut lens, mut stamps) = ([0usize; 64], [0u64; 64]);
    let mut out = Vec::new();
    let end = Instant::now() + dur;
    while Instant::now() < end {
        let n = sock
            .recv_batch(&mut bufs, &mut lens, &mut stamps)
            .expect("receive frames");
        for (b, &len) in bufs.iter().zip(&lens).take(n) {
            let f = &b[VNET_HDR_LEN..len.min(b.len())];
            // Ethernet, IPv4 (proto UDP), source port = the clock port.
            if f.len() < 14 + 20 + 8 || f[12..14] != [0x08, 0x00] || f[14 + 9] != 17 {
                continue;
            }
            let l4 = 14 + usize::from(f[14] & 0x0f) * 4;
            if f.len() != l4 + 8 + PROBE_LEN || f[l4..l4 + 2] != CLOCK_PORT.to_be_bytes() {
                continue;
            }
            let mut p = [0u8; PROBE_LEN];
            p.copy_from_slice(&f[l4 + 8..]);
            out.push(p);
        }
        if n == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    out
}

fn seq_of(p: &[u8; PROBE_LEN]) -> u32 {
    u32::from_be_bytes([
        p[PROBE_OFF_SEQ],
        p[PROBE_OFF_SEQ + 1],
        p[PROBE_OFF_SEQ + 2],
        p[PROBE_OFF_SEQ + 3],
    ])
}

#[test]
fn agents_with_a_key_refuse_forged_untagged_and_replayed_probes() {
    require_root!("agents_with_a_key_refuse_forged_untagged_and_replayed_probes");
    let link = VethLink::new(98);
    let ip = |s: &str| s.parse::<IpAddr>().expect("test address");
    let dir = std::env::temp_dir().join(format!("cw-probe-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("key dir");
    let key_file = dir.join("pair.key");
    std::fs::write(&key_file, format!("{KEY_HEX}\n")).expect("write key");
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let peer_lines = format!("key_file = \"{}\"", key_file.display());
    let clock_b = SyncClock {
        offset_ns: 7_000_000,
        drift_ppb: 0,
        epoch_ns: raw_tai_now(),
    };
    let a = Agent::start_full(
        link.a.name(),
        &link.a_if,
        1,
        ip(&link.b_addr),
        SyncClock::IDENTITY,
        "",
        &peer_lines,
    );
    let _b = Agent::start_full(
        link.b.name(),
        &link.b_if,
        2,
        ip(&link.a_addr),
        clock_b,
        "",
        &peer_lines,
    );
    a.wait_ready();
    let truth = |at: u64| clock_b.apply(at) as f64 - at as f64;

    // Authenticated, kernel-stamped sync within seconds.
    let deadline = Instant::now() + Duration::from_secs(20);
    let before = loop {
        let r = a.status().expect("agent answers");
        let p = &r.session.peers[0];
        if let Some(sel) = p
            .selected
            .filter(|s| s.source == Source::Kernel && s.samples_used >= 8)
        {
            assert!(p.authenticated, "{p:?}");
            break sel;
        }
        assert!(Instant::now() < deadline, "no kernel estimate: {r:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let err = (before.offset_ns - truth(before.at_local_ns)).abs();
    assert!(
        err <= before.error_bound_ns,
        "error {err} ns, bound {}",
        before.error_bound_ns
    );
    let r = a.status().expect("agent answers");
    // Real kernel egress stamps agree with the covered userspace ones.
    let ex = r.session.peers[0].exchanges;
    assert!(ex.completed >= 20 && ex.kernel_inconsistent == 0, "{ex:?}");
    let honest = r.session.ignored;
    assert_eq!(
        (
            honest.unauthenticated,
            honest.forged,
            honest.replayed,
            honest.malformed
        ),
        (0, 0, 0, 0),
        "honest traffic was refused: {honest:?}"
    );

    // Capture what B sends A for 1.5 s (15 rounds of 2 requests and 2
    // responses), on A's side of the link.
    let a_if = link.a_if.clone();
    let captured = link
        .a
        .in_ns(move || capture_probes(&a_if, Duration::from_millis(1500)));
    let responses: Vec<_> = captured
        .iter()
        .filter(|p| p[PROBE_OFF_KIND] == PROBE_KIND_RESPONSE)
        .copied()
        .collect();
    assert!(
        responses.len() >= 10,
        "captured {} responses",
        responses.len()
    );
    assert!(
        responses
            .iter()
            .all(|p| p[PROBE_OFF_FLAGS + 1] & FLAG_AUTH as u8 != 0),
        "B sends untagged responses"
    );
    assert!(captured.len() > responses.len(), "no requests captured");

    // The injector, from B's address: replays of every captured probe,
    // responses for A's next sequence numbers moved by 5 ms (re-tagged
    // with a wrong key, or with the tag of the original), and the same
    // untagged.
    let a_addr = format!("{}:{CLOCK_PORT}", link.a_addr);
    let newest = *responses
        .iter()
        .max_by_key(|p| seq_of(p))
        .expect("a response");
    let replays = captured.clone();
    let (forged_sent, untagged_sent) = link.b.in_ns(move || {
        let sock = UdpSocket::bind("0.0.0.0:0").expect("bind the injector");
        for p in &replays {
            sock.send_to(p, &a_addr).expect("send a replay");
            std::thread::sleep(Duration::from_millis(2));
        }
        let wrong = ProbeKey::from_bytes([0x42; 32]);
        let (mut forged, mut untagged) = (0u64, 0u64);
        for ahead in 1..=40u32 {
            let mut p = newest;
            let seq = seq_of(&p) + ahead;
            p[PROBE_OFF_SEQ..PROBE_OFF_SEQ + 4].copy_from_slice(&seq.to_be_bytes());
            for slot in [1, 2] {
                let o = stamp_offset(USER, slot);
                let v = u64::from_be_bytes(p[o..o + 8].try_into().expect("8 bytes"));
                p[o..o + 8].copy_from_slice(&(v + 5_000_000).to_be_bytes());
            }
            let mut retagged = p;
            seal(&wrong, &mut retagged);
            let mut bare = p;
            bare[PROBE_OFF_FLAGS + 1] &= !(FLAG_AUTH as u8);
            bare[PROBE_OFF_AUTH..].fill(0);
            for d in [&p, &retagged] {
                sock.send_to(d, &a_addr).expect("send a forged response");
                forged += 1;
            }
            sock.send_to(&bare, &a_addr)
                .expect("send an untagged response");
            untagged += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        (forged, untagged)
    });
    // Let the agent publish, then watch the estimate for 2 s more.
    std::thread::sleep(Duration::from_millis(500));
    let replayed_sent = captured.len() as u64;
    let r = a.status().expect("agent answers");
    let ig = r.session.ignored;
    eprintln!(
        "injected {forged_sent} forged, {untagged_sent} untagged, {replayed_sent} replays: refused {ig:?}"
    );
    // On a veth pair inside one host nothing is lost; the margin covers a
    // socket buffer overflow under load, not a miscount.
    let at_least = |n: u64| n * 9 / 10;
    assert!(
        ig.forged >= at_least(forged_sent) && ig.forged <= forged_sent,
        "{ig:?}"
    );
    assert!(
        ig.unauthenticated >= at_least(untagged_sent) && ig.unauthenticated <= untagged_sent,
        "{ig:?}"
    );
    assert!(
        ig.replayed >= at_least(replayed_sent) && ig.replayed <= replayed_sent,
        "{ig:?}"
    );
    assert_eq!(r.session.peers[0].auth.forged, ig.forged);
    for _ in 0..20 {
        let r = a.status().expect("agent answers");
        let sel = r.session.peers[0].selected.expect("still an estimate");
        assert_eq!(sel.source, Source::Kernel);
        let err = (sel.offset_ns - truth(sel.at_local_ns)).abs();
        assert!(
            err <= sel.error_bound_ns,
            "estimate moved: error {err} ns, bound {} ns",
            sel.error_bound_ns
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::remove_dir_all(&dir).expect("remove the key dir");
}
