//! Executes the plans of every rank on a virtual clock.
//!
//! Each send occupies a *resource* (a directed link, or a WAN pipe shared by every
//! host of a domain) for `bytes × β` and arrives `α` later; a step completes when all
//! its receives have arrived; lanes run `window` at a time, like the real engine.
//! Optionally carries real values (as f64) to check that a schedule computes the
//! right thing, without sockets.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use super::{Action, Plan};
use crate::error::Rank;

/// Cost of one link: latency `alpha` (seconds) and `beta` (seconds per byte).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkCost {
    pub alpha: f64,
    pub beta: f64,
}

/// The network the simulation runs on.
pub trait Network {
    fn cost(&self, from: Rank, to: Rank) -> LinkCost;
    /// Transfers with the same resource key are serialised (they share a bottleneck).
    fn resource(&self, from: Rank, to: Rank) -> (usize, usize) {
        (from, to)
    }
}

/// Values carried through the simulation, one buffer per rank, and the reduction.
pub struct SimData<'a> {
    pub buffers: &'a mut [Vec<f64>],
    pub reduce: &'a dyn Fn(f64, f64) -> f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SimOutcome {
    /// When the last rank finished (seconds).
    pub time: f64,
    /// Bytes sent on each directed link.
    pub link_bytes: BTreeMap<(Rank, Rank), u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("rank {rank} lane {lane} step {step}: no matching send from {peer}")]
    Deadlock {
        rank: Rank,
        lane: usize,
        step: usize,
        peer: Rank,
    },
    #[error("send from {from} to {to} in lane {lane} step {step} was never received")]
    Unmatched {
        from: Rank,
        to: Rank,
        lane: usize,
        step: usize,
    },
    #[error("rank {rank} lane {lane} step {step}: {detail}")]
    Mismatch {
        rank: Rank,
        lane: usize,
        step: usize,
        detail: String,
    },
}

struct Event {
    t: f64,
    seq: u64,
    rank: Rank,
    lane: usize,
    step: usize,
}
impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    // Reversed: BinaryHeap pops the earliest event first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

struct Msg {
    arrival: f64,
    len: usize,
    data: Vec<f64>,
}

/// Runs `plans` (index = rank). `elem_bytes` converts spans to bytes.
pub fn simulate(
    plans: &[Plan],
    elem_bytes: usize,
    net: &dyn Network,
    window: usize,
    mut data: Option<SimData<'_>>,
) -> Result<SimOutcome, SimError> {
    let window = window.max(1);
    let mut heap = BinaryHeap::new();
    let mut seq = 0u64;
    let mut next_lane = vec![0usize; plans.len()];
    let mut lanes_done = vec![0usize; plans.len()];
    let mut end = 0f64;
    for (r, p) in plans.iter().enumerate() {
        next_lane[r] = p.lanes.len().min(window);
        for l in 0..next_lane[r] {
            heap.push(Event {
                t: 0.0,
                seq,
                rank: r,
                lane: l,
                step: 0,
            });
            seq += 1;
        }
    }
    let mut msgs: HashMap<(Rank, Rank, usize, usize), Msg> = HashMap::new();
    let mut waiting: HashMap<(Rank, usize, usize), f64> = HashMap::new();
    let mut free: HashMap<(usize, usize), f64> = HashMap::new();
    let mut link_bytes = BTreeMap::new();

    while let Some(Event {
        t,
        rank: r,
        lane: l,
        step: s,
        ..
    }) = heap.pop()
    {
        let lane = &plans[r].lanes[l];
        if s == lane.steps.len() {
            lanes_done[r] += 1;
            end = end.max(t);
            if next_lane[r] < plans[r].lanes.len() {
                heap.push(Event {
                    t,
                    seq,
                    rank: r,
                    lane: next_lane[r],
                    step: 0,
                });
                seq += 1;
                next_lane[r] += 1;
            }
            continue;
        }
        let mut ready = vec![(r, l, s)];
        for a in &lane.steps[s] {
            if let Action::Send { peer, span } = *a {
                let c = net.cost(r, peer);
                let bytes = (span.len * elem_bytes) as u64;
                let slot = free.entry(net.resource(r, peer)).or_insert(0.0);
                let start = slot.max(t);
                *slot = start + bytes as f64 * c.beta;
                *link_bytes.entry((r, peer)).or_insert(0u64) += bytes;
                let values = match &data {
                    Some(d) => d.buffers[r][span.start..span.end()].to_vec(),
                    None => Vec::new(),
                };
                let m = Msg {
                    arrival: *slot + c.alpha,
                    len: span.len,
                    data: values,
                };
                if msgs.insert((peer, r, l, s), m).is_some() {
                    return Err(SimError::Mismatch {
                        rank: r,
                        lane: l,
                        step: s,
                        detail: format!("two sends to {peer}"),
                    });
                }
                ready.push((peer, l, s));
            }
        }
        waiting.insert((r, l, s), t);
        for (q, ql, qs) in ready {
            if let Some(&t0) = waiting.get(&(q, ql, qs)) {
                if let Some(done) = try_complete(plans, q, ql, qs, t0, &mut msgs, data.as_mut())? {
                    waiting.remove(&(q, ql, qs));
                    heap.push(Event {
                        t: done,
                        seq,
                        rank: q,
                        lane: ql,
                        step: qs + 1,
                    });
                    seq += 1;
                }
            }
        }
    }
    if let Some(((to, from, lane, step), _)) = msgs.iter().next() {
        return Err(SimError::Unmatched {
            from: *from,
            to: *to,
            lane: *lane,
            step: *step,
        });
    }
    if let Some((&(rank, lane, step), _)) = waiting.iter().next() {
        let peer = plans[rank].lanes[lane].steps[step]
            .iter()
            .find(|a| matches!(a, Action::Recv { .. }))
            .map(Action::peer)
            .unwrap_or(rank);
        return Err(SimError::Deadlock {
            rank,
            lane,
            step,
            peer,
        });
    }
    debug_assert!(lanes_done
        .iter()
        .zip(plans)
        .all(|(d, p)| *d == p.lanes.len()));
    Ok(SimOutcome {
        time: end,
        link_bytes,
    })
}

/// Completes step `s` of lane `l` at rank `r` if all its receives have arrived.
fn try_complete(
    plans: &[Plan],
    r: Rank,
    l: usize,
    s: usize,
    t0: f64,
    msgs: &mut HashMap<(Rank, Rank, usize, usize), Msg>,
    data: Option<&mut SimData<'_>>,
) -> Result<Option<f64>, SimError> {
    let step = &plans[r].lanes[l].steps[s];
    let recvs = || {
        step.iter().filter_map(|a| match *a {
            Action::Recv { peer, span, reduce } => Some((peer, span, reduce)),
            Action::Send { .. } => None,
        })
    };
    if !recvs().all(|(p, ..)| msgs.contains_key(&(r, p, l, s))) {
        return Ok(None);
    }
    let mut done = t0;
    let mut data = data;
    for (p, span, reduce) in recvs() {
        let Some(m) = msgs.remove(&(r, p, l, s)) else {
            continue;
        };
        if m.len != span.len {
            let detail = format!("{p} sent {} elements, expected {}", m.len, span.len);
            return Err(SimError::Mismatch {
                rank: r,
                lane: l,
                step: s,
                detail,
            });
        }
        done = done.max(m.arrival);
        if let Some(d) = data.as_deref_mut() {
            let dst = &mut d.buffers[r][span.start..span.end()];
            for (x, y) in dst.iter_mut().zip(m.data) {
                *x = if reduce { (d.reduce)(*x, y) } else { y };
            }
        }
    }
    Ok(Some(done))
}

#[cfg(test)]
#[path = "sim_tests.rs"]
mod tests;
