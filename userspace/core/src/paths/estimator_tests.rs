//! The path estimator on virtual time: probes every 100 ms, replies after
//! the path's RTT unless the test drops them.

use super::estimator::{EstimatorConfig, PathEstimator, PathState};

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;
const INTERVAL: u64 = 100 * MS;

/// A probed path on virtual time.
struct Probed {
    est: PathEstimator,
    now: u64,
    seq: u64,
}

impl Probed {
    fn new() -> Self {
        Probed {
            est: PathEstimator::new(EstimatorConfig::default()),
            now: 0,
            seq: 0,
        }
    }

    /// One probe interval: a probe goes out now and, unless `lost`, its
    /// reply comes `rtt` later.
    fn step(&mut self, rtt: u64, lost: bool) {
        self.seq += 1;
        self.est.probe_sent(self.seq, self.now);
        if !lost {
            assert_eq!(
                self.est.probe_reply(self.seq, self.now + rtt),
                Some(rtt),
                "a fresh reply gives its RTT"
            );
        }
        self.now += INTERVAL;
        self.est.tick(self.now);
    }

    fn run(&mut self, for_ns: u64, rtt: u64, lost: impl Fn(u64) -> bool) {
        let end = self.now + for_ns;
        while self.now < end {
            let l = lost(self.seq + 1);
            self.step(rtt, l);
        }
    }
}

#[test]
fn smoothed_rtt_follows_a_step_and_the_minimum_keeps_its_window() {
    let mut p = Probed::new();
    p.run(5 * S, 40 * MS, |_| false);
    let e = p.est.estimate(p.now);
    assert_eq!(e.state, PathState::Up);
    assert!((e.srtt_ns - 40e6).abs() < 1e3, "{}", e.srtt_ns);
    assert_eq!(e.min_rtt_ns, 40 * MS);
    // RTT doubles: within 3 s (30 samples) srtt is within 2 % of it.
    p.run(3 * S, 80 * MS, |_| false);
    let e = p.est.estimate(p.now);
    assert!((e.srtt_ns - 80e6).abs() < 0.02 * 80e6, "{}", e.srtt_ns);
    assert_eq!(e.min_rtt_ns, 40 * MS, "the minimum holds for its window");
    p.run(8 * S, 80 * MS, |_| false);
    assert_eq!(p.est.estimate(p.now).min_rtt_ns, 80 * MS, "then expires");
}

#[test]
fn bandwidth_is_the_windowed_maximum_and_follows_a_drop_after_the_window() {
    let mut est = PathEstimator::new(EstimatorConfig::default());
    let mut now = 0;
    while now < 5 * S {
        est.delivery_sample(25e6, false, now);
        now += INTERVAL;
    }
    assert_eq!(est.estimate(now).bw_bytes_per_s, 25e6);
    // The path's rate halves at 5 s: the max filter holds 25 MB/s for its
    // 2 s window, then follows.
    let drop_at = now;
    let mut followed_at = None;
    while now < drop_at + 4 * S {
        est.delivery_sample(12.5e6, false, now);
        if followed_at.is_none() && est.estimate(now).bw_bytes_per_s == 12.5e6 {
            followed_at = Some(now);
        }
        now += INTERVAL;
    }
    let lag = followed_at.expect("the estimate followed") - drop_at;
    assert!(
        (2 * S..=2 * S + 2 * INTERVAL).contains(&lag),
        "followed after {lag} ns"
    );
    // App-limited samples below the estimate do not lower it; above, they raise it.
    est.delivery_sample(1e6, true, now);
    assert_eq!(est.estimate(now).bw_bytes_per_s, 12.5e6);
    est.delivery_sample(20e6, true, now);
    assert_eq!(est.estimate(now).bw_bytes_per_s, 20e6);
    // Idle: every sample ages out, the last estimate stays with its age.
    let e = est.estimate(now + 10 * S);
    assert_eq!(e.bw_bytes_per_s, 20e6);
    assert_eq!(e.bw_age_ns, 10 * S);
    // Nonsense samples are ignored.
    est.delivery_sample(f64::NAN, false, now);
    est.delivery_sample(-1.0, false, now);
    assert_eq!(est.estimate(now).bw_bytes_per_s, 20e6);
}

#[test]
fn a_packet_train_gives_a_bandwidth_sample() {
    let mut est = PathEstimator::new(EstimatorConfig::default());
    // 10 frames of 1500 bytes, 540 µs from first to last: 9 × 1500 B / 540 µs.
    est.train_sample(10, 1500, 540_000, 0);
    assert!((est.estimate(0).bw_bytes_per_s - 25e6).abs() < 1.0);
    est.train_sample(1, 1500, 0, 0);
    assert!((est.estimate(0).bw_bytes_per_s - 25e6).abs() < 1.0);
}

#[test]
fn loss_rate_tracks_random_loss_and_a_burst_then_decays() {
    let mut p = Probed::new();
    // Every 10th probe lost, for 20 s.
    p.run(20 * S, 40 * MS, |seq| seq % 10 == 0);
    let steady = p.est.estimate(p.now).loss;
    assert!((0.05..0.16).contains(&steady), "{steady}");
    assert_eq!(p.est.estimate(p.now).state, PathState::Up);
    // A burst of 5 lost probes (0.5 s: not long enough to be down).
    p.run(5 * INTERVAL, 40 * MS, |_| true);
    p.run(2 * INTERVAL, 40 * MS, |_| false);
    let burst = p.est.estimate(p.now);
    assert!(burst.loss > steady + 0.15, "{} vs {steady}", burst.loss);
    assert_eq!(
        burst.state,
        PathState::Up,
        "a 0.5 s burst is not a dead path"
    );
    // Then no loss: back under 2 % within 10 s.
    p.run(10 * S, 40 * MS, |_| false);
    assert!(p.est.estimate(p.now).loss < 0.02);
}

#[test]
fn a_dead_path_is_down_within_its_bound_and_up_after_replies_in_a_row() {
    let mut p = Probed::new();
    p.run(5 * S, 40 * MS, |_| false);
    let cut = p.now;
    let mut down_at = None;
    while p.now < cut + 3 * S {
        p.step(40 * MS, true);
        if down_at.is_none() && matches!(p.est.estimate(p.now).state, PathState::Down { .. }) {
            down_at = Some(p.now);
        }
    }
    // The last reply came 40 ms after the last probe before the cut.
    let after = down_at.expect("declared down") - cut;
    assert!(
        (900 * MS..=1_000 * MS + INTERVAL).contains(&after),
        "down {after} ns after the cut"
    );
    // The outage is not random loss: the rate is what it was before it.
    assert!(p.est.estimate(p.now).loss < 1e-9);
    // Two replies are not enough; the third in a row brings it back.
    p.step(40 * MS, false);
    p.step(40 * MS, false);
    assert!(matches!(
        p.est.estimate(p.now).state,
        PathState::Down { replies: 2 }
    ));
    p.step(40 * MS, false);
    assert_eq!(p.est.estimate(p.now).state, PathState::Up);
}

#[test]
fn a_flapping_path_needs_replies_in_a_row_to_come_back() {
    let mut p = Probed::new();
    p.run(2 * S, 40 * MS, |_| false);
    p.run(2 * S, 40 * MS, |_| true);
    assert!(matches!(
        p.est.estimate(p.now).state,
        PathState::Down { .. }
    ));
    // Alternating reply / loss for 5 s: never three replies in a row.
    p.run(5 * S, 40 * MS, |seq| seq % 2 == 0);
    assert!(
        matches!(p.est.estimate(p.now).state, PathState::Down { .. }),
        "a flapping path stays down"
    );
}

#[test]
fn late_and_duplicate_replies_are_not_counted() {
    let mut est = PathEstimator::new(EstimatorConfig::default());
    est.probe_sent(1, 0);
    assert_eq!(est.probe_reply(1, 40 * MS), Some(40 * MS));
    assert_eq!(est.probe_reply(1, 41 * MS), None, "duplicate");
    assert_eq!(est.probe_reply(7, 41 * MS), None, "never sent");
    est.probe_sent(2, 500 * MS);
    // Counted lost after the loss timeout (200 ms floor here)...
    est.tick(800 * MS);
    let lost = est.estimate(800 * MS).loss;
    assert!(lost > 0.0);
    // ...so its late reply neither gives an RTT nor undoes the loss.
    assert_eq!(est.probe_reply(2, 900 * MS), None);
    assert_eq!(est.estimate(900 * MS).loss, lost);
}

#[test]
fn rtts_observed_elsewhere_feed_the_smoothed_rtt_and_minimum_only() {
    let mut est = PathEstimator::new(EstimatorConfig::default());
    for k in 0..20 {
        est.rtt_observed(if k == 10 { 60 * MS } else { 40 * MS }, k * 10 * MS);
    }
    est.rtt_observed(0, 200 * MS);
    let e = est.estimate(200 * MS);
    assert_eq!(e.min_rtt_ns, 40 * MS);
    assert!((e.srtt_ns / (40 * MS) as f64 - 1.0).abs() < 0.05, "{e:?}");
    assert_eq!(e.loss, 0.0);
    assert_eq!(e.state, PathState::Unknown, "no probe reply: state unknown");
}
