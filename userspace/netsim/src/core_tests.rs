//! Virtual-clock tests of the link scheduling core.

use super::*;

const MS: u64 = 1_000_000;

fn params(delay_ms: u64, rate_bps: u64) -> LinkParams {
    LinkParams {
        delay_ns: delay_ms * MS,
        rate_bps,
        queue_bytes: 1 << 20,
        ..LinkParams::default()
    }
}

/// Drain everything due up to `until`, stepping the virtual clock to each departure.
fn drain_all<T>(core: &mut LinkCore<T>, until: u64) -> Vec<(u64, T)> {
    let mut out = Vec::new();
    while let Some(t) = core.next_departure() {
        if t > until {
            break;
        }
        assert!(
            core.pop_due(t - 1).is_none() || t == 0,
            "left before its time"
        );
        let (f, _) = core.pop_due(t).expect("due frame");
        out.push((t, f));
    }
    out
}

#[test]
fn pure_delay_holds_each_frame_exactly_the_delay() {
    let mut c = LinkCore::new(params(20, 0), 1);
    assert_eq!(
        c.on_arrival(5, 'a', 100),
        Verdict::Scheduled {
            depart: 5 + 20 * MS
        }
    );
    assert_eq!(
        c.on_arrival(7, 'b', 100),
        Verdict::Scheduled {
            depart: 7 + 20 * MS
        }
    );
    assert!(c.pop_due(20 * MS).is_none());
    assert_eq!(c.pop_due(20 * MS + 5), Some(('a', 100)));
    assert!(c.pop_due(20 * MS + 6).is_none());
    assert_eq!(c.pop_due(20 * MS + 7), Some(('b', 100)));
    assert_eq!(c.counters().forwarded, 2);
    assert_eq!(c.counters().forwarded_bytes, 200);
}

#[test]
fn serializer_spaces_a_burst_at_the_link_rate() {
    // 10 Mbit/s: a 1250-byte frame takes exactly 1 ms.
    let mut c = LinkCore::new(params(5, 10_000_000), 1);
    for i in 0..10u32 {
        c.on_arrival(0, i, 1250);
    }
    let out = drain_all(&mut c, u64::MAX);
    let times: Vec<u64> = out.iter().map(|(t, _)| *t).collect();
    let expected: Vec<u64> = (1..=10).map(|k| k * MS + 5 * MS).collect();
    assert_eq!(times, expected);
    let order: Vec<u32> = out.iter().map(|(_, f)| *f).collect();
    assert_eq!(order, (0..10).collect::<Vec<_>>());
}

#[test]
fn an_idle_link_does_not_bank_credit() {
    let mut c = LinkCore::new(params(0, 10_000_000), 1);
    c.on_arrival(0, 0, 1250);
    // Long idle gap; the next frames must still be spaced 1 ms apart.
    c.on_arrival(100 * MS, 1, 1250);
    c.on_arrival(100 * MS, 2, 1250);
    let times: Vec<u64> = drain_all(&mut c, u64::MAX)
        .iter()
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(times, vec![MS, 101 * MS, 102 * MS]);
}

#[test]
fn overload_is_clipped_to_the_rate_and_the_queue_tail_drops() {
    // 100 Mbit/s, offered 120 Mbit/s of 1500-byte frames for one virtual second.
    let rate = 100_000_000u64;
    let mut p = params(10, rate);
    p.queue_bytes = 150_000;
    let mut c = LinkCore::new(p, 3);
    let gap = 1500 * 8 * 1_000_000_000 / 120_000_000; // 100 µs
    let mut now = 0;
    let mut delivered_bytes = 0u64;
    let mut last = 0;
    while now < 1_000_000_000 {
        c.on_arrival(now, (), 1500);
        assert!(c.backlog_bytes(now) <= p.queue_bytes);
        now += gap;
        while let Some((_, len)) = c.pop_due(now) {
            delivered_bytes += u64::from(len);
            last = now;
        }
    }
    let cs = c.counters();
    assert!(
        cs.dropped_queue > 0,
        "an overloaded drop-tail queue must drop"
    );
    // Delivered in [10 ms, last]: the rate must match within 0.5 %.
    let achieved = delivered_bytes as f64 * 8.0 / ((last - 10 * MS) as f64 / 1e9);
    assert!(
        (achieved / rate as f64 - 1.0).abs() < 0.005,
        "achieved {achieved}"
    );
    assert_eq!(
        cs.received,
        cs.forwarded + cs.dropped() + c.in_flight() as u64
    );
}

#[test]
fn loss_is_seeded_and_close_to_the_configured_probability() {
    let mut p = params(1, 0);
    p.loss = 0.05;
    let run = |seed| {
        let mut c = LinkCore::new(p, seed);
        (0..20_000u64)
            .map(|i| matches!(c.on_arrival(i * 1000, (), 100), Verdict::DroppedLoss))
            .collect::<Vec<_>>()
    };
    let a = run(9);
    assert_eq!(a, run(9), "same seed, same losses");
    assert_ne!(a, run(10));
    let rate = a.iter().filter(|x| **x).count() as f64 / a.len() as f64;
    // binomial sigma = sqrt(.05*.95/20000) ≈ 0.00154; allow 4 sigma.
    assert!((rate - 0.05).abs() < 0.0062, "loss rate {rate}");
}

#[test]
fn jitter_without_reorder_keeps_order_and_bounds() {
    let mut p = params(20, 0);
    p.jitter_ns = 5 * MS;
    let mut c = LinkCore::new(p, 11);
    let mut departs = Vec::new();
    for i in 0..2000u64 {
        let now = i * 100_000;
        match c.on_arrival(now, i, 64) {
            Verdict::Scheduled { depart } => {
                assert!(depart >= now + 15 * MS, "below delay - jitter");
                departs.push(depart);
            }
            v => panic!("unexpected {v:?}"),
        }
    }
    assert!(
        departs.windows(2).all(|w| w[0] <= w[1]),
        "frames reordered without reorder"
    );
    // Jitter really varies the delay: not every frame got the same offset.
    let offsets: std::collections::HashSet<u64> = departs
        .iter()
        .enumerate()
        .map(|(i, d)| d - i as u64 * 100_000)
        .collect();
    assert!(offsets.len() > 100);
    let order: Vec<u64> = drain_all(&mut c, u64::MAX)
        .into_iter()
        .map(|(_, f)| f)
        .collect();
    assert_eq!(order, (0..2000).collect::<Vec<_>>());
}

#[test]
fn reorder_lets_some_frames_overtake() {
    let mut p = params(20, 0);
    p.reorder = 0.1;
    let mut c = LinkCore::new(p, 5);
    for i in 0..1000u64 {
        c.on_arrival(i * 10_000, i, 64);
    }
    let order: Vec<u64> = drain_all(&mut c, u64::MAX)
        .into_iter()
        .map(|(_, f)| f)
        .collect();
    assert_eq!(order.len(), 1000);
    // Frames delivered ahead of a frame that was sent before them (~10 % of 1000).
    let mut suffix_min = u64::MAX;
    let mut overtakers = 0;
    for &f in order.iter().rev() {
        if f > suffix_min {
            overtakers += 1;
        }
        suffix_min = suffix_min.min(f);
    }
    assert!(
        (60..140).contains(&overtakers),
        "{overtakers} frames overtook"
    );
}

#[test]
fn a_cut_link_drops_everything_and_a_restored_one_forwards() {
    let mut c = LinkCore::new(params(1, 0), 1);
    c.set_params(LinkParams {
        up: false,
        ..*c.params()
    });
    for i in 0..10 {
        assert_eq!(c.on_arrival(i, (), 100), Verdict::DroppedDown);
    }
    c.set_params(LinkParams {
        up: true,
        ..*c.params()
    });
    assert!(matches!(
        c.on_arrival(20, (), 100),
        Verdict::Scheduled { .. }
    ));
    let cs = c.counters();
    assert_eq!((cs.dropped_down, cs.received), (10, 11));
}

#[test]
fn a_rate_change_applies_to_later_frames() {
    let mut c = LinkCore::new(params(0, 10_000_000), 1);
    c.on_arrival(0, 0, 1250); // 1 ms at 10 Mbit/s
    c.set_params(LinkParams {
        rate_bps: 100_000_000,
        ..*c.params()
    });
    c.on_arrival(0, 1, 1250); // 0.1 ms at 100 Mbit/s, after the first
    let times: Vec<u64> = drain_all(&mut c, u64::MAX)
        .iter()
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(times, vec![MS, MS + 100_000]);
}
