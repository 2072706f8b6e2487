//! A rank that stops mid-operation, on the virtual clock. Every rank runs its
//! plan with the engine's [`Executor`] (idle timeout on) and the engine's
//! [`Judge`]; a peer is heard (its heartbeats) until it stops or gives up;
//! an Abort carries the verdict it decided, after the link latency. What
//! [`run_stopped`] returns is what the blame rule makes each rank report.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

use super::{Network, SimConfig, World, SAME_CALL};
use crate::blame::{Decision, Judge, JudgeConfig, Link, Verdict};
use crate::error::Rank;
use crate::exec::{ExecConfig, ExecError, Executor};
use crate::schedule::Plan;

/// How one rank's operation ended in [`run_stopped`].
#[derive(Debug, Clone, PartialEq)]
pub enum StopEnd {
    /// Completed at this time.
    Done(f64),
    /// Gave up at this time, reporting this.
    Decided(f64, Decision),
    /// The rank that stopped.
    Stopped,
    /// Refused a chunk (a plan bug, not a blame question).
    Refused(ExecError),
    /// Still waiting when nothing more could happen.
    Stuck,
}

/// An Abort on its way.
struct AbortMsg {
    t: f64,
    seq: u64,
    to: Rank,
    from: Rank,
    verdict: Verdict,
}
impl PartialEq for AbortMsg {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for AbortMsg {}
impl PartialOrd for AbortMsg {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for AbortMsg {
    // Reversed: BinaryHeap pops the earliest first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

fn dur(t: f64) -> Duration {
    Duration::from_secs_f64(t.max(0.0))
}

struct Stall<'a, 'p> {
    w: World<'a, 'p, 'static, 'static>,
    judges: Vec<Judge>,
    ends: Vec<Option<StopEnd>>,
    /// When each rank stopped being heard (stopped, or gave up and closed).
    quiet_since: Vec<f64>,
    /// When a chunk from `from` last reached `to`: `[to][from]`.
    last_chunk: Vec<Vec<f64>>,
    aborts: BinaryHeap<AbortMsg>,
    seq: u64,
}

impl Stall<'_, '_> {
    fn active(&self, r: Rank) -> bool {
        self.ends[r].is_none()
    }

    /// What `r` waits on, and when it last heard each: heartbeats arrive from
    /// a peer until it goes quiet (plus the latency), chunks when they land.
    fn links(&self, r: Rank, t: f64) -> Vec<Link> {
        self.w.execs[r]
            .waiting_for()
            .into_iter()
            .map(|p| {
                let beat = t.min(self.quiet_since[p] + self.w.net.cost(p, r).alpha);
                Link {
                    peer: p,
                    heard: dur(beat.max(self.last_chunk[r][p])),
                }
            })
            .collect()
    }

    fn wake(&self, r: Rank, now: f64) -> Option<f64> {
        let j = &self.judges[r];
        let exec = (!j.is_failing())
            .then(|| self.w.execs[r].poll_timeout())
            .flatten();
        let judge = j.poll_timeout(&self.links(r, now), dur(now));
        [exec, judge]
            .into_iter()
            .flatten()
            .min()
            .map(|d| d.as_secs_f64())
    }

    /// After an input to `r` at `t`: its links, its decision, its end.
    fn settle(&mut self, r: Rank, t: f64) {
        if !self.active(r) {
            return;
        }
        let links = self.links(r, t);
        self.judges[r].check_links(&links, dur(t));
        if let Some(d) = self.judges[r].decision(&links, dur(t)) {
            self.ends[r] = Some(StopEnd::Decided(t, d));
            self.quiet_since[r] = t;
            for q in (0..self.ends.len()).filter(|&q| q != r) {
                self.aborts.push(AbortMsg {
                    t: t + self.w.net.cost(r, q).alpha,
                    seq: self.seq,
                    to: q,
                    from: r,
                    verdict: d.verdict,
                });
                self.seq += 1;
            }
        } else if !self.judges[r].is_failing() && self.w.execs[r].is_done() {
            self.ends[r] = Some(StopEnd::Done(self.w.done_at[r]));
        }
    }
}

/// Runs `plans` (index = rank) with an idle timeout of `timeout`; rank
/// `victim` stops at `stop_at` seconds (handles nothing more, sends nothing,
/// is heard no more). Returns how each rank's operation ended.
pub fn run_stopped(
    plans: &[Plan],
    cfg: &SimConfig,
    net: &dyn Network,
    victim: Rank,
    stop_at: f64,
    timeout: Duration,
) -> Vec<StopEnd> {
    let n = plans.len();
    let mut w = World::new(plans, &vec![SAME_CALL; n], cfg, net, None, None);
    w.execs = plans
        .iter()
        .enumerate()
        .map(|(rank, p)| {
            let c = ExecConfig {
                op: 0,
                rank,
                call: SAME_CALL,
                elem_bytes: cfg.elem_bytes.max(1),
                window: cfg.window,
                frame_bytes: cfg.frame_bytes,
                idle_timeout: timeout,
                mark_tail: true,
            };
            Executor::new(p, c)
        })
        .collect();
    let mut quiet_since = vec![f64::INFINITY; n];
    quiet_since[victim] = stop_at;
    let mut s = Stall {
        w,
        judges: (0..n)
            .map(|r| Judge::new(JudgeConfig::new(r, timeout)))
            .collect(),
        ends: vec![None; n],
        quiet_since,
        last_chunk: vec![vec![0.0; n]; n],
        aborts: BinaryHeap::new(),
        seq: 0,
    };
    for r in 0..n {
        if let Err(e) = s.w.execs[r].start(Duration::ZERO) {
            s.ends[r] = Some(StopEnd::Refused(e));
        }
        s.w.drain(r, 0.0);
    }
    let mut now = 0.0f64;
    let horizon = stop_at + 20.0 * timeout.as_secs_f64() + 1.0;
    for _ in 0..10_000_000u64 {
        let chunk = s.w.heap.peek().map(|d| d.t);
        let abort = s.aborts.peek().map(|a| a.t);
        let timer = (0..n)
            .filter(|&r| r != victim && s.active(r))
            .filter_map(|r| s.wake(r, now).map(|t| (t, r)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let next = [chunk, abort, timer.map(|t| t.0)]
            .into_iter()
            .flatten()
            .min_by(f64::total_cmp);
        let Some(t) = next.filter(|t| *t <= horizon) else {
            break;
        };
        now = now.max(t);
        if chunk == Some(t) {
            let Some(d) = s.w.heap.pop() else { break };
            let to = d.to;
            let live = s.active(to) && (to != victim || d.t < stop_at);
            if live {
                s.last_chunk[to][d.from] = d.t;
                if !s.judges[to].is_failing() {
                    let res = s.w.execs[to].chunk_arrived(
                        d.from,
                        Some(d.call),
                        d.id,
                        d.len,
                        d.values,
                        dur(now),
                    );
                    match res {
                        Ok(()) => s.w.drain(to, now),
                        Err(e) => s.ends[to] = Some(StopEnd::Refused(e)),
                    }
                }
                if to != victim {
                    s.settle(to, now);
                }
            }
        } else if abort == Some(t) {
            let Some(a) = s.aborts.pop() else { break };
            if a.to != victim && s.active(a.to) {
                s.judges[a.to].report(a.from, a.verdict, dur(now));
                s.settle(a.to, now);
            }
        } else if let Some((_, r)) = timer {
            if !s.judges[r].is_failing() {
                match s.w.execs[r].handle_timeout(dur(now)) {
                    Ok(()) => {}
                    Err(ExecError::Timeout { peers, after }) => {
                        s.judges[r].stalled(&peers, after, dur(now));
                    }
                    Err(e) => s.ends[r] = Some(StopEnd::Refused(e)),
                }
            }
            s.settle(r, now);
        }
    }
    s.ends
        .into_iter()
        .enumerate()
        .map(|(r, e)| match e {
            _ if r == victim => StopEnd::Stopped,
            Some(e) => e,
            None => StopEnd::Stuck,
        })
        .collect()
}

#[cfg(test)]
mod tests;
