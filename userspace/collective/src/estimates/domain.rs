//! The domain's WAN rate from every rank's bytes, not from one rank's share.
//!
//! Every rank of a domain sends across the WAN at once (hierarchical
//! allreduce). One rank's own rate, scaled by the ranks of its domain, is a
//! poor sample of the path: its share swings between about a third and two
//! thirds from one 100 ms to the next, and a max filter keeps the high swings
//! (docs/BENCHMARKS.md, "Why the live rate estimate runs high"). So each rank
//! counts the payload bytes its WAN bulk connections had delivered in
//! wall-clock windows of [`WINDOW`] ([`WindowMeter`]), sends each window to
//! the other ranks of its domain (a `WanRate` frame on a LAN connection they
//! already share), and sums the domain's windows ([`DomainSum`]).
//!
//! A sum is the path's rate only while the path was full: every rank had
//! data to send (none idle or app-limited) and the bottleneck held a queue
//! (the connections' smoothed RTT above their minimum by [`QUEUE_MIN`] in
//! every reading of the window, seen by every rank). Any other window is a
//! lower bound: it can raise the estimate, never lower it. Not "the ranks'
//! caps held them back", and not "a queue in most readings": windows where
//! the path was full only part of the time read low, and the max filter,
//! once fed only such windows, would spiral the estimate (and the caps) down.
//!
//! The windows are aligned on the hosts' wall clocks (one domain: one data
//! centre, clocks within a few ms of each other). Both types are pure: time
//! comes in as arguments.

use std::collections::{BTreeMap, BTreeSet};

use crate::transport::tcp::TcpInfo;
use crate::wire::WanRate;

/// Length of the windows the ranks of a domain sum, ns. Long against the
/// 10 ms between readings (a window's edges are known to a reading), short
/// against the estimator's 2 s max filter (ten windows in it).
pub const WINDOW: u64 = 200_000_000;

/// A reading shows a queue when a busy connection's smoothed RTT exceeds
/// its minimum by this much (µs) or by a twentieth of the minimum, whichever
/// is more.
pub const QUEUE_MIN: u32 = 1_000;

/// Windows kept waiting for the other ranks' reports.
const KEEP: u64 = 4;

/// One rank's bytes per window, from its bulk sockets' `tcpi_delivered`
/// (segments, times the socket's MSS). Not `tcpi_bytes_acked`: that counts
/// only what the cumulative ACK covers, so under loss a window that waits for
/// a retransmission reads low and the next one high; `tcpi_delivered` counts
/// selectively acknowledged segments when they arrive.
#[derive(Debug, Clone, Default)]
pub struct WindowMeter {
    delivered: Vec<Option<u32>>,
    /// Time of the previous reading, ns (monotonic).
    prev_ns: Option<u64>,
    open: Option<Open>,
}

#[derive(Debug, Clone)]
struct Open {
    window: u64,
    first_ns: u64,
    last_ns: u64,
    bytes: u64,
    readings: u32,
    idle: u32,
    app_limited: u32,
    queued: u32,
}

impl WindowMeter {
    /// One reading: `now_ns` monotonic, `wall_ns` the wall clock. Returns
    /// the window that this reading closed, if it closed one that had at
    /// least two readings.
    pub fn observe(
        &mut self,
        now_ns: u64,
        wall_ns: u64,
        infos: &[Option<TcpInfo>],
    ) -> Option<WanRate> {
        if self.delivered.len() != infos.len() {
            self.delivered = vec![None; infos.len()];
        }
        let (mut bytes, mut busy, mut app_limited, mut queued) = (0u64, false, false, false);
        for (last, info) in self.delivered.iter_mut().zip(infos) {
            let Some(i) = info else { continue };
            if let Some(l) = *last {
                bytes += u64::from(i.delivered.wrapping_sub(l)) * u64::from(i.snd_mss);
            }
            *last = Some(i.delivered);
            busy |= i.busy;
            app_limited |= i.busy && i.app_limited;
            queued |= i.busy && shows_queue(i);
        }
        let window = wall_ns / WINDOW;
        let closed = match &self.open {
            Some(o) if o.window != window => self.open.take().and_then(Open::report),
            _ => None,
        };
        let prev = self.prev_ns.replace(now_ns);
        let Some(prev) = prev else { return closed };
        let o = self.open.get_or_insert(Open {
            window,
            first_ns: prev,
            last_ns: prev,
            bytes: 0,
            readings: 0,
            idle: 0,
            app_limited: 0,
            queued: 0,
        });
        o.last_ns = now_ns;
        o.bytes += bytes;
        o.readings += 1;
        o.idle += u32::from(!busy);
        o.app_limited += u32::from(app_limited);
        o.queued += u32::from(queued);
        closed
    }
}

fn shows_queue(i: &TcpInfo) -> bool {
    i.min_rtt_us > 0
        && i.min_rtt_us != u32::MAX
        && i.rtt_us
            > i.min_rtt_us
                .saturating_add(QUEUE_MIN.max(i.min_rtt_us / 20))
}

impl Open {
    fn report(self) -> Option<WanRate> {
        let interval_ns = self.last_ns.saturating_sub(self.first_ns);
        if self.readings < 2 || interval_ns == 0 {
            return None;
        }
        Some(WanRate {
            window: self.window,
            bytes: self.bytes,
            interval_us: u32::try_from(interval_ns / 1000).unwrap_or(u32::MAX).max(1),
            limited: self.idle > 0 || 2 * self.app_limited > self.readings,
            queued: self.queued == self.readings,
            clear: 4 * self.queued < self.readings,
        })
    }
}

/// What a domain's window says of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Every rank had data and saw a queue throughout: the sum is the
    /// path's rate.
    Full,
    /// Every rank had data and saw a queue in less than a quarter of the
    /// window: the path could have carried more than the sum (what held the
    /// ranks back was their pacing, or their own congestion control).
    Room,
    /// A rank was idle or app-limited, and no rank saw a queue in a quarter
    /// of the window or more: a lower bound that says nothing of a limit.
    Idle,
    /// Anything else (a queue somewhere, not throughout): a lower bound,
    /// near the path's rate.
    Partly,
}

/// The windows of a domain's ranks, summed once every rank reported one.
#[derive(Debug, Clone)]
pub struct DomainSum {
    me: usize,
    /// Every rank that reported so far (this one included).
    ranks: BTreeSet<usize>,
    windows: BTreeMap<u64, BTreeMap<usize, WanRate>>,
}

impl DomainSum {
    pub fn new(me: usize) -> Self {
        DomainSum {
            me,
            ranks: BTreeSet::from([me]),
            windows: BTreeMap::new(),
        }
    }

    /// A window this rank closed.
    pub fn add_mine(&mut self, r: WanRate) {
        self.add(self.me, r);
    }

    /// A window of rank `from` (this rank's own too).
    pub fn add(&mut self, from: usize, r: WanRate) {
        self.ranks.insert(from);
        self.windows.entry(r.window).or_default().insert(from, r);
        let newest = self.windows.keys().next_back().copied().unwrap_or(0);
        while self
            .windows
            .keys()
            .next()
            .is_some_and(|&w| w + KEEP < newest)
        {
            self.windows.pop_first();
        }
    }

    /// The domain's rate (payload bytes/s) of every window all ranks have
    /// reported and this rank has closed a later one after, oldest first,
    /// with what it says of the path. Taken windows are forgotten.
    pub fn take_complete(&mut self) -> Vec<(f64, Fill)> {
        let mine_newest = self
            .windows
            .iter()
            .rev()
            .find(|(_, m)| m.contains_key(&self.me))
            .map(|(&w, _)| w);
        let Some(mine_newest) = mine_newest else {
            return Vec::new();
        };
        let ready: Vec<u64> = self
            .windows
            .iter()
            .filter(|(&w, m)| w < mine_newest && self.ranks.iter().all(|r| m.contains_key(r)))
            .map(|(&w, _)| w)
            .collect();
        let mut out = Vec::new();
        for w in ready {
            if let Some(m) = self.windows.remove(&w) {
                let rate = m
                    .values()
                    .map(|r| r.bytes as f64 * 1e6 / f64::from(r.interval_us.max(1)))
                    .sum();
                let busy = m.values().all(|r| !r.limited);
                let fill = if busy && m.values().all(|r| r.queued) {
                    Fill::Full
                } else if m.values().all(|r| r.clear) {
                    if busy {
                        Fill::Room
                    } else {
                        Fill::Idle
                    }
                } else {
                    Fill::Partly
                };
                out.push((rate, fill));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A reading after `bytes` were delivered, in 1,000-byte segments.
    fn info(bytes: u64, busy: bool) -> Option<TcpInfo> {
        Some(TcpInfo {
            delivered: (bytes / 1000) as u32,
            snd_mss: 1000,
            busy,
            rtt_us: 50_000,
            min_rtt_us: 40_000,
            ..TcpInfo::default()
        })
    }

    #[test]
    fn a_window_counts_the_bytes_acknowledged_within_it() {
        let mut m = WindowMeter::default();
        let mut out = Vec::new();
        // 10 ms readings, 100 kB per reading on one socket: 10 MB/s.
        for k in 0..45u64 {
            let t = 1_000 * MS + k * 10 * MS;
            if let Some(r) = m.observe(t, t, &[info(k * 100_000, true), None]) {
                out.push(r);
            }
        }
        assert_eq!(out.len(), 2, "{out:?}");
        // The first window opened at the first reading (no bytes counted before it).
        let r = out[1];
        assert_eq!(r.window, 6);
        assert!(!r.limited && r.queued, "{r:?}");
        let rate = r.bytes as f64 * 1e6 / f64::from(r.interval_us);
        assert!((rate / 10e6 - 1.0).abs() < 1e-9, "{rate}");
    }

    #[test]
    fn idle_app_limited_and_queue_free_windows_say_so() {
        let run = |busy: bool, app: bool, rtt_us: u32| {
            let mut m = WindowMeter::default();
            let mut last = None;
            for k in 0..30u64 {
                let t = k * 10 * MS;
                let mut i = info(k * 100_000, busy);
                if let Some(i) = i.as_mut() {
                    i.app_limited = app;
                    i.rtt_us = rtt_us;
                }
                last = m.observe(t, t, &[i]).or(last);
            }
            last.expect("a window")
        };
        let r = run(true, false, 50_000);
        assert!(!r.limited && r.queued, "{r:?}");
        assert!(
            !run(true, false, 41_500).queued,
            "1.5 ms over a 40 ms minimum: no queue"
        );
        assert!(run(true, true, 50_000).limited, "app-limited");
        assert!(run(false, false, 50_000).limited, "idle");
    }

    fn rate(window: u64, mb_per_s: f64, full: bool) -> WanRate {
        WanRate {
            window,
            bytes: (mb_per_s * 1e6 * 0.2) as u64,
            interval_us: 200_000,
            limited: !full,
            queued: full,
            clear: false,
        }
    }

    #[test]
    fn the_domain_sum_waits_for_every_rank_and_a_later_window() {
        let mut d = DomainSum::new(0);
        d.add(1, rate(7, 15.0, true));
        d.add(0, rate(7, 10.0, true));
        assert!(
            d.take_complete().is_empty(),
            "window 7 may still be open here"
        );
        d.add(0, rate(8, 12.0, true));
        assert_eq!(d.take_complete(), vec![(25e6, Fill::Full)]);
        // Rank 1 missed window 8: it stays until it comes or ages out.
        d.add(0, rate(9, 12.0, false));
        assert!(d.take_complete().is_empty());
        d.add(1, rate(8, 13.0, true));
        assert_eq!(d.take_complete(), vec![(25e6, Fill::Full)]);
        // A limited rank makes the sum a lower bound.
        d.add(1, rate(9, 5.0, true));
        d.add(0, rate(10, 1.0, true));
        assert_eq!(d.take_complete(), vec![(17e6, Fill::Partly)]);
        // ... and so does an idle rank in a window without a queue, which
        // also says nothing of a limit.
        let idle = |w, mb| WanRate {
            queued: false,
            clear: true,
            ..rate(w, mb, false)
        };
        d.add(0, idle(10, 1.0));
        d.add(1, idle(10, 5.0));
        d.add(0, rate(11, 1.0, true));
        d.add(1, rate(11, 1.0, true));
        assert_eq!(d.take_complete(), vec![(6e6, Fill::Idle)]);
        // So does a window in which one rank saw no queue throughout.
        let unqueued = |w, mb, clear| WanRate {
            queued: false,
            clear,
            ..rate(w, mb, true)
        };
        d.add(0, rate(12, 1.0, true));
        assert_eq!(d.take_complete(), vec![(2e6, Fill::Full)]);
        d.add(0, unqueued(13, 12.0, false));
        d.add(1, rate(13, 12.0, true));
        d.add(0, rate(14, 1.0, true));
        assert_eq!(d.take_complete(), vec![(24e6, Fill::Partly)]);
        // Busy ranks and no queue anywhere: the path had room.
        d.add(0, unqueued(15, 11.0, true));
        d.add(1, unqueued(15, 11.0, true));
        d.add(0, rate(16, 1.0, true));
        assert_eq!(d.take_complete(), vec![(22e6, Fill::Room)]);
        // Windows that never complete are forgotten.
        for w in 17..30 {
            d.add(0, rate(w, 1.0, true));
        }
        assert!(d.take_complete().is_empty());
        assert!(d.windows.len() <= KEEP as usize + 1, "{}", d.windows.len());
    }
}
