//! The collective library reads the clock estimate that a real agent
//! publishes: two agents with synthetic clocks on a veth pair, the test
//! process opens A's pinned peer map through `causeway_collective::peer_clock`
//! and checks the offset against the ground truth within the reported bound.

use causeway_test_support::require_root;
use std::{
    net::IpAddr,
    path::Path,
    time::{Duration, Instant},
};

use bpf_maps::clock::{MAP_CLOCK_CONFIG, MAP_CLOCK_PEERS};
use causeway::{
    clock::{source::raw_tai_now, SyncClock},
    datapath::{Layout, NetnsScope},
};
use causeway_collective::peer_clock::{
    map_path, ClockSource, PeerClockError, PeerClocks, DEFAULT_PIN_ROOT,
};
use causeway_test_support::netns::VethLink;
use causeway_tests::clock_agent::{true_offset, Agent};

#[test]
fn the_collective_library_reads_the_agents_clock_estimate() {
    require_root!("the_collective_library_reads_the_agents_clock_estimate");
    let link = VethLink::new(95);
    let ip = |s: &str| s.parse::<IpAddr>().expect("test address");
    let epoch = raw_tai_now();
    let clock_a = SyncClock {
        offset_ns: 3_000_000,
        drift_ppb: -15_000,
        epoch_ns: epoch,
    };
    let clock_b = SyncClock {
        offset_ns: -9_000_000,
        drift_ppb: 40_000,
        epoch_ns: epoch,
    };
    let peer_b = ip(&link.b_addr);
    let a = Agent::start(link.a.name(), &link.a_if, 1, peer_b, clock_a);
    let _b = Agent::start(link.b.name(), &link.b_if, 2, ip(&link.a_addr), clock_b);
    a.wait_ready();

    // The library's path logic lands where the agent pins its maps.
    let scope = NetnsScope::Named(link.a.name().to_string());
    let maps_dir = Layout::default()
        .iface(&scope, &link.a_if)
        .expect("paths")
        .maps_dir;
    let path = map_path(Path::new(DEFAULT_PIN_ROOT), &scope.dir_name(), &link.a_if)
        .expect("valid path parts");
    assert_eq!(path, maps_dir.join(MAP_CLOCK_PEERS));
    let clocks = PeerClocks::open(&path).expect("open the pinned peer map");

    // A's local timescale is its synthetic clock over CLOCK_TAI.
    let local_now = || clock_a.apply(raw_tai_now());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = clocks.get_at(peer_b, local_now()).expect("lookup");
        if r.is_some_and(|r| r.source == ClockSource::Kernel && r.samples >= 8) {
            break;
        }
        assert!(Instant::now() < deadline, "no kernel estimate: {r:?}");
        std::thread::sleep(Duration::from_millis(200));
    }

    let (mut first_gen, mut last_gen) = (None, 0);
    let (mut outside_at_ref, mut worst_now, mut widest) = (0usize, 0.0f64, 0.0f64);
    const READS: usize = 20;
    for _ in 0..READS {
        let raw = raw_tai_now();
        let now = clock_a.apply(raw);
        let r = clocks
            .get_at(peer_b, now)
            .expect("lookup")
            .expect("still published");
        assert_eq!(r.source, ClockSource::Kernel);
        assert_eq!(r.at_local_ns, now);
        assert!(
            (0..2_000_000_000).contains(&r.age_ns()),
            "age {}",
            r.age_ns()
        );
        // Now, with the bound widened for the value's age.
        let err_now = r.offset_ns - true_offset(&clock_a, &clock_b, now);
        assert!(
            err_now.abs() <= r.error_bound_ns,
            "error {err_now} ns now, bound {} ns ({r:?})",
            r.error_bound_ns
        );
        // B's clock at the same instant, converted from A's timestamp.
        let on_b = r.to_peer_ns(now).expect("in range");
        let conv_err = on_b as i128 - clock_b.apply(raw) as i128;
        assert!(
            conv_err.unsigned_abs() as f64 <= r.error_bound_ns + 1.0,
            "conversion off by {conv_err} ns, bound {} ns",
            r.error_bound_ns
        );
        // At ref_ns the agent's own bound holds (the agent's test allows
        // an occasional miss; see clock_agent.rs).
        let err_ref = r.offset_at_ref_ns as f64 - true_offset(&clock_a, &clock_b, r.ref_ns);
        outside_at_ref += usize::from(err_ref.abs() > r.bound_at_ref_ns as f64 + 1.0);
        worst_now = worst_now.max(err_now.abs());
        widest = widest.max(r.error_bound_ns);
        first_gen.get_or_insert(r.generation);
        assert!(r.generation >= last_gen, "generation went back");
        last_gen = r.generation;
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "library reads: worst error now {:.1} µs, widest widened bound {:.1} µs, {outside_at_ref}/{READS} outside the bound at ref_ns, generations {first_gen:?}..{last_gen}",
        worst_now / 1e3,
        widest / 1e3
    );
    assert!(
        outside_at_ref <= 1,
        "{outside_at_ref} of {READS} reads outside the bound at ref_ns"
    );
    assert!(
        last_gen > first_gen.expect("read"),
        "the agent stopped publishing"
    );

    // An address the agent does not probe has no estimate.
    assert!(clocks.get(ip("10.77.95.9")).expect("lookup").is_none());

    // Wrong paths are clear errors naming the path.
    let missing = maps_dir.join("NO_SUCH_MAP");
    let e = PeerClocks::open(&missing).err().expect("missing pin");
    assert!(
        matches!(&e, PeerClockError::Open { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{e}"
    );
    assert!(e.to_string().contains(&*missing.to_string_lossy()), "{e}");
    let config = maps_dir.join(MAP_CLOCK_CONFIG);
    let e = PeerClocks::open(&config)
        .err()
        .expect("an array, not the peer map");
    assert!(matches!(e, PeerClockError::NotPeerMap { .. }), "{e}");
    assert!(e.to_string().contains(&*config.to_string_lossy()), "{e}");
    let plain = std::env::temp_dir().join(format!("cw-not-a-pin-{}", std::process::id()));
    std::fs::write(&plain, b"x").expect("write a plain file");
    let e = PeerClocks::open(&plain).err();
    let _ = std::fs::remove_file(&plain);
    let e = e.expect("a plain file is not a pin");
    assert!(matches!(e, PeerClockError::Open { .. }), "{e}");
}
