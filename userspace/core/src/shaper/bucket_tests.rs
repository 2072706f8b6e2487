//! Virtual-clock tests of the GCRA model.

use super::*;
use bpf_maps::shaper::{qdisc_burst_bytes, MAX_CHARGED_LEN};
use proptest::prelude::*;

const MTU_FRAME: u64 = 1514;

fn params(rate_bits: u64, burst_bytes: u64) -> BucketParams {
    BucketParams::new(rate_bits, burst_bytes, MTU_FRAME)
        .expect("valid test parameters")
        .without_qdisc_burst()
}

#[test]
fn the_tolerance_is_the_burst_on_top_of_the_qdisc_burst() {
    // The program counts arrivals at HTB, which sends its own burst ahead
    // of the rate: the class's burst is what is left for a backlog.
    for (rate_bits, burst) in [
        (20_000_000u64, 256 * 1024u64),
        (200_000_000, 256 * 1024),
        (800_000_000, 1_000_000),
        (10_000_000_000, 12_500_000),
        (1_000_000, 1514),
    ] {
        let p = BucketParams::new(rate_bits, burst, MTU_FRAME).expect("valid");
        let qdisc = qdisc_burst_bytes(rate_bits, burst);
        let expected = (u128::from(burst + qdisc) * u128::from(p.ns_per_byte_q16())) >> 16;
        assert_eq!(u128::from(p.burst_ns()), expected, "{rate_bits} bit/s");
        // With the default burst (10 ms at the ceiling) HTB's burst is as
        // large as the class's; the tolerance must still be twice that.
        assert!(p.burst_ns() >= 2 * frame_cost(qdisc.min(burst) as u32, p.ns_per_byte_q16()));
    }
    // 200 Mbit/s, 256 KiB: HTB sends 250 000 bytes ahead of the rate.
    assert_eq!(qdisc_burst_bytes(200_000_000, 256 * 1024), 250_000);
}

/// Offers `len`-byte frames every `gap_ns` for `duration_ns`; returns the
/// bytes admitted.
fn run_greedy(p: &BucketParams, len: u32, gap_ns: u64, duration_ns: u64, start: u64) -> u64 {
    let bucket = SharedBucket::new(0);
    let mut admitted = 0u64;
    let mut now = start;
    while now < start + duration_ns {
        if bucket.admit(now, len, p) {
            admitted += u64::from(len);
        }
        now += gap_ns;
    }
    admitted
}

#[test]
fn long_run_rate_is_accurate_across_rates() {
    // Frames offered at twice the rate for ~80 000 admitted frames or 60
    // virtual seconds, whichever is shorter.
    for rate_bits in [
        10_000_000u64,
        50_000_000,
        200_000_000,
        1_000_000_000,
        100_000_000_000,
    ] {
        let p = params(rate_bits, 64 * 1024);
        let len = 1514u32;
        let frame_ns = u64::from(len) * 8 * 1_000_000_000 / rate_bits;
        let gap = (frame_ns / 2).max(1);
        let duration = (frame_ns * 80_000).min(60_000_000_000);
        let admitted = run_greedy(&p, len, gap, duration, 1_000);
        // The rate, the burst, and the one frame the bucket may owe.
        let expected = (rate_bits as f64 / 8.0) * (duration as f64 / 1e9)
            + p.burst_bytes() as f64
            + f64::from(len);
        let err = (admitted as f64 - expected).abs() / expected;
        assert!(
            err < 1e-3,
            "rate {rate_bits}: admitted {admitted}, expected {expected}, error {err}"
        );
    }
}

#[test]
fn idle_bucket_admits_exactly_the_burst_back_to_back() {
    let p = params(100_000_000, 10 * 1500);
    let bucket = SharedBucket::new(0);
    let now = 5_000_000_000;
    let n = (0..100).take_while(|_| bucket.admit(now, 1500, &p)).count();
    assert_eq!(n, 10);
    // One frame time later exactly one more frame fits.
    let later = now + frame_cost(1500, p.ns_per_byte_q16());
    assert!(bucket.admit(later, 1500, &p));
    assert!(!bucket.admit(later, 1500, &p));
}

#[test]
fn idle_refill_is_capped_at_the_burst() {
    let p = params(10_000_000, 4 * 1514);
    let bucket = SharedBucket::new(0);
    assert!(bucket.admit(1, 1514, &p));
    // An hour of silence does not bank more than the burst.
    let now = 3_600_000_000_000;
    let n = (0..1000)
        .take_while(|_| bucket.admit(now, 1514, &p))
        .count();
    assert_eq!(n, 4);
}

#[test]
fn over_limit_frames_leave_the_bucket_unchanged() {
    let p = params(10_000_000, 1514);
    let bucket = SharedBucket::new(0);
    assert!(bucket.admit(1_000, 1514, &p));
    let tat = bucket.tat();
    assert!(!bucket.admit(1_000, 1514, &p));
    assert_eq!(bucket.tat(), tat);
}

#[test]
fn oversize_frames_pass_only_from_a_full_bucket_and_keep_the_rate() {
    // 64 KiB GSO frames against a 3000-byte burst. An oversize frame waits
    // for a full bucket, so the time between the bucket filling and the next
    // offer is lost: offered every 10 µs that is < 0.2% of 5.2 ms per frame.
    let p = params(100_000_000, 3000);
    let bucket = SharedBucket::new(0);
    assert!(bucket.admit(0, 65_536, &p));
    assert!(!bucket.admit(1, 65_536, &p));
    let admitted = run_greedy(&p, 65_536, 10_000, 10_000_000_000, 0);
    let expected = 100_000_000.0 / 8.0 * 10.0;
    let err = (admitted as f64 - expected).abs() / expected;
    assert!(err < 0.01, "admitted {admitted}, expected {expected}");
}

#[test]
fn parameters_are_validated() {
    assert_eq!(
        BucketParams::new(0, 10_000, MTU_FRAME),
        Err(BucketError::RateOutOfRange { rate_bits: 0 })
    );
    assert!(BucketParams::new(MAX_RATE_BITS + 1, 10_000, MTU_FRAME).is_err());
    assert_eq!(
        BucketParams::new(1_000_000, 1000, MTU_FRAME),
        Err(BucketError::BurstBelowFrame {
            burst_bytes: 1000,
            min_bytes: MTU_FRAME
        })
    );
    // 100 MB at 8 kbit/s would take 100 000 s.
    assert!(matches!(
        BucketParams::new(MIN_RATE_BITS, 100_000_000, MTU_FRAME),
        Err(BucketError::BurstTooLong { .. })
    ));
    let p = params(1_000_000_000, 1514);
    assert_eq!(p.ns_per_byte_q16(), 8 << 16);
    assert_eq!(p.burst_ns(), 1514 * 8);
}

#[test]
fn extremes_do_not_overflow() {
    for p in [
        params(MIN_RATE_BITS, MTU_FRAME),
        params(MAX_RATE_BITS, 1 << 30),
    ] {
        for (tat, now) in [
            (0, 0),
            (u64::MAX, 0),
            (0, u64::MAX),
            (u64::MAX, u64::MAX),
            (u64::MAX - 1, u64::MAX),
        ] {
            for len in [0u32, 1, 1514, MAX_CHARGED_LEN, u32::MAX] {
                match decide(tat, now, len, p.ns_per_byte_q16(), p.burst_ns()) {
                    Decision::Conform { new_tat } => assert!(new_tat >= tat.max(now)),
                    Decision::OverLimit => assert!(tat > now),
                }
            }
        }
    }
    // The largest charged frame at the slowest rate fits in a u64.
    let slow = params(MIN_RATE_BITS, MTU_FRAME);
    assert_eq!(
        frame_cost(u32::MAX, slow.ns_per_byte_q16()),
        frame_cost(MAX_CHARGED_LEN, slow.ns_per_byte_q16())
    );
    assert_eq!(
        frame_cost(MAX_CHARGED_LEN, slow.ns_per_byte_q16()),
        u64::from(MAX_CHARGED_LEN) * 1_000_000
    );
}

proptest! {
    /// Over any window, admitted bytes never exceed burst + rate × window
    /// (plus one frame of rounding), whatever the arrival pattern.
    #[test]
    fn admitted_bytes_respect_the_envelope(
        rate_mbit in 1u64..10_000,
        burst in 1514u64..200_000,
        arrivals in proptest::collection::vec((0u64..2_000_000, 64u32..9000), 1..400),
    ) {
        let p = params(rate_mbit * 1_000_000, burst);
        let bucket = SharedBucket::new(0);
        let mut now = 1_000_000_000u64;
        let mut log = Vec::new();
        for (gap, len) in arrivals {
            now += gap;
            if bucket.admit(now, len, &p) {
                log.push((now, len));
            }
        }
        let max_len = 9000u64;
        for i in 0..log.len() {
            let mut bytes = 0u64;
            for &(t, len) in &log[i..] {
                bytes += u64::from(len);
                let window_ns = t - log[i].0;
                let allowed = burst + max_len + (u128::from(window_ns) * u128::from(p.rate_bits()) / 8_000_000_000) as u64;
                prop_assert!(bytes <= allowed, "{bytes} bytes in {window_ns} ns, allowed {allowed}");
            }
        }
    }
}

#[test]
fn threads_sharing_a_bucket_admit_exactly_the_serial_burst() {
    let p = params(1_000_000_000, 100 * 1500);
    for _ in 0..20 {
        let bucket = SharedBucket::new(0);
        let now = 42_000_000_000;
        let admitted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..200).filter(|_| bucket.admit(now, 1500, &p)).count()))
                .collect();
            handles.into_iter().map(|h| h.join().expect("thread")).sum()
        });
        // CAS exhaustion can only refuse frames, never admit extra ones.
        assert!(admitted <= 100, "{admitted} frames admitted");
        assert!(
            admitted >= 90,
            "{admitted} frames admitted: CAS refused too many"
        );
        assert_eq!(bucket.tat(), now + 1500 * 8 * admitted as u64);
    }
}

/// One CPU running the kernel's CAS loop, one step at a time.
#[derive(Clone, Debug)]
struct Cpu {
    now: u64,
    frames: Vec<u32>,
    seen: Option<u64>,
    attempts: u32,
}

/// Explores every interleaving of the CPUs' load and CAS steps; checks that
/// the successful CASes, replayed serially, produce the same states
/// (linearizability) and that no frame is admitted twice or lost.
fn explore(
    cpus: Vec<Cpu>,
    tat: u64,
    commits: Vec<(u64, u32, u64)>,
    p: &BucketParams,
    histories: &mut u64,
) {
    if cpus.iter().all(|c| c.frames.is_empty()) {
        *histories += 1;
        let mut serial = 0u64;
        for &(now, len, new_tat) in &commits {
            match decide(serial, now, len, p.ns_per_byte_q16(), p.burst_ns()) {
                Decision::Conform { new_tat: n } => {
                    assert_eq!(n, new_tat, "commit differs from serial replay")
                }
                Decision::OverLimit => {
                    panic!("a committed frame is over the limit in serial replay")
                }
            }
            serial = new_tat;
        }
        assert_eq!(serial, tat);
        return;
    }
    for i in 0..cpus.len() {
        let Some(&len) = cpus[i].frames.first() else {
            continue;
        };
        let mut next = cpus.clone();
        let mut commits = commits.clone();
        let mut tat_next = tat;
        let cpu = &mut next[i];
        match cpu.seen {
            None => cpu.seen = Some(tat),
            Some(seen) => match decide(seen, cpu.now, len, p.ns_per_byte_q16(), p.burst_ns()) {
                Decision::OverLimit => {
                    cpu.frames.remove(0);
                    cpu.seen = None;
                    cpu.attempts = 0;
                }
                Decision::Conform { new_tat } if tat == seen => {
                    tat_next = new_tat;
                    commits.push((cpu.now, len, new_tat));
                    cpu.frames.remove(0);
                    cpu.seen = None;
                    cpu.attempts = 0;
                }
                Decision::Conform { .. } => {
                    cpu.attempts += 1;
                    cpu.seen = None;
                    if cpu.attempts == MAX_CAS_ATTEMPTS {
                        cpu.frames.remove(0);
                        cpu.attempts = 0;
                    }
                }
            },
        }
        explore(next, tat_next, commits, p, histories);
    }
}

#[test]
fn every_interleaving_of_three_cpus_is_linearizable() {
    // Burst of 3 frames; CPUs with skewed clocks contend for it.
    let p = params(1_000_000_000, 3 * 1000 + 514);
    let cpus = vec![
        Cpu {
            now: 1_000_000,
            frames: vec![1000, 1500],
            seen: None,
            attempts: 0,
        },
        Cpu {
            now: 1_000_100,
            frames: vec![1000, 64],
            seen: None,
            attempts: 0,
        },
        Cpu {
            now: 999_950,
            frames: vec![1500],
            seen: None,
            attempts: 0,
        },
    ];
    let mut histories = 0;
    explore(cpus, 0, Vec::new(), &p, &mut histories);
    assert!(histories > 1000, "only {histories} histories explored");
}

fn edt(rate_bits: u64, horizon_ms: u64) -> BucketParams {
    BucketParams::edt(rate_bits, horizon_ms * 1_000_000).expect("valid EDT parameters")
}

#[test]
fn edt_parameters_are_checked() {
    assert!(BucketParams::edt(MIN_RATE_BITS - 1, 1_000_000).is_err());
    assert_eq!(
        BucketParams::edt(1_000_000, 999_999),
        Err(BucketError::HorizonOutOfRange {
            horizon_ns: 999_999
        })
    );
    assert!(BucketParams::edt(1_000_000, 10_000_000_001).is_err());
    let p = edt(100_000_000, 50);
    assert!(p.is_edt() && !params(100_000_000, 64 * 1024).is_edt());
    assert_eq!((p.ns_per_byte_q16(), p.burst_ns()), (80 << 16, 50_000_000));
    // 50 ms at 100 Mbit/s.
    assert_eq!(p.burst_bytes(), 625_000);
}

#[test]
fn a_greedy_paced_class_leaves_at_its_rate_with_no_burst() {
    // Frames offered far faster than the rate, all at `now` = 0: each
    // leaves one frame time after the previous one, the first at once.
    let p = edt(100_000_000, 10);
    let b = SharedBucket::new(0);
    let cost = frame_cost(1514, p.ns_per_byte_q16());
    // 10 ms at 100 Mbit/s hold 82 such frames; the 83rd is dropped.
    for i in 0..83u64 {
        assert_eq!(b.pace(1, 0, 1514, &p), Some(1 + i * cost), "frame {i}");
    }
    assert_eq!(b.pace(1, 0, 1514, &p), None);
}

#[test]
fn paced_frames_beyond_the_horizon_are_dropped_and_change_nothing() {
    let p = edt(10_000_000, 1);
    let b = SharedBucket::new(0);
    let cost = frame_cost(1514, p.ns_per_byte_q16()); // 1211 us
    assert_eq!(b.pace(1_000, 0, 1514, &p), Some(1_000));
    // The second frame would wait 1.2 ms >= 1 ms: dropped.
    assert_eq!(b.pace(1_000, 0, 1514, &p), None);
    assert_eq!(b.tat(), 1_000 + cost);
    // Once the backlog is below the horizon, frames pass again.
    let later = 1_000 + cost - 999_999;
    assert_eq!(b.pace(later, 0, 1514, &p), Some(1_000 + cost));
}

#[test]
fn a_frames_own_departure_time_is_kept_when_within_the_horizon() {
    let p = edt(100_000_000, 10);
    let cost = frame_cost(1000, p.ns_per_byte_q16());
    // TCP paced it to 1 ms from now; the class is idle: it leaves then.
    let b = SharedBucket::new(0);
    assert_eq!(b.pace(5_000, 1_005_000, 1000, &p), Some(1_005_000));
    assert_eq!(b.tat(), 1_005_000 + cost);
    // A stamp a horizon or more ahead (another clock) is ignored.
    let b = SharedBucket::new(0);
    assert_eq!(b.pace(5_000, 5_000 + 10_000_000, 1000, &p), Some(5_000));
    // A stamp in the past is `now`.
    let b = SharedBucket::new(0);
    assert_eq!(b.pace(5_000, 4_000, 1000, &p), Some(5_000));
}

proptest! {
    /// Over any run of paced frames: departures never go backwards, every
    /// departure is within the horizon of its base, and the bytes leaving
    /// in any window [t0, t1) take at most (t1 - t0) at the rate plus one
    /// frame; a frame is dropped only when the backlog reached the horizon.
    #[test]
    fn paced_departures_respect_the_rate_and_the_horizon(
        rate_mbit in 1u64..2_000,
        horizon_ms in 1u64..200,
        frames in prop::collection::vec((0u64..200_000, 64u32..=65_536), 1..300),
    ) {
        let p = edt(rate_mbit * 1_000_000, horizon_ms);
        let b = SharedBucket::new(0);
        let mut now = 1_000_000u64;
        let mut sent: Vec<(u64, u32)> = Vec::new();
        for (gap, len) in frames {
            now += gap;
            let before = b.tat();
            match b.pace(now, 0, len, &p) {
                Some(t) => {
                    prop_assert!(t >= now && t - now < p.burst_ns().max(1));
                    prop_assert_eq!(t, before.max(now));
                    if let Some(&(last, _)) = sent.last() {
                        prop_assert!(t >= last);
                    }
                    sent.push((t, len));
                }
                None => {
                    prop_assert!(before > now && before - now >= p.burst_ns());
                    prop_assert_eq!(b.tat(), before);
                }
            }
        }
        for (i, &(t0, _)) in sent.iter().enumerate() {
            let mut bytes = 0u64;
            for &(t, len) in &sent[i..] {
                bytes += u64::from(len);
                let span = t - t0;
                let allowed = frame_cost(
                    (bytes - u64::from(len)).min(u64::from(u32::MAX)) as u32,
                    p.ns_per_byte_q16(),
                );
                // The frame at `t` starts no earlier than the bytes before
                // it take at the rate (rounding: 1 ns per frame).
                prop_assert!(span + (sent.len() as u64) >= allowed);
            }
        }
    }
}
