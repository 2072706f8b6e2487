//! Start-up measurement of α and β per link class: for each class present, the
//! first pair of ranks of that class runs a ping-pong (α) and a one-way bulk
//! transfer (β) through the engine itself; the measuring rank publishes the result
//! in the store and every rank reads the same numbers, so all choose alike.
//!
//! Across the WAN one bulk transfer of `probe_bytes` ends in TCP's slow start
//! and measures a fraction of the path's rate (32 Mbit/s on a 200 Mbit/s
//! path), so there the transfer doubles ([`grow`]) while the measured rate
//! still rises by more than [`STILL_RISING`] and the next round fits the
//! time budget; the measuring rank tells its partner through the store
//! whether another round follows, so both run the same rounds.
//!
//! It sees the communicator only through [`ProbeLink`]: run a plan, share a value.

use std::time::{Duration, Instant};

use crate::config::Options;
use crate::cost::CostModel;
use crate::error::{Rank, Result, StoreError};
use crate::schedule::sim::LinkCost;
use crate::schedule::{Action, Lane, Plan, Span};
use crate::topology::{LinkClass, Topology};

const PINGS: usize = 5;
/// A round's rate must exceed the previous one's by this factor for the
/// WAN probe to double again.
pub const STILL_RISING: f64 = 1.2;
/// Most doublings of the WAN probe (1 MiB → 64 MiB).
const MAX_DOUBLINGS: usize = 6;
/// The WAN probe stops before a round expected to take longer than this.
const ROUND_BUDGET: Duration = Duration::from_millis(1500);

/// What the measuring rank decides after a WAN probe round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Round {
    pub bytes: usize,
    pub secs: f64,
}

/// Whether the WAN probe doubles again after `rounds` (oldest first), for
/// a path whose one-way latency is `alpha` seconds: only while the rate
/// still rises above every earlier round's and the next (twice as long)
/// round fits the budget.
pub fn grow(rounds: &[Round], alpha: f64) -> bool {
    let Some((last, earlier)) = rounds.split_last() else {
        return false;
    };
    let fits = 2.0 * last.secs < ROUND_BUDGET.as_secs_f64();
    let best_before = earlier.iter().map(|r| rate(r, alpha)).fold(0.0, f64::max);
    rounds.len() <= MAX_DOUBLINGS && fits && rate(last, alpha) > STILL_RISING * best_before
}

/// A round's rate, bytes/s, its latency taken out.
pub fn rate(r: &Round, alpha: f64) -> f64 {
    r.bytes as f64 / (r.secs - 2.0 * alpha).max(1e-9)
}

/// Whether the WAN probe stopped while its rate still rose (the budget or
/// the doubling limit ended it, or it ran one round): then its rate is
/// only a lower bound of the path's.
pub fn still_rising(rounds: &[Round], alpha: f64) -> bool {
    let Some((last, earlier)) = rounds.split_last() else {
        return false;
    };
    let best_before = earlier.iter().map(|r| rate(r, alpha)).fold(0.0, f64::max);
    rate(last, alpha) > STILL_RISING * best_before
}

/// The round the WAN estimate comes from: the fastest (a round that met a
/// random loss is slower than the path, not a measure of it).
pub fn fastest(rounds: &[Round], alpha: f64) -> Option<Round> {
    rounds
        .iter()
        .copied()
        .max_by(|a, b| rate(a, alpha).total_cmp(&rate(b, alpha)))
}

/// What the probe needs from a communicator, and nothing more.
pub(crate) trait ProbeLink {
    fn rank(&self) -> Rank;
    fn topology(&self) -> &Topology;
    /// Runs `plan` through the engine on a zeroed working buffer of `len` bytes.
    fn run_plan(&self, plan: Plan, len: usize) -> Result<()>;
    /// Publishes `value` under `key` in the bootstrap store.
    fn publish(&self, key: &str, value: &[u8]) -> Result<()>;
    /// Waits (up to `timeout`) for `key` in the bootstrap store.
    fn lookup(&self, key: &str, timeout: Duration) -> Result<Vec<u8>>;
    /// The WAN rate this rank's kernel saw on its bulk connections (payload
    /// bytes/s, `estimates`), if any.
    fn wan_goodput(&self) -> Option<f64> {
        None
    }
    /// The same per WAN path when the bulk connections are striped over
    /// several (index = path; 0 for a path it saw nothing on); empty with one.
    fn wan_path_goodputs(&self) -> Vec<f64> {
        Vec::new()
    }
}

/// The first pair (a < b) whose link is of `class`.
pub fn pair_of(topo: &Topology, class: LinkClass) -> Option<(Rank, Rank)> {
    let n = topo.world();
    (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .find(|&(a, b)| topo.class(a, b) == class)
}

/// `rounds` exchanges of `len` elements out (a→b) and 1 element back (b→a).
pub fn exchange_plan(me: Rank, a: Rank, b: Rank, rounds: usize, len: usize) -> Plan {
    let out = Span::new(0, len);
    let back = Span::new(len, 1);
    let mut steps = Vec::new();
    for _ in 0..rounds {
        if me == a {
            steps.push(vec![Action::Send { peer: b, span: out }]);
            steps.push(vec![Action::Recv {
                peer: b,
                span: back,
                reduce: false,
            }]);
        } else if me == b {
            steps.push(vec![Action::Recv {
                peer: a,
                span: out,
                reduce: false,
            }]);
            steps.push(vec![Action::Send {
                peer: a,
                span: back,
            }]);
        }
    }
    Plan {
        lanes: if steps.is_empty() {
            Vec::new()
        } else {
            vec![Lane { steps }]
        },
    }
}

fn timed(comm: &impl ProbeLink, plan: Plan, len: usize) -> Result<Duration> {
    let t = Instant::now();
    comm.run_plan(plan, len)?;
    Ok(t.elapsed())
}

/// What the start-up probe found, the same on every rank.
#[derive(Clone, Debug)]
pub(crate) struct Probed {
    pub model: CostModel,
    /// The WAN's β is a lower bound ([`still_rising`]).
    pub wan_floor: bool,
    /// With several WAN paths: the probing rank's rate of each (payload
    /// bytes/s, [`ProbeLink::wan_path_goodputs`]), which splits the probed
    /// rate among them; empty otherwise.
    pub wan_paths: Vec<f64>,
}

const WAN_PATHS_KEY: &str = "probe/wan/paths";

/// Probes every link class present and returns the model all ranks agree on.
pub(crate) fn measure(comm: &impl ProbeLink, opts: &Options) -> Result<Probed> {
    let me = comm.rank();
    let mut model = opts.cost;
    let mut classes = Vec::new();
    for class in LinkClass::ALL {
        let Some((a, b)) = pair_of(comm.topology(), class) else {
            continue;
        };
        classes.push(class);
        let bulk = opts.probe_bytes.max(2);
        // Warm-up (connection start, first-touch of buffers), then measure.
        timed(comm, exchange_plan(me, a, b, 1, 1), 2)?;
        let ping = timed(comm, exchange_plan(me, a, b, PINGS, 1), 2)?;
        timed(comm, exchange_plan(me, a, b, 1, bulk - 1), bulk)?;
        let alpha = ping.as_secs_f64() / (2 * PINGS) as f64;
        let (last, floor) = if class == LinkClass::InterDomain {
            wan_rounds(comm, (a, b), bulk, alpha, opts.rendezvous_timeout)?
        } else {
            let t = timed(comm, exchange_plan(me, a, b, 1, bulk - 1), bulk)?;
            let r = Round {
                bytes: bulk,
                secs: t.as_secs_f64(),
            };
            (r, false)
        };
        if me == a {
            let beta = ((last.secs - 2.0 * alpha) / (last.bytes - 1) as f64).max(1e-12);
            // The kernel's delivery-rate estimate of the same rounds is
            // logged beside the timed one, not used: on the testbed it read
            // far above the path (the max of a fresh connection's per-ACK
            // samples), which made the model pick a ring across the WAN.
            let kernel = (class == LinkClass::InterDomain)
                .then(|| comm.wan_goodput())
                .flatten();
            if let Some(g) = kernel {
                tracing::info!(
                    kernel_mbit_s = g * 8e-6,
                    timed_mbit_s = 8e-6 / beta,
                    "WAN probe: the rounds' timing sets β"
                );
            }
            tracing::info!(
                ?class,
                alpha_us = alpha * 1e6,
                gbit_s = 8.0 / beta / 1e9,
                "probed"
            );
            let floor = u8::from(floor);
            comm.publish(&key(class), format!("{alpha} {beta} {floor}").as_bytes())?;
            if class == LinkClass::InterDomain {
                let paths: Vec<String> = comm
                    .wan_path_goodputs()
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                comm.publish(WAN_PATHS_KEY, paths.join(" ").as_bytes())?;
            }
        }
    }
    let mut wan_floor = false;
    let mut wan_paths = Vec::new();
    for class in classes {
        let v = comm.lookup(&key(class), opts.rendezvous_timeout)?;
        let s = String::from_utf8_lossy(&v).into_owned();
        let mut it = s.split(' ').map(str::parse::<f64>);
        match (it.next(), it.next(), it.next()) {
            (Some(Ok(alpha)), Some(Ok(beta)), Some(Ok(floor))) => {
                model.set(class, LinkCost { alpha, beta });
                wan_floor |= class == LinkClass::InterDomain && floor != 0.0;
            }
            _ => return Err(StoreError::Protocol(format!("bad probe result {s:?}")).into()),
        }
        if class == LinkClass::InterDomain {
            let v = comm.lookup(WAN_PATHS_KEY, opts.rendezvous_timeout)?;
            wan_paths = parse_path_rates(&String::from_utf8_lossy(&v))?;
        }
    }
    Ok(Probed {
        model,
        wan_floor,
        wan_paths,
    })
}

/// The probing rank's per-path rates as published (space-separated, finite,
/// not negative; empty: one path).
fn parse_path_rates(s: &str) -> Result<Vec<f64>> {
    s.split_whitespace()
        .map(|r| match r.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
            _ => Err(StoreError::Protocol(format!("bad probed WAN path rates {s:?}")).into()),
        })
        .collect()
}

/// The WAN bulk rounds of pair (a, b), doubling from `bulk` bytes while
/// [`grow`] says so; returns the [`fastest`], and (on rank `a`) whether
/// the rate [`still_rising`] when the rounds stopped. Every rank runs the same
/// number of plans (those outside the pair, empty ones), so every rank
/// reads `a`'s decision after each round.
fn wan_rounds(
    comm: &impl ProbeLink,
    (a, b): (Rank, Rank),
    bulk: usize,
    alpha: f64,
    timeout: Duration,
) -> Result<(Round, bool)> {
    let me = comm.rank();
    let mut rounds: Vec<Round> = Vec::new();
    let mut bytes = bulk;
    loop {
        let t = timed(comm, exchange_plan(me, a, b, 1, bytes - 1), bytes)?;
        rounds.push(Round {
            bytes,
            secs: t.as_secs_f64(),
        });
        let key = format!("probe/wan/round{}", rounds.len());
        let again = if me == a {
            let again = grow(&rounds, alpha);
            comm.publish(&key, if again { b"1" } else { b"0" })?;
            again
        } else {
            comm.lookup(&key, timeout)? == b"1"
        };
        if !again {
            let best = fastest(&rounds, alpha)
                .ok_or_else(|| StoreError::Protocol("WAN probe ran no round".into()))?;
            return Ok((best, still_rising(&rounds, alpha)));
        }
        bytes *= 2;
    }
}

fn key(class: LinkClass) -> String {
    format!("probe/{class:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn published_path_rates_parse_or_are_a_protocol_error() {
        assert_eq!(parse_path_rates("").unwrap(), Vec::<f64>::new());
        assert_eq!(
            parse_path_rates("2.5e7 0 1.2e7").unwrap(),
            vec![2.5e7, 0.0, 1.2e7]
        );
        for bad in ["1 x", "NaN", "-3", "inf"] {
            let e = parse_path_rates(bad).unwrap_err().to_string();
            assert!(e.contains("bad probed WAN path rates"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_probe_doubles_while_the_rate_rises_and_the_budget_allows() {
        let a = 0.02;
        let r = |mib: usize, secs: f64| Round {
            bytes: mib * MIB,
            secs,
        };
        assert!(grow(&[r(1, 0.3)], a), "one round says nothing of the trend");
        assert!(grow(&[r(1, 0.3), r(2, 0.35)], a), "rate ×1.7: again");
        assert!(!grow(&[r(4, 0.2), r(8, 0.38)], a), "rate ×1.07: done");
        assert!(!still_rising(&[r(4, 0.2), r(8, 0.38)], a), "converged");
        // A 120 ms path: one 1 MiB round in slow start uses the budget.
        assert!(!grow(&[r(1, 0.9)], 0.06), "the next round would not fit");
        assert!(still_rising(&[r(1, 0.9)], 0.06), "its rate is a floor");
        assert!(still_rising(&[r(1, 0.3), r(2, 0.35)], a));
        assert!(!still_rising(&[], a));
        assert!(
            !grow(&[r(1, 0.1), r(2, 0.6), r(4, 0.25)], a),
            "a round slowed by a loss does not lower the bar"
        );
        assert_eq!(
            fastest(&[r(1, 0.1), r(2, 0.6), r(4, 0.25)], a),
            Some(r(4, 0.25))
        );
        assert!(
            !grow(&[r(8, 0.5), r(16, 0.8)], a),
            "the next round would take 1.6 s"
        );
        assert!(!grow(&[r(1, 0.8)], a), "a slow path gets one round");
        let many: Vec<Round> = (0..=MAX_DOUBLINGS).map(|k| r(1 << k, 0.01)).collect();
        assert!(!grow(&many, 0.0), "at most {MAX_DOUBLINGS} doublings");
        assert!(!grow(&[], a));
    }

    /// Seconds to move `bytes` over a path of `rate` bytes/s and round trip
    /// `rtt` on connections whose congestion window (all streams together)
    /// is `cwnd` bytes and grows as in slow start: a window per round trip,
    /// doubling, until it covers the bandwidth-delay product.
    fn transfer(bytes: f64, rate: f64, rtt: f64, cwnd: &mut f64) -> f64 {
        let bdp = rate * rtt;
        let (mut left, mut t) = (bytes, rtt / 2.0);
        while left > 0.0 && *cwnd < bdp {
            let sent = cwnd.min(left);
            left -= sent;
            t += if left > 0.0 { rtt } else { sent / rate };
            *cwnd *= 2.0;
        }
        t + left / rate + rtt / 2.0
    }

    /// The doubling rule on modelled slow start stops once the window covers
    /// the path, with the last round's β within 10 % of its rate (the real
    /// paths are measured by the testbed's bench: `wan probe` in its output).
    #[test]
    fn on_modelled_slow_start_the_estimate_lands_within_ten_percent() {
        for (mbit, rtt_ms) in [(50.0, 120.0), (100.0, 80.0), (200.0, 40.0), (1000.0, 10.0)] {
            let (rate, rtt) = (mbit * 1e6 / 8.0, rtt_ms / 1e3);
            let alpha = rtt / 2.0;
            // Two streams' initial windows; the warm-up round grows them first.
            let mut cwnd = 2.0 * 10.0 * 1460.0;
            transfer(MIB as f64, rate, rtt, &mut cwnd);
            let mut rounds = Vec::new();
            let mut bytes = MIB;
            loop {
                let secs = transfer(bytes as f64, rate, rtt, &mut cwnd);
                rounds.push(Round { bytes, secs });
                if !grow(&rounds, alpha) {
                    break;
                }
                bytes *= 2;
            }
            let est = super::rate(&fastest(&rounds, alpha).expect("rounds ran"), alpha);
            assert!(
                (est / rate - 1.0).abs() < 0.10,
                "{mbit} Mbit/s, {rtt_ms} ms: {:.1} Mbit/s after {} rounds",
                est * 8e-6,
                rounds.len(),
            );
        }
    }
}
