//! The agent's life cycle on a veth pair between two namespaces: it
//! attaches XDP and TC, gets kernel-stamped estimates, restricts its
//! control socket, and a SIGTERM + restart keeps (and adopts) the programs.

use causeway_test_support::{
    bpf::{TC_EGRESS, XDP_CLASSIFIER},
    require_root,
};
use std::{
    net::IpAddr,
    os::unix::{fs::PermissionsExt, process::CommandExt},
    process::Command,
    time::{Duration, Instant},
};

use causeway::{
    clock::{
        probe::{self, Kind, Probe},
        source::raw_tai_now,
        Source, SyncClock,
    },
    datapath::{link, Layout, NetnsScope},
};
use causeway_test_support::netns::VethLink;
use causeway_tests::{causeway_cli::causeway_bin, clock_agent::Agent};

#[test]
fn agent_syncs_with_kernel_stamps_and_a_restart_adopts_its_programs() {
    require_root!("agent_syncs_with_kernel_stamps_and_a_restart_adopts_its_programs");
    let link_pair = VethLink::new(93);
    let ip = |s: &str| s.parse::<IpAddr>().expect("test address");
    let clock_b = SyncClock {
        offset_ns: 7_000_000,
        drift_ppb: 20_000,
        epoch_ns: raw_tai_now(),
    };
    let mut a = Agent::start(
        link_pair.a.name(),
        &link_pair.a_if,
        1,
        ip(&link_pair.b_addr),
        SyncClock::IDENTITY,
    );
    let _b = Agent::start(
        link_pair.b.name(),
        &link_pair.b_if,
        2,
        ip(&link_pair.a_addr),
        clock_b,
    );
    let first = a.wait_ready();
    assert!(
        !first.interfaces[0].xdp_adopted && !first.interfaces[0].tc_adopted,
        "{first:?}"
    );

    // A kernel-stamped estimate arrives within seconds.
    let deadline = Instant::now() + Duration::from_secs(20);
    let selected = loop {
        let r = a.status().expect("agent answers");
        if let Some(sel) = r.session.peers[0]
            .selected
            .filter(|s| s.source == Source::Kernel && s.samples_used >= 8)
        {
            break sel;
        }
        assert!(Instant::now() < deadline, "no kernel estimate: {r:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // Ground truth: B runs 7 ms + 20 ppm·(t − start) ahead (same real clock).
    let truth = |at: u64| clock_b.apply(at) as f64 - at as f64;
    let err = (selected.offset_ns - truth(selected.at_local_ns)).abs();
    assert!(
        err <= selected.error_bound_ns,
        "error {err} ns, bound {}",
        selected.error_bound_ns
    );
    // On a direct (symmetric) link the kernel-stamped estimate stays within
    // 20 µs of the truth, poll after poll, and within its own bound in
    // (nearly) every poll.
    let (mut worst, mut outside): (f64, usize) = (0.0, 0);
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(100));
        let r = a.status().expect("agent answers");
        let sel = r.session.peers[0].selected.expect("an estimate");
        assert_eq!(sel.source, Source::Kernel);
        let err = (sel.offset_ns - truth(sel.at_local_ns)).abs();
        outside += usize::from(err > sel.error_bound_ns);
        worst = worst.max(err);
    }
    eprintln!(
        "direct veth: worst kernel-stamped error over 4 s: {:.1} µs, {outside}/40 polls outside the bound",
        worst / 1e3
    );
    assert!(
        outside <= 1,
        "{outside} of 40 estimates outside their bound"
    );
    assert!(
        worst <= 20_000.0,
        "kernel-stamped error {worst} ns above 20 µs"
    );

    // Malformed and forged datagrams from the peer's address are counted
    // and ignored; the estimate does not move beyond its bound.
    let a_addr = format!("{}:7339", link_pair.a_addr);
    link_pair.b.in_ns(move || {
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind");
        sock.send_to(b"not a probe", &a_addr).expect("send garbage");
        let mut forged = Probe::new(Kind::Response, 1, 2, 0xdead_beef);
        forged.stamps[probe::USER] = [1, 2, 3, 0];
        sock.send_to(&forged.encode(), &a_addr)
            .expect("send forged response");
        let mut truncated = forged.encode().to_vec();
        truncated.truncate(100);
        sock.send_to(&truncated, &a_addr)
            .expect("send truncated probe");
    });
    std::thread::sleep(Duration::from_millis(500));
    let r = a.status().expect("agent answers");
    assert!(r.session.ignored.malformed >= 2, "{:?}", r.session.ignored);
    let ex = r.session.peers[0].exchanges;
    assert!(ex.wrong_nonce + ex.unsolicited >= 1, "{ex:?}");
    let sel = r.session.peers[0].selected.expect("still an estimate");
    assert!((sel.offset_ns - truth(sel.at_local_ns)).abs() <= sel.error_bound_ns);

    // Only root or the agent's user may talk to it.
    let socket = a.socket();
    let mode = std::fs::metadata(&socket)
        .expect("socket exists")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let nobody = Command::new(causeway_bin())
        .args(["clock", "status", "--socket"])
        .arg(&socket)
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run causeway as nobody");
    assert!(
        !nobody.status.success(),
        "nobody was served: {}",
        String::from_utf8_lossy(&nobody.stdout)
    );

    // SIGTERM: the programs stay attached, the socket goes.
    let links = |r: &causeway::agent::report::AgentReport| {
        (r.interfaces[0].xdp_link_id, r.interfaces[0].tc_link_id)
    };
    let before = links(&first);
    assert!(a.stop().success(), "agent exits cleanly on SIGTERM");
    assert!(!socket.exists(), "control socket left behind");
    let paths = Layout::default()
        .iface(&NetnsScope::Named(a.netns.clone()), &a.iface)
        .expect("paths");
    for prog in [XDP_CLASSIFIER, TC_EGRESS] {
        let state = link::read_pinned(&paths.link_dir.join(prog)).expect("link still pinned");
        assert_ne!(state.ifindex, 0, "{prog} detached");
    }

    // Restart: both programs are adopted, not attached again.
    a.restart();
    let again = a.wait_ready();
    assert!(
        again.interfaces[0].xdp_adopted && again.interfaces[0].tc_adopted,
        "{again:?}"
    );
    assert_eq!(links(&again), before);
}
