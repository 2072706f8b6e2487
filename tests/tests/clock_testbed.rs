//! Two `causeway agent`s in two domains of the netsim testbed (wan40), each
//! with a synthetic clock error (offset + drift): the estimation error of
//! each timestamp source against the ground truth, side by side, without
//! jitter and with 1 ms jitter on the WAN path.
//!
//! Targets (kernel stamps): p99 |error| ≤ 20 µs without jitter, ≤ 100 µs
//! with 1 ms jitter; and the error stays within the agent's own bound.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    time::{Duration, Instant},
};

use causeway::{
    clock::{maps::ClockMaps, source::raw_tai_now, Source, SyncClock},
    datapath::{Layout, NetnsScope},
};
use causeway_netsim::{params::ParamsPatch, Profile, Testbed};
use causeway_tests::{clock_agent::Agent, netsim_support::root_or_skip};

/// Ground truth: peer clock minus local clock when the local clock reads `local`.
fn true_offset(local_clock: &SyncClock, peer_clock: &SyncClock, local: u64) -> f64 {
    let e = local_clock.epoch_ns as i128;
    let x = (local as i128 - i128::from(local_clock.offset_ns) - e) as f64
        / (1.0 + local_clock.drift_ppb as f64 * 1e-9);
    let raw = (e + x.round() as i128) as u64;
    (peer_clock.apply(raw) as i128 - local as i128) as f64
}

struct Errors {
    abs: Vec<f64>,
    /// |error| of the regression fit alone (diagnostics).
    fit_abs: Vec<f64>,
    within_bound: usize,
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Runs both agents for `warmup` + `measure`, polling A's estimate of B.
fn phase(
    tb: &Testbed,
    label: &str,
    warmup: Duration,
    measure: Duration,
) -> BTreeMap<Source, Errors> {
    let (a, b) = (tb.host(0, 0), tb.host(1, 0));
    let epoch = raw_tai_now();
    let clock_a = SyncClock {
        offset_ns: 5_000_000,
        drift_ppb: -30_000,
        epoch_ns: epoch,
    };
    let clock_b = SyncClock {
        offset_ns: -20_000_000,
        drift_ppb: 70_000,
        epoch_ns: epoch,
    };
    let agent_a = Agent::start(&a.netns, "eth0", 1, IpAddr::V4(b.ip), clock_a);
    let agent_b = Agent::start(&b.netns, "eth0", 2, IpAddr::V4(a.ip), clock_b);
    agent_a.wait_ready();
    agent_b.wait_ready();
    std::thread::sleep(warmup);
    let mut errors: BTreeMap<Source, Errors> = BTreeMap::new();
    let end = Instant::now() + measure;
    let mut last = None;
    while Instant::now() < end {
        let r = agent_a.status().expect("agent A answers");
        let peer = r.session.peers.first().expect("one peer");
        for s in &peer.sources {
            let err = s.offset_ns - true_offset(&clock_a, &clock_b, s.at_local_ns);
            let e = errors.entry(s.source).or_insert(Errors {
                abs: Vec::new(),
                fit_abs: Vec::new(),
                within_bound: 0,
            });
            e.abs.push(err.abs());
            let fit_err = s.fit_offset_ns - true_offset(&clock_a, &clock_b, s.at_local_ns);
            e.fit_abs.push(fit_err.abs());
            e.within_bound += usize::from(err.abs() <= s.error_bound_ns);
        }
        last = Some(r);
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = last.expect("measured at least once");
    // The published map value is the selected estimate.
    let scope = NetnsScope::Named(a.netns.clone());
    let paths = Layout::default().iface(&scope, "eth0").expect("paths");
    let maps = ClockMaps::from_pins(&paths.maps_dir).expect("pinned clock maps");
    let published = maps
        .peer(IpAddr::V4(b.ip))
        .expect("map lookup")
        .expect("estimate published");
    assert_eq!(
        published.source,
        Source::Kernel.wire(),
        "{label}: the kernel source must be selected"
    );
    let iface = &r.interfaces[0];
    eprintln!(
        "{label}: A stamped rx {} tx {} (skipped {}), session: {:?}",
        iface.stamps_rx, iface.stamps_tx, iface.stamps_skipped, r.session.ignored
    );
    eprintln!(
        "{label}: {:<16} {:>8} {:>10} {:>10} {:>10} {:>13} {:>14}",
        "source", "n", "p50 µs", "p99 µs", "max µs", "within bound", "fit-only p99"
    );
    for (s, e) in &errors {
        eprintln!(
            "{label}: {:<16} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>12.1}% {:>14.1}",
            s.to_string(),
            e.abs.len(),
            quantile(&e.abs, 0.5) / 1e3,
            quantile(&e.abs, 0.99) / 1e3,
            quantile(&e.abs, 1.0) / 1e3,
            100.0 * e.within_bound as f64 / e.abs.len() as f64,
            quantile(&e.fit_abs, 0.99) / 1e3
        );
    }
    errors
}

fn check_kernel(errors: &BTreeMap<Source, Errors>, label: &str, p99_target_ns: f64) {
    let k = errors
        .get(&Source::Kernel)
        .unwrap_or_else(|| panic!("{label}: no kernel-stamped estimate"));
    let p99 = quantile(&k.abs, 0.99);
    assert!(
        p99 <= p99_target_ns,
        "{label}: kernel p99 |error| {p99:.0} ns above {p99_target_ns} ns"
    );
    let within = k.within_bound as f64 / k.abs.len() as f64;
    assert!(
        within >= 0.99,
        "{label}: error within the bound in only {:.1} %",
        within * 100.0
    );
}

#[test]
fn clock_sync_over_wan40_per_timestamp_source() {
    if !root_or_skip("clock_sync_over_wan40_per_timestamp_source") {
        return;
    }
    let tb = Testbed::builder()
        .domains(2)
        .hosts_per_domain(1)
        .wan(Profile::Wan40)
        .build()
        .expect("build the testbed");
    let warmup = Duration::from_secs(8);
    let measure = Duration::from_secs(15);
    let calm = phase(&tb, "wan40", warmup, measure);
    tb.set_path(
        0,
        &ParamsPatch {
            jitter_ns: Some(1_000_000),
            ..Default::default()
        },
    )
    .expect("set jitter");
    let jittery = phase(&tb, "wan40+1ms jitter", warmup, measure);
    check_kernel(&calm, "wan40", 20_000.0);
    check_kernel(&jittery, "wan40+1ms jitter", 100_000.0);
}
