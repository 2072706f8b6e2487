//! The WAN estimates and pacing on virtual time: a fluid model of a path of
//! `rate` payload bytes/s shared by `sharers` ranks of `sockets` connections
//! each; every connection gets the smaller of its pacing cap and its fair share.
//! Paced connections that together offer more than the rate fill a drop-tail
//! queue of one BDP, which shows in their RTT.

use super::trim::TRIM_CEIL;
use super::*;

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;
const TICK: u64 = 10 * MS;
const MB: f64 = 1e6;

struct Path {
    /// Payload bytes/s of the bottleneck.
    rate: f64,
    rtt_us: u32,
    sharers: usize,
    infos: Vec<TcpInfo>,
    now: u64,
    /// Bytes queued at the bottleneck.
    queue: f64,
    /// The queue at each reading, in BDPs: (time, queue).
    queues: Vec<(u64, f64)>,
}

impl Path {
    fn new(rate: f64, rtt_ms: u32, sockets: usize, sharers: usize) -> Self {
        let info = TcpInfo {
            rtt_us: rtt_ms * 1000,
            min_rtt_us: rtt_ms * 1000,
            snd_mss: 1448,
            ..TcpInfo::default()
        };
        Path {
            rate,
            rtt_us: rtt_ms * 1000,
            sharers,
            infos: vec![info; sockets],
            now: 0,
            queue: 0.0,
            queues: Vec::new(),
        }
    }

    /// One sampling interval of bulk traffic under caps `cap` (bytes/s per
    /// socket); `slow` scales this reading's rates (a loss recovery),
    /// `app_limited` marks them so.
    fn read(&mut self, cap: Option<u64>, slow: f64, app_limited: bool) -> Vec<Option<TcpInfo>> {
        self.now += TICK;
        let flows = (self.infos.len() * self.sharers) as f64;
        let share = self.rate / flows;
        // Every sharer's connections paced alike: what they offer beyond
        // the rate queues (the queue's own drain keeps the path full).
        let bdp = self.rate * f64::from(self.rtt_us) * 1e-6;
        if let Some(c) = cap {
            let offered = c as f64 * flows;
            let dt = TICK as f64 * 1e-9;
            self.queue = (self.queue + (offered - self.rate) * dt).clamp(0.0, bdp);
        }
        self.queues.push((self.now, self.queue / bdp));
        let full = self.queue > 0.0;
        let r = match cap {
            Some(c) if !full => share.min(c as f64),
            _ => share,
        } * slow;
        let rtt_us = self.rtt_us + (self.queue / self.rate * 1e6) as u32;
        for i in &mut self.infos {
            i.delivery_rate = r as u64;
            i.app_limited = app_limited;
            i.delivered = i
                .delivered
                .wrapping_add((r * TICK as f64 / 1e9 / 1448.0) as u32 + 1);
            i.rtt_us = rtt_us;
            i.busy = true;
        }
        self.infos.iter().copied().map(Some).collect()
    }

    /// Runs `control` until `until` ns; returns the caps applied meanwhile.
    /// A reading shows the rate of what was sent one RTT earlier, under the
    /// cap in force then (as the kernel's delivery-rate samples do).
    fn run(&mut self, c: &mut Control, until: u64) -> Vec<u64> {
        let mut caps = Vec::new();
        let lag = (u64::from(self.rtt_us) * 1000 / TICK) as usize;
        let mut history = std::collections::VecDeque::new();
        while self.now < until {
            history.push_back(c.applied);
            let sent_under = if history.len() > lag {
                history.pop_front().flatten()
            } else {
                *history.front().expect("pushed")
            };
            let infos = self.read(sent_under, 1.0, false);
            if let Some(cap) = c.tick(self.now, &infos) {
                caps.push(cap);
            }
        }
        caps
    }

    /// From `from` on: the largest queue, in BDPs, and the fraction of
    /// readings with a queue (the path full).
    fn queue_since(&self, from: u64) -> (f64, f64) {
        let q: Vec<f64> = self
            .queues
            .iter()
            .filter(|(t, _)| *t >= from)
            .map(|&(_, q)| q)
            .collect();
        let full = q.iter().filter(|&&q| q > 0.0).count() as f64 / q.len().max(1) as f64;
        (q.iter().copied().fold(0.0, f64::max), full)
    }
}

/// The estimate pacing follows (what is published is capped by the
/// measured windows: [`Estimator::published`]).
fn goodput(c: &mut Control, now: u64) -> f64 {
    c.est.estimate(now).expect("an estimate").goodput_bps / 8.0
}

fn within(got: f64, want: f64, tol: f64) -> bool {
    (got / want - 1.0).abs() <= tol
}

#[test]
fn unpaced_bulk_traffic_gives_the_rate_on_the_wire_and_the_rtt() {
    let mut p = Path::new(25.0 * MB, 40, 2, 1);
    let mut c = Control::new(2);
    assert!(c.estimate(0).is_none(), "no estimate before a sample");
    p.run(&mut c, S);
    let e = c.estimate(p.now).expect("estimate");
    assert!(within(e.goodput_bps, 200e6, 0.01), "{e}");
    // 1448-byte payloads in 1514-byte frames.
    assert!(within(e.rate_bps, 200e6 * 1514.0 / 1448.0, 0.01), "{e}");
    assert_eq!(e.rtt, Duration::from_millis(40));
    assert_eq!(e.min_rtt, Duration::from_millis(40));
    assert_eq!(e.pacing_per_socket, None);
}

#[test]
fn a_rank_sharing_the_path_scales_its_share_by_the_sharers() {
    let mut p = Path::new(25.0 * MB, 40, 2, 2);
    let mut c = Control::new(2);
    c.started(0, 2, None, None);
    p.run(&mut c, S);
    assert!(within(goodput(&mut c, p.now), 25.0 * MB, 0.01));
}

/// Paced from the estimate, the domain fills the path and keeps its queue
/// short: the trim holds the level where a short queue stands, and the
/// estimate neither spirals down nor up.
#[test]
fn pacing_at_the_estimate_fills_the_path_and_keeps_the_queue_short() {
    for (mbit, rtt_ms) in [(200.0, 40), (100.0, 80), (50.0, 120), (1000.0, 10)] {
        let rate = mbit * MB / 8.0;
        let mut p = Path::new(rate, rtt_ms, 2, 2);
        let mut c = Control::new(2);
        c.started(0, 2, Some(rate), Some((2, None)));
        let caps = p.run(&mut c, 20 * S);
        let g = goodput(&mut c, p.now);
        assert!(within(g, rate, 0.02), "{mbit} Mbit/s: estimate {g}");
        let most = rate * TRIM_CEIL / 4.0;
        assert!(caps.iter().all(|&k| (k as f64) <= most * 1.001));
        // At twice the target the level is 0.96, below the path.
        let twice = 2.0 * f64::from(trim::target_us(rtt_ms * 1000)) / f64::from(rtt_ms * 1000);
        let (peak, full) = p.queue_since(2 * S);
        assert!(
            peak <= twice && full >= 0.99,
            "{mbit} Mbit/s, {rtt_ms} ms: queue peaked at {peak:.2} BDP, path full {full:.2} of the time"
        );
    }
}

/// An estimate a few per cent off either way (the domain's windows read
/// within ±3 %) still fills the path, and the queue it builds while the
/// estimate is high never overflows a one-BDP queue: the trim sits at its
/// floor until the path's own samples bring the estimate down.
#[test]
fn an_estimate_a_few_per_cent_off_still_fills_the_path_without_overflow() {
    let rate = 25.0 * MB;
    for off in [0.94, 0.97, 1.03, 1.06] {
        let mut p = Path::new(rate, 40, 2, 2);
        let mut c = Control::new(2);
        c.started(0, 2, Some(rate * off), Some((2, None)));
        p.run(&mut c, 10 * S);
        let (peak, full) = p.queue_since(S);
        assert!(
            peak < 1.0 && full >= 0.99,
            "seeded at {off} of the path: queue peaked at {peak:.2} BDP, full {full:.2} of the time"
        );
        let (late, _) = p.queue_since(5 * S);
        let twice = 2.0 * f64::from(trim::target_us(40_000)) / 40_000.0;
        assert!(
            late <= twice,
            "seeded at {off}: {late:.2} BDP late in the run"
        );
    }
}

/// A rank's share goes to its connections with data waiting to be sent; one
/// that has sent all it has (a chunk's tail in flight, waiting for ACKs)
/// takes no part of it. With none waiting, those in flight share it.
#[test]
fn the_share_is_split_among_the_connections_with_data_to_send() {
    let mut c = Control::new(3);
    c.started(0, 1, Some(24.0 * MB), Some((1, Some(24.0 * MB))));
    let info = |busy, unsent| {
        Some(TcpInfo {
            busy,
            unsent,
            snd_mss: 1448,
            ..TcpInfo::default()
        })
    };
    let share = 24.0 * MB * PACING_TARGET;
    let cap = c.tick(
        MS,
        &[info(true, true), info(true, false), info(false, false)],
    );
    assert_eq!(cap, Some(share as u64), "one connection sending");
    let cap = c.tick(
        2 * MS,
        &[info(true, true), info(true, true), info(false, false)],
    );
    assert_eq!(cap, Some((share / 2.0) as u64), "two sending");
    let cap = c.tick(
        3 * MS,
        &[info(true, false), info(true, false), info(true, false)],
    );
    assert_eq!(
        cap,
        Some((share / 3.0) as u64),
        "none sending, three in flight"
    );
}

/// A rank alone on the path (its domain's other ranks idle) delivers up to
/// its probing cap, above its share: that must not raise the domain's
/// estimate by the sharers' factor.
#[test]
fn a_lone_rank_at_its_probing_cap_does_not_raise_the_domain_estimate() {
    let mut p = Path::new(25.0 * MB, 40, 2, 1);
    let mut c = Control::new(2);
    c.started(0, 2, Some(20.0 * MB), Some((2, None)));
    p.run(&mut c, 10 * S);
    // Its own samples are lower bounds of the path (25 MB/s) and may raise
    // the estimate up to it; scaled by the sharers they would claim 2×.
    let g = goodput(&mut c, p.now);
    assert!(g <= 25.0 * MB * 1.01, "{g}");
}

#[test]
fn the_estimate_follows_a_rate_drop_and_a_rise_back() {
    let mut p = Path::new(25.0 * MB, 40, 2, 1);
    let mut c = Control::new(2);
    c.started(0, 1, Some(25.0 * MB), Some((1, None)));
    p.run(&mut c, 5 * S);
    p.rate = 12.5 * MB;
    p.run(&mut c, 8 * S);
    let g = goodput(&mut c, p.now);
    assert!(within(g, 12.5 * MB, 0.10), "after the drop: {g}");
    let cap = c.applied.expect("paced") as f64;
    let most = 12.5 * MB * 1.1 * TRIM_CEIL / 2.0;
    assert!(cap <= most, "the caps follow: {cap}");
    p.rate = 25.0 * MB;
    p.run(&mut c, 12 * S);
    let g = goodput(&mut c, p.now);
    assert!(within(g, 25.0 * MB, 0.10), "after the rise: {g}");
}

#[test]
fn losses_and_app_limited_readings_do_not_pull_the_estimate_down() {
    let mut p = Path::new(12.5 * MB, 80, 2, 1);
    let mut c = Control::new(2);
    let mut k = 0u64;
    while p.now < 10 * S {
        k += 1;
        // Every 37th reading is in a loss recovery, every 5th app-limited
        // and small.
        let infos = match k {
            _ if k.is_multiple_of(37) => p.read(None, 0.5, false),
            _ if k.is_multiple_of(5) => p.read(None, 0.05, true),
            _ => p.read(None, 1.0, false),
        };
        c.tick(p.now, &infos);
    }
    let e = c.estimate(p.now).expect("estimate");
    assert!(within(e.goodput_bps, 100e6, 0.02), "{e}");
    assert_eq!(e.rtt, Duration::from_millis(80));
}

#[test]
fn idle_and_unreadable_connections_add_no_sample() {
    let mut c = Control::new(2);
    let i = TcpInfo {
        delivery_rate: 1_000_000,
        delivered: 5,
        rtt_us: 40_000,
        min_rtt_us: 40_000,
        snd_mss: 1448,
        ..TcpInfo::default()
    };
    c.tick(TICK, &[Some(i), None]);
    c.tick(2 * TICK, &[Some(i), None]);
    assert!(c.estimate(2 * TICK).is_none(), "nothing delivered since");
    // One of two connections delivered: the sum is a lower bound only.
    let moved = TcpInfo { delivered: 9, ..i };
    c.tick(3 * TICK, &[Some(moved), Some(i)]);
    c.tick(
        4 * TICK,
        &[Some(moved), Some(TcpInfo { delivered: 6, ..i })],
    );
    let e = c.estimate(4 * TICK).expect("a lower bound that raised it");
    assert_eq!(e.goodput_bps, 8e6);
    assert_eq!(e.samples, 2);
}

#[test]
fn a_configured_rate_paces_without_a_gain_cycle() {
    let mut p = Path::new(25.0 * MB, 40, 2, 2);
    let mut c = Control::new(2);
    c.started(0, 2, None, Some((2, Some(25.0 * MB))));
    let caps = p.run(&mut c, 5 * S);
    assert_eq!(caps, vec![(25.0 * MB * PACING_TARGET / 4.0) as u64]);
}

#[test]
fn a_rank_s_share_is_split_among_its_busy_connections() {
    let p = Pacer { flows: 2 };
    assert_eq!(
        p.per_socket(4e6, PACING_TARGET, 2),
        (4e6 * PACING_TARGET / 4.0) as u64
    );
    assert_eq!(
        p.per_socket(4e6, 1.05, 1),
        (4e6 * 1.05 / 2.0) as u64,
        "one busy connection takes the rank's whole share"
    );
    assert_eq!(
        p.per_socket(4e6, PACING_TARGET, 0),
        p.per_socket(4e6, PACING_TARGET, 1)
    );
}

/// Two ranks of one domain on one path, each with two busy connections, as
/// the sampler threads of two processes would see them. The path carries
/// `rate(t)` payload bytes/s behind a drop-tail queue of one BDP (40 ms of
/// base RTT); the ranks offer what their caps allowed one RTT earlier (all
/// they can when unpaced). While the path is the limit, rank 0 gets
/// `shares(t)` of it and rank 1 the rest. The ranks' wall clocks differ by
/// 4 ms. Returns both estimates' goodput.
fn two_ranks(
    rate: impl Fn(u64) -> f64,
    until: u64,
    domain: bool,
    pace: bool,
    shares: impl Fn(u64) -> f64,
) -> (f64, f64) {
    let s = simulate(rate(0), f64::INFINITY, rate, until, domain, pace, shares);
    (s.a, s.b)
}

/// What [`simulate`] saw.
struct Sim {
    /// Both ranks' goodput estimates at the end.
    a: f64,
    b: f64,
    /// Both ranks' estimates every 100 ms: (time, goodputs).
    trace: Vec<(u64, [f64; 2])>,
    /// Time the ranks offered more than the full queue could take (a
    /// drop-tail queue of one BDP would have dropped), seconds.
    overflow_s: f64,
}

impl Sim {
    /// Lowest and highest of either rank's estimate from `from` on.
    fn range(&self, from: u64) -> (f64, f64) {
        self.trace
            .iter()
            .filter(|(t, _)| *t >= from)
            .flat_map(|(_, g)| *g)
            .fold((f64::INFINITY, 0.0), |(lo, hi), g| (lo.min(g), hi.max(g)))
    }
}

/// [`two_ranks`] from the estimate `seed`, each rank sending at most
/// `most` bytes/s whatever its caps (its congestion window, say).
fn simulate(
    seed: f64,
    most: f64,
    rate: impl Fn(u64) -> f64,
    until: u64,
    domain: bool,
    pace: bool,
    shares: impl Fn(u64) -> f64,
) -> Sim {
    let mut c = [Control::new(2), Control::new(2)];
    for (r, c) in c.iter_mut().enumerate() {
        if domain {
            c.set_domain(r);
        }
        c.started(0, 2, Some(seed), pace.then_some((2, None)));
    }
    let info = TcpInfo {
        rtt_us: 40_000,
        min_rtt_us: 40_000,
        snd_mss: 1448,
        busy: true,
        ..TcpInfo::default()
    };
    let mut infos = [[info; 2]; 2];
    let mut history = std::collections::VecDeque::new();
    let (mut t, mut queue) = (0, 0.0f64);
    let (mut trace, mut overflow_s) = (Vec::new(), 0.0);
    let mut carry = [0.0f64; 2];
    let dt = TICK as f64 / 1e9;
    while t < until {
        t += TICK;
        let (r_now, s0) = (rate(t), shares(t));
        history.push_back([c[0].applied, c[1].applied]);
        let sent_under = if history.len() > 4 {
            history.pop_front().unwrap_or_default()
        } else {
            history[0]
        };
        let offered: Vec<f64> = (0..2)
            .map(|r| {
                sent_under[r]
                    .map_or(10.0 * r_now, |k| 2.0 * k as f64)
                    .min(most)
            })
            .collect();
        let total = offered[0] + offered[1];
        let got = if queue > 0.0 {
            // A backlog: the path delivers its rate, whatever the ranks offer now.
            [r_now * s0, r_now * (1.0 - s0)]
        } else if total >= r_now {
            let a = (r_now * s0).min(offered[0]);
            let b = (r_now - a).min(offered[1]);
            [(r_now - b).min(offered[0]), b]
        } else {
            [offered[0], offered[1]]
        };
        let offered_queue = queue + (total - r_now) * dt;
        if offered_queue > r_now * 0.04 {
            overflow_s += dt;
        }
        queue = offered_queue.clamp(0.0, r_now * 0.04);
        let rtt_us = 40_000 + (queue / r_now * 1e6) as u32;
        let mut windows = [None, None];
        for r in 0..2 {
            let per_socket = got[r] / 2.0;
            for i in &mut infos[r] {
                let bytes = per_socket * dt + carry[r];
                let segments = (bytes / 1448.0).floor();
                carry[r] = bytes - segments * 1448.0;
                i.bytes_acked += (segments * 1448.0) as u64;
                i.delivered = i.delivered.wrapping_add(segments as u32);
                i.delivery_rate = per_socket as u64;
                i.rtt_us = rtt_us;
            }
            let readings: Vec<Option<TcpInfo>> = infos[r].iter().copied().map(Some).collect();
            let wall = t + 4 * MS * r as u64;
            windows[r] = c[r].tick_at(t, wall, &readings).1;
        }
        for (r, w) in windows.iter().enumerate() {
            if let Some(w) = w {
                c[1 - r].peer_window(r, *w);
            }
        }
        if t % (100 * MS) == 0 {
            trace.push((t, [goodput(&mut c[0], t), goodput(&mut c[1], t)]));
        }
    }
    Sim {
        a: goodput(&mut c[0], t),
        b: goodput(&mut c[1], t),
        trace,
        overflow_s,
    }
}

fn swing(t: u64) -> f64 {
    if (t / (100 * MS)).is_multiple_of(2) {
        0.65
    } else {
        0.35
    }
}

/// The ranks' shares swing between 35 % and 65 % every 100 ms. Scaled by
/// the domain's ranks, one rank's samples claim up to 1.3× the path and the
/// max filter keeps that; the domain's summed windows give the path's rate.
#[test]
fn the_domain_sum_finds_the_rate_however_the_ranks_split_it() {
    let path = |_| 25.0 * MB;
    let (a, b) = two_ranks(path, 10 * S, false, false, swing);
    assert!(
        a > 25.0 * MB * 1.2 && b > 25.0 * MB * 1.2,
        "per rank: {a} {b}"
    );
    let (a, b) = two_ranks(path, 10 * S, true, false, swing);
    assert!(within(a, 25.0 * MB, 0.02), "{a}");
    assert!(within(b, 25.0 * MB, 0.02), "{b}");
}

/// Where a paced domain's estimate settles: between the path's rate (what a
/// full window says) and the rate at which the caps just fill the path
/// (rate / `PACING_TARGET`, reached by windows with room).
fn settled(g: f64, rate: f64) -> bool {
    g >= rate * 0.97 && g <= rate / PACING_TARGET * 1.01
}

/// Where a paced domain's estimate moves once it found the path: never
/// below the path's rate (what full windows say, less 3 %), and above it by
/// at most what the caps need to reach it times the climb's second step
/// (the climb probes past the path until a queue shows, then falls back);
/// and the probing overflows the one-BDP queue for at most 1 % of the time.
fn holds_the_path(s: &Sim, rate: f64, from: u64) -> Result<(), String> {
    let (lo, hi) = s.range(from);
    let most = rate / PACING_TARGET * (1.0 + 2.0 * (ROOM_STEP - 1.0));
    let secs = s.trace.last().map_or(0, |&(t, _)| t) as f64 / 1e9;
    if lo >= rate * 0.97 && hi <= most && s.overflow_s <= 0.01 * secs {
        Ok(())
    } else {
        Err(format!(
            "estimate {:.3}–{:.3} of the path (at most {:.3}), queue overflowing for {:.2} of {secs:.0} s",
            lo / rate,
            hi / rate,
            most / rate,
            s.overflow_s
        ))
    }
}

/// Paced at the estimate, windows only partly full are lower bounds: the
/// estimate neither spirals down with the caps nor runs away, and the queue
/// seldom overflows.
#[test]
fn paced_ranks_keep_the_domain_estimate_at_the_rate() {
    let inf = f64::INFINITY;
    let s = simulate(25.0 * MB, inf, |_| 25.0 * MB, 20 * S, true, true, swing);
    holds_the_path(&s, 25.0 * MB, 2 * S).unwrap_or_else(|e| panic!("{e}"));
}

/// A path that gets slower is followed: the ranks, paced for the old rate,
/// fill it and queue, and their windows' sum is the new rate.
#[test]
fn the_domain_estimate_follows_a_slower_path() {
    let path = |t| if t < S { 25.0 * MB } else { 12.5 * MB };
    let (a, b) = two_ranks(path, 8 * S, true, true, swing);
    assert!(settled(a, 12.5 * MB) && settled(b, 12.5 * MB), "{a} {b}");
}

/// A start-up probe that measured 10 % low: paced below the path, the
/// ranks see no queue, and the estimate climbs by `ROOM_STEP` per window
/// until the caps fill the path. It then stays between the path's rate (a
/// full window) and the rate at which the caps reach it (rate / target).
#[test]
fn paced_ranks_find_a_path_faster_than_their_seed() {
    // The last: a lossy path's start-up probe measured a sixth of it.
    // (seed, run for, found by)
    for (seed, until, by) in [(22.5 * MB, 10, 2), (12.5 * MB, 20, 4), (4.0 * MB, 20, 6)] {
        let inf = f64::INFINITY;
        let s = simulate(seed, inf, |_| 25.0 * MB, until * S, true, true, swing);
        holds_the_path(&s, 25.0 * MB, by * S).unwrap_or_else(|e| panic!("seeded {seed}: {e}"));
    }
}

/// One full window that reads low (a loss recovery under a smoothed RTT
/// still high) does not lower the domain's estimate; three within 2 s do,
/// but only to the largest window of those 2 s, full or not (the path
/// carried that much); lower bounds only raise it.
#[test]
fn the_domain_estimate_falls_only_on_repeated_full_windows() {
    let mut c = domain_of_two(25.0 * MB);
    let e = &mut c.est;
    e.domain_sample(15.0 * MB, Fill::Full, true, 200 * MS);
    e.domain_sample(20.0 * MB, Fill::Partly, true, 400 * MS);
    e.domain_sample(18.0 * MB, Fill::Room, false, 600 * MS);
    assert_eq!(goodput(&mut c, 600 * MS), 25.0 * MB);
    let e = &mut c.est;
    e.domain_sample(12.0 * MB, Fill::Full, true, 800 * MS);
    e.domain_sample(13.0 * MB, Fill::Full, true, 1000 * MS);
    assert_eq!(
        goodput(&mut c, S),
        20.0 * MB,
        "the largest window of the span, not of its full windows"
    );
    // Older than 2 s, the high window no longer counts: a path that got
    // slower is followed, to the largest of its full windows.
    let e = &mut c.est;
    e.domain_sample(14.0 * MB, Fill::Full, true, 2700 * MS);
    assert_eq!(goodput(&mut c, 2700 * MS), 14.0 * MB);
    // Full windows older than 2 s no longer count.
    let e = &mut c.est;
    e.domain_sample(9.0 * MB, Fill::Full, true, 4600 * MS);
    assert_eq!(goodput(&mut c, 4600 * MS), 14.0 * MB);
    // Room while paced, but the window carried no more than the estimate:
    // something other than the caps held the ranks (loss recovery), no climb.
    c.est.domain_sample(14.0 * MB, Fill::Room, true, 4700 * MS);
    assert_eq!(goodput(&mut c, 4700 * MS), 14.0 * MB);
    // Room while paced and above the estimate (the caps sit above it): the
    // estimate climbs above what was sent; what is published stays at the
    // largest window measured.
    c.est.domain_sample(15.0 * MB, Fill::Room, true, 4800 * MS);
    assert_eq!(goodput(&mut c, 4800 * MS), 15.0 * MB * ROOM_STEP);
    let p = c.est.published(4800 * MS).expect("published");
    assert_eq!(
        p.goodput_bps / 8.0,
        15.0 * MB,
        "the measured window, not the climb"
    );
    let e = c.est.estimate(4800 * MS).expect("estimate");
    assert!((p.rate_bps / p.goodput_bps - e.rate_bps / e.goodput_bps).abs() < 1e-12);
}

/// Ranks that cannot fill the path (their windows hold them at a third of
/// it, no queue forms) raise the estimate only to a step above what they
/// sent: it does not run away.
#[test]
fn ranks_held_back_by_something_else_do_not_run_the_estimate_away() {
    let most = 25.0 * MB / 6.0;
    let s = simulate(2.0 * MB, most, |_| 25.0 * MB, 10 * S, true, true, swing);
    for g in [s.a, s.b] {
        assert!(g <= 2.0 * most * ROOM_STEP_MAX * 1.01, "{g}");
        assert!(g >= 2.0 * most, "{g}");
    }
}

/// The end of the `k`-th domain window after the first second.
fn window_at(k: u64) -> u64 {
    1000 * MS + k * 200 * MS
}

/// Rank 0 of a domain of two, started from `seed` (payload bytes/s), with
/// no pacer: the tests feed its domain windows by hand.
fn domain_of_two(seed: f64) -> Control {
    let mut c = Control::new(1);
    c.set_domain(0);
    c.started(0, 2, Some(seed), None);
    c
}

/// The run of windows with room that sets the step: a window in which a
/// rank idled (between a collective's steps, or waiting for a
/// retransmission) neither extends nor breaks it. Before, every idle window
/// restarted the steps at 1.05, and a lossy path's low seed took about a
/// minute to climb (docs/BENCHMARKS.md). A window that saw a queue now and
/// then does not break it either, but holds the step at its second size
/// until a full window restarts the run.
#[test]
fn idle_windows_keep_the_run_of_windows_with_room() {
    let at = window_at;
    let mut c = domain_of_two(10.0 * MB);
    // Each window with room sent what the estimate's caps allowed (the
    // trim at its ceiling).
    let room = |c: &mut Control, k: u64| {
        let e = goodput(c, at(k));
        c.est.domain_sample(e * TRIM_CEIL, Fill::Room, true, at(k));
        goodput(c, at(k)) / e
    };
    let step = |rooms: i32| {
        let s = (1.0 + (ROOM_STEP - 1.0) * 2f64.powi(rooms)).min(ROOM_STEP_MAX);
        (s * TRIM_CEIL).max(1.0)
    };
    let close = |got: f64, want: f64| (got - want).abs() < 1e-9;
    let steps: Vec<f64> = (0..2).map(|k| room(&mut c, k)).collect();
    c.est.domain_sample(1.0 * MB, Fill::Idle, true, at(2));
    let third = room(&mut c, 3);
    for (got, want) in steps
        .iter()
        .chain([&third])
        .zip([step(0), step(1), step(2)])
    {
        assert!(close(*got, want), "{steps:?} {third}");
    }
    c.est.domain_sample(1.0 * MB, Fill::Partly, true, at(4));
    let held: Vec<f64> = (5..8).map(|k| room(&mut c, k)).collect();
    assert!(held.iter().all(|&g| close(g, step(1))), "{held:?}");
    c.est.domain_sample(1.0 * MB, Fill::Full, true, at(8));
    let again: Vec<f64> = (9..12).map(|k| room(&mut c, k)).collect();
    assert!(
        again
            .iter()
            .zip([step(0), step(1), step(2)])
            .all(|(&g, w)| close(g, w)),
        "{again:?}"
    );
}

/// Busy hosts: the smoothed RTT jumps by milliseconds with no queue at the
/// bottleneck, so windows with room alternate with windows that saw a
/// queue now and then. Each window with room still raises the estimate by
/// the second step (1.10 × what the caps sent): a seed at 0.6 of a
/// 50 MB/s path is within 5 % of it after 10 such windows. When each of
/// those windows restarted the run, each raised it by 0.8 %, and a
/// 400 Mbit/s path's estimate stayed at 0.7–0.8 of it (docs/BENCHMARKS.md).
#[test]
fn a_jittery_rtt_does_not_stop_the_climb() {
    let at = window_at;
    let mut c = domain_of_two(30.0 * MB);
    for k in 0..20 {
        let e = goodput(&mut c, at(k));
        let fill = if k % 2 == 0 { Fill::Room } else { Fill::Partly };
        c.est.domain_sample(e * TRIM_CEIL, fill, true, at(k));
    }
    let g = goodput(&mut c, at(20));
    assert!(g >= 47.5 * MB, "{:.1} MB/s", g / MB);
}

/// A seed that is only a lower bound (the probe stopped while its rate
/// still rose) sets no cap: pacing starts once three full windows have
/// measured the path, from what they measured. A seed that is not starts
/// the caps at once.
#[test]
fn a_floor_seed_waits_for_full_windows_before_pacing() {
    let at = window_at;
    let info = Some(TcpInfo {
        rtt_us: 50_000,
        min_rtt_us: 40_000,
        snd_mss: 1448,
        busy: true,
        ..TcpInfo::default()
    });
    let start = |floor: bool| {
        let mut c = Control::new(1);
        c.set_domain(0);
        c.started(0, 2, Some(4.0 * MB), Some((2, None)));
        if floor {
            c.seed_is_floor();
        }
        c
    };
    assert!(start(false).tick(at(0), &[info]).is_some());
    let mut c = start(true);
    assert_eq!(c.tick(at(0), &[info]), None, "no cap from a floor");
    for k in 1..=2 {
        c.est.domain_sample(25.0 * MB, Fill::Full, true, at(k));
        assert_eq!(c.tick(at(k), &[info]), None, "{k} full windows");
    }
    c.est.domain_sample(25.0 * MB, Fill::Full, true, at(3));
    let cap = c
        .tick(at(3), &[info])
        .expect("paced after three full windows");
    let lowest = 25.0 * MB * PACING_TARGET / 2.0;
    assert!(cap as f64 >= lowest, "{cap}");
}

/// The path's loss chooses the congestion control only once the
/// connections are paced: the start-up probe's segments, and unpaced ones,
/// are not judged (a loss-based control unpaced fills the queue).
#[test]
fn the_congestion_control_is_chosen_only_while_paced() {
    let info = |segs: u64| {
        Some(TcpInfo {
            rtt_us: 40_000,
            data_segs_out: segs as u32,
            dsack_dups: Some(0),
            snd_cwnd: 100,
            ..TcpInfo::default()
        })
    };
    for pace in [None, Some((2, None))] {
        let mut c = Control::new(2);
        c.choose_congestion();
        let mut switched = Vec::new();
        for t in 0..300u64 {
            if t == 100 {
                c.started(t * TICK, 2, Some(25.0 * MB), pace);
            }
            let segs = t * 100;
            switched.extend(c.congestion(t * TICK, &[info(segs), info(segs)]));
        }
        match pace {
            None => assert!(switched.is_empty(), "{switched:?}"),
            Some(_) => assert_eq!(switched, vec![(0, Cc::LossBased), (1, Cc::LossBased)]),
        }
    }
}

/// A rank whose domain peer said it has nothing to send paces at the whole
/// path, and back at its half once the peer says it sends again; a peer
/// that has said nothing counts as sending.
#[test]
fn a_lone_sender_of_the_domain_gets_the_whole_path() {
    let info = Some(TcpInfo {
        rtt_us: 40_000,
        min_rtt_us: 40_000,
        snd_mss: 1448,
        busy: true,
        unsent: true,
        ..TcpInfo::default()
    });
    let mut c = Control::new(1);
    c.set_domain(0);
    c.started(0, 2, Some(25.0 * MB), Some((2, Some(25.0 * MB))));
    let whole = (25.0 * MB * PACING_TARGET) as u64;
    let half = (25.0 * MB * PACING_TARGET / 2.0) as u64;
    assert_eq!(c.sending(TICK, &[info]), Some(true), "announced");
    assert_eq!(c.tick(TICK, &[info]), Some(half));
    c.peer_sending(1, false);
    // Within the settling time it keeps to its half: the peer may have
    // started at the same moment, its word not yet here.
    assert_eq!(c.tick(2 * TICK, &[info]), None);
    let later = TICK + share::SETTLE;
    assert_eq!(c.tick(later, &[info]), Some(whole));
    c.peer_sending(1, true);
    assert_eq!(c.tick(later + TICK, &[info]), Some(half));
    assert_eq!(c.sending(later + TICK, &[info]), None, "no change");
}
