//! The chrony reference of the clock benchmark on a plain veth link: both
//! `chronyd -x` come up, the client synchronises and finds the frequency
//! error its virtual clock was seeded with, its error against the shared
//! host clock is small, and nothing — process or file — outlives the pair,
//! also when the test panics.

use std::{
    panic::{catch_unwind, AssertUnwindSafe},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use causeway_test_support::{netns::VethLink, root_or_skip};
use causeway_tests::chrony::{self, ChronyPair, PairSpec, Programs};

fn programs_or_skip(test: &str) -> Option<Programs> {
    if !root_or_skip(test) {
        return None;
    }
    match chrony::installed() {
        Ok(p) => Some(p),
        Err(e) => {
            // `cargo xtask setup` installs chrony: missing under CI is a failure.
            assert!(
                !causeway_test_support::root::under_ci(),
                "{test}: chrony unavailable under CI: {e}"
            );
            eprintln!("SKIP: {test}: chrony unavailable: {e}");
            None
        }
    }
}

fn start(programs: &Programs, link: &VethLink) -> ChronyPair {
    ChronyPair::start(
        programs,
        &PairSpec {
            server_netns: link.b.name(),
            server_ip: link.b_addr.parse().expect("IPv4 address"),
            client_netns: link.a.name(),
            client_freq_error_ppm: 100.0,
        },
    )
    .expect("start the chrony pair")
}

fn assert_gone(pids: [Option<u32>; 2], dir: &Path) {
    for pid in pids.into_iter().flatten() {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "chronyd {pid} outlived its pair"
        );
    }
    assert!(!dir.exists(), "{} outlived its pair", dir.display());
}

#[test]
fn chrony_pair_tracks_the_shared_clock_and_leaves_nothing_behind() {
    let Some(programs) = programs_or_skip("chrony_pair_tracks_the_shared_clock") else {
        return;
    };
    let link = VethLink::new(123);
    let pair = start(&programs, &link);
    let (pids, dir) = (pair.pids(), pair.dir().to_path_buf());
    assert!(pids.iter().all(Option::is_some));
    assert!(
        chrony::clock_adjusting_chronyds().is_empty(),
        "only chronyd -x may run: {:?}",
        chrony::clock_adjusting_chronyds()
    );
    // On a LAN chrony polls every 1/16 s: it synchronises within seconds
    // and then corrects the 100 ppm it started with.
    let deadline = Instant::now() + Duration::from_secs(30);
    let tracking = loop {
        let t = pair.client_tracking().expect("client answers");
        if t.synchronised() && t.freq_ppm.abs() < 5.0 {
            break t;
        }
        assert!(Instant::now() < deadline, "not converged: {t:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(tracking.stratum, 2, "{tracking:?}");
    let server = pair.server_tracking().expect("server answers");
    assert_eq!(server.stratum, 1, "{server:?}");
    assert_eq!(server.correction_s, 0.0, "the server's clock is the host's");
    for _ in 0..5 {
        let s = pair.error_sample().expect("sample");
        assert!(s.synchronised);
        assert!(s.error_ns.abs() < 100_000.0, "error {} ns", s.error_ns);
        assert!(s.bound_ns > 0.0, "{s:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The bench's poller: only the polls of the last `measure` count.
    let (value, errors) = chrony::measure_alongside(&pair, Duration::from_secs(2), || {
        std::thread::sleep(Duration::from_secs(3));
        7
    });
    assert_eq!(value, 7);
    assert!((8..=11).contains(&errors.abs.len()), "{errors:?}");
    assert_eq!((errors.failed, errors.unsynchronised), (0, 0), "{errors:?}");
    // chrony's maximum error (root delay / 2 + root dispersion) is its
    // estimate, not a guarantee: on a veth its errors sit close to it
    // (about 1.4 µs each), and under load a few polls exceed it (a CI run
    // saw 8 of 10 within). The benchmark reports the share; here it must be
    // counted and hold for most polls.
    assert!(errors.within_bound <= errors.abs.len(), "{errors:?}");
    assert!(2 * errors.within_bound >= errors.abs.len(), "{errors:?}");
    assert!(errors.abs.iter().all(|e| *e < 100_000.0), "{errors:?}");
    let log = pair.client_log().expect("measurements.log");
    assert!(log.samples > 10, "{log:?}");
    assert!(
        log.polls.contains_key(&-4),
        "sub-second polls on a LAN: {log:?}"
    );
    drop(pair);
    assert_gone(pids, &dir);
}

#[test]
fn chrony_pair_is_torn_down_when_a_test_panics() {
    let Some(programs) = programs_or_skip("chrony_pair_is_torn_down_when_a_test_panics") else {
        return;
    };
    let link = VethLink::new(124);
    let mut seen: Option<([Option<u32>; 2], PathBuf)> = None;
    let result = catch_unwind(AssertUnwindSafe(|| {
        let pair = start(&programs, &link);
        seen = Some((pair.pids(), pair.dir().to_path_buf()));
        panic!("a failing test");
    }));
    assert!(result.is_err());
    let (pids, dir) = seen.expect("the pair started");
    assert_gone(pids, &dir);
}
