//! The WAN estimates and pacing on virtual time: a fluid model of a path of
//! `rate` payload bytes/s shared by `sharers` ranks of `sockets` connections
//! each; every connection gets the smaller of its pacing cap and its fair share.

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
        }
    }

    /// One sampling interval of bulk traffic under caps `cap` (bytes/s per
    /// socket); `slow` scales this reading's rates (a loss recovery),
    /// `app_limited` marks them so.
    fn read(&mut self, cap: Option<u64>, slow: f64, app_limited: bool) -> Vec<Option<TcpInfo>> {
        self.now += TICK;
        let flows = (self.infos.len() * self.sharers) as f64;
        let share = self.rate / flows;
        let r = cap.map_or(share, |c| share.min(c as f64)) * slow;
        for i in &mut self.infos {
            i.delivery_rate = r as u64;
            i.app_limited = app_limited;
            i.delivered = i
                .delivered
                .wrapping_add((r * TICK as f64 / 1e9 / 1448.0) as u32 + 1);
            i.rtt_us = self.rtt_us;
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
}

fn goodput(c: &mut Control, now: u64) -> f64 {
    c.estimate(now).expect("an estimate").goodput_bps / 8.0
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

#[test]
fn pacing_at_the_estimate_holds_it_and_keeps_the_domain_below_the_rate() {
    let mut p = Path::new(25.0 * MB, 40, 2, 2);
    let mut c = Control::new(2);
    c.started(0, 2, Some(25.0 * MB), Some((2, None)));
    let caps = p.run(&mut c, 20 * S);
    assert!(
        within(goodput(&mut c, p.now), 25.0 * MB, 0.02),
        "no spiral down"
    );
    let cruise = (25.0 * MB * PACING_TARGET / 4.0) as u64;
    assert!(caps.contains(&cruise), "{caps:?}");
    assert!(caps.iter().all(|&k| (k as f64) <= 25.0 * MB * 1.21 / 4.0));
    assert!(
        caps.iter().any(|&k| k > cruise),
        "the gain cycle probes above the estimate"
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
    assert!(cap <= 12.5 * MB * 1.25 / 2.0, "the caps follow: {cap}");
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
fn the_gain_cycle_is_one_min_rtt_up_one_down_six_level() {
    let p = Pacer {
        flows: 2,
        start_ns: 0,
        probing: true,
    };
    let rtt = 40 * MS;
    let gains: Vec<f64> = (0..16).map(|k| p.gain(k * rtt + 1, rtt)).collect();
    assert_eq!(&gains[..8], &[1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
    assert_eq!(&gains[..8], &gains[8..]);
    assert_eq!(p.gain(5, 0), 1.0, "no RTT yet: no cycle");
    assert_eq!(
        p.per_socket(4e6, 2, 3 * rtt, rtt),
        (4e6 * PACING_TARGET / 4.0) as u64
    );
    assert_eq!(
        p.per_socket(4e6, 1, 3 * rtt, rtt),
        (4e6 * PACING_TARGET / 2.0) as u64,
        "one busy connection takes the rank's whole share"
    );
    assert_eq!(
        p.per_socket(4e6, 0, 3 * rtt, rtt),
        p.per_socket(4e6, 1, 3 * rtt, rtt)
    );
}
