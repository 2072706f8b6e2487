use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;

const REF: u64 = 1_800_000_000_000_000_000;
const SEC: u64 = 1_000_000_000;

fn value(offset_ns: i64, drift_ppb: i64, bound: u64) -> PeerClock {
    PeerClock {
        ref_ns: REF,
        offset_ns,
        drift_ppb,
        error_bound_ns: bound,
        min_rtt_ns: 40_000,
        generation: 7,
        source: CLOCK_SOURCE_KERNEL,
        samples: 12,
        drift_bound_ppb: 3_000,
    }
}

fn reading(v: &PeerClock, at: u64, ppm: f64) -> PeerClockReading {
    PeerClockReading::from_value(v, at, Some(ppm)).expect("known source")
}

#[test]
fn offset_follows_the_drift_from_ref_ns() {
    let v = value(5_000_000, 20_000, 2_000);
    let later = reading(&v, REF + SEC, 0.0);
    assert_eq!(later.offset_ns, 5_020_000.0);
    assert_eq!(later.age_ns(), SEC as i64);
    let earlier = reading(&v, REF - SEC / 2, 0.0);
    assert_eq!(earlier.offset_ns, 4_990_000.0);
    assert_eq!(earlier.age_ns(), -(SEC as i64) / 2);
    assert_eq!(reading(&v, REF, 0.0).offset_ns, 5_000_000.0);
    // Fields are carried over unchanged.
    assert_eq!(
        (
            later.generation,
            later.samples,
            later.min_rtt_ns,
            later.source
        ),
        (7, 12, 40_000, ClockSource::Kernel)
    );
}

#[test]
fn bound_widens_with_age_in_both_directions() {
    let v = value(0, 0, 2_000);
    // 1000 ppm over 100 ms = 100 µs, plus the rounding ns.
    assert_eq!(
        reading(&v, REF + SEC / 10, 1000.0).error_bound_ns,
        102_001.0
    );
    assert_eq!(
        reading(&v, REF - SEC / 10, 1000.0).error_bound_ns,
        102_001.0
    );
    assert_eq!(reading(&v, REF, 1000.0).error_bound_ns, 2_001.0);
    assert_eq!(reading(&v, REF + SEC, 0.0).error_bound_ns, 2_001.0);
    let r = reading(&v, REF + SEC, WORST_DRIFT_ERROR_PPM);
    assert_eq!(r.bound_at(REF + 2 * SEC), 2_001.0 + 2e6);
    assert_eq!(r.bound_at_ref_ns, 2_000);
}

#[test]
fn the_published_drift_bound_widens_unless_the_caller_sets_one() {
    // 3000 ppb = 3 ppm: 300 ns per 100 ms.
    let v = value(0, 0, 2_000);
    let published = PeerClockReading::from_value(&v, REF + SEC / 10, None).expect("known");
    assert_eq!(published.drift_error_ppm, 3.0);
    assert!((published.error_bound_ns - 2_301.0).abs() < 1e-6);
    let own = PeerClockReading::from_value(&v, REF + SEC / 10, Some(10.0)).expect("known");
    assert!((own.error_bound_ns - 3_001.0).abs() < 1e-6);
}

#[test]
fn converts_local_time_to_the_peer_timeline() {
    let v = value(-7_000_000, 50_000, 0);
    let r = reading(&v, REF, 0.0);
    assert_eq!(r.to_peer_ns(REF), Some(REF - 7_000_000));
    assert_eq!(
        r.to_peer_ns(REF + 10 * SEC),
        Some(REF + 10 * SEC - 7_000_000 + 500_000)
    );
    // Before the peer's epoch there is no u64 reading.
    let r = reading(&value(-5, 0, 0), 0, 0.0);
    assert_eq!(r.to_peer_ns(0), None);
    assert_eq!(r.to_peer_ns(5), Some(0));
}

#[test]
fn sources_map_from_the_wire_and_unknown_ones_are_refused() {
    for (wire, s) in [
        (CLOCK_SOURCE_KERNEL, ClockSource::Kernel),
        (CLOCK_SOURCE_SO_TIMESTAMPING, ClockSource::SoTimestamping),
        (CLOCK_SOURCE_USERSPACE, ClockSource::Userspace),
    ] {
        assert_eq!(ClockSource::from_wire(wire), Some(s));
    }
    let mut v = value(0, 0, 0);
    for bad in [0, 4, u32::MAX] {
        v.source = bad;
        assert_eq!(PeerClockReading::from_value(&v, REF, Some(0.0)), None);
    }
}

#[test]
fn ipv4_peers_use_mapped_keys() {
    let k = PeerClockKey::from(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)));
    assert_eq!(
        k.addr,
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3]
    );
    let v6: Ipv6Addr = "fd00::1:2".parse().expect("address");
    assert_eq!(PeerClockKey::from(IpAddr::V6(v6)).addr, v6.octets());
}

#[test]
fn map_path_follows_the_agent_layout_and_refuses_odd_parts() {
    let p = map_path(Path::new(DEFAULT_PIN_ROOT), "netns-dc1", "eth0").expect("valid");
    assert_eq!(
        p,
        Path::new("/sys/fs/bpf/causeway/netns-dc1/eth0/maps/CW_CLK_PEERS")
    );
    for (scope, iface) in [("", "eth0"), ("root", ""), ("..", "eth0"), ("root", "a/b")] {
        let e = map_path(Path::new("/x"), scope, iface).expect_err("refused");
        assert!(matches!(e, PeerClockError::BadPathPart { .. }), "{e}");
    }
}

#[test]
fn read_stable_accepts_two_identical_copies() {
    let a = value(1, 0, 0);
    let mut b = value(2, 0, 0);
    b.generation = 8;
    // A torn copy (a's offset with b's generation) is never returned.
    let mut torn = a;
    torn.generation = 8;
    let mut reads = vec![Some(torn), Some(b), Some(b)].into_iter();
    let got = read_stable::<()>(READ_ATTEMPTS, || Ok(reads.next().expect("read")));
    assert_eq!(got, Ok(Some(b)));
    assert_eq!(reads.len(), 0);

    let mut reads = vec![None, None].into_iter();
    assert_eq!(
        read_stable::<()>(4, || Ok(reads.next().expect("read"))),
        Ok(None)
    );
    // Published between two lookups.
    let mut reads = vec![None, Some(a), Some(a)].into_iter();
    assert_eq!(
        read_stable::<()>(4, || Ok(reads.next().expect("read"))),
        Ok(Some(a))
    );
}

#[test]
fn read_stable_gives_up_after_the_attempts_and_passes_errors_on() {
    let mut n = 0u64;
    let got = read_stable::<()>(5, || {
        n += 1;
        let mut v = value(0, 0, 0);
        v.generation = n;
        Ok(Some(v))
    });
    assert_eq!((got, n), (Err(None), 5));
    let mut calls = 0;
    let got = read_stable(5, || {
        calls += 1;
        if calls == 2 {
            Err("lookup failed")
        } else {
            Ok(None)
        }
    });
    assert_eq!((got, calls), (Err(Some("lookup failed")), 2));
}

#[test]
fn env_unset_and_missing_pins_are_clear_errors() {
    let e = PeerClocks::open_env_value(None).err().expect("unset");
    assert!(e.to_string().contains(CLOCK_MAP_ENV), "{e}");
    let path = "/sys/fs/bpf/causeway-no-such-dir/CW_CLK_PEERS";
    let e = PeerClocks::open_env_value(Some(path.into()))
        .err()
        .expect("missing");
    assert!(matches!(e, PeerClockError::Open { .. }), "{e}");
    assert!(e.to_string().contains(path), "{e}");
}

#[test]
fn drift_error_must_be_finite_and_non_negative() {
    assert_eq!(check_drift_error_ppm(0.0).ok(), Some(0.0));
    assert_eq!(check_drift_error_ppm(5.0).ok(), Some(5.0));
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        let e = check_drift_error_ppm(bad).expect_err("refused");
        assert!(matches!(e, PeerClockError::BadDriftError(_)), "{e}");
    }
}

proptest! {
    /// Whenever the published offset is within its bound at ref_ns and the
    /// published drift within the assumed drift error of the truth, the
    /// truth at any other time is within the widened bound.
    #[test]
    fn widened_bound_covers_every_truth_the_assumptions_allow(
        offset in -1_000_000_000i64..1_000_000_000,
        drift_ppb in -500_000i64..500_000,
        bound in 0u64..1_000_000,
        ref_err in -1.0f64..=1.0,
        drift_err in -1.0f64..=1.0,
        ppm in 0.0f64..1000.0,
        gap in -100_000_000_000i64..100_000_000_000,
    ) {
        let v = value(offset, drift_ppb, bound);
        let at = REF.checked_add_signed(gap).expect("in range");
        let r = reading(&v, at, ppm);
        let true_at_ref = offset as f64 + ref_err * bound as f64;
        let true_drift = drift_ppb as f64 * 1e-9 + drift_err * ppm * 1e-6;
        let truth = true_at_ref + true_drift * gap as f64;
        prop_assert!((truth - r.offset_ns).abs() <= r.error_bound_ns,
            "truth {truth} reading {} bound {}", r.offset_ns, r.error_bound_ns);
        let peer = r.to_peer_ns(at).expect("in range");
        let peer_minus_local = (i128::from(peer) - i128::from(at)) as f64;
        prop_assert!((peer_minus_local - truth).abs() <= r.error_bound_ns + 1.0);
    }
}
