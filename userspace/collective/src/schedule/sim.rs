//! Executes the plans of every rank on a virtual clock, each rank by the same
//! [`Executor`] the engine drives over real connections: the simulator is a
//! second driver, with a modelled network instead of sockets.
//!
//! Each chunk the executor sends occupies a *resource* (a directed link, or a WAN
//! pipe shared by every host of a domain) for `bytes × β` and arrives `α` later,
//! when it is handed to the receiving rank's executor; the executor decides what
//! that completes and what to send next (lanes, `window` lanes in flight, early
//! chunks). Optionally carries real values (as f64) to check that a schedule
//! computes the right thing, without sockets.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::Duration;

use super::Plan;
use crate::dtype::{DType, ReduceOp};
use crate::error::Rank;
use crate::exec::trace::Message;
use crate::exec::{ChunkId, ExecConfig, ExecError, Executor, Output};
use crate::wire::{Call, CallKind, Codec};

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
    #[error("rank {rank}: {source}")]
    Executor { rank: Rank, source: ExecError },
}

impl SimError {
    /// What an executor's refusal of a chunk means for the plans.
    fn at(rank: Rank, e: ExecError) -> Self {
        match e {
            ExecError::UnknownChunk {
                peer, lane, step, ..
            }
            | ExecError::StepComplete { peer, lane, step }
            | ExecError::NotExpected { peer, lane, step } => SimError::Unmatched {
                from: peer,
                to: rank,
                lane,
                step,
            },
            ExecError::OutOfRange { lane, step, .. } | ExecError::Duplicate { lane, step, .. } => {
                SimError::Mismatch {
                    rank,
                    lane,
                    step,
                    detail: e.to_string(),
                }
            }
            ExecError::CallMismatch { .. }
            | ExecError::PeerLeft { .. }
            | ExecError::Timeout { .. } => SimError::Executor { rank, source: e },
        }
    }
}

/// How every simulated rank runs its plan (the executor's settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimConfig {
    /// Bytes per element (spans to bytes).
    pub elem_bytes: usize,
    /// Lanes in flight.
    pub window: usize,
    /// Largest chunk of a transfer (`usize::MAX`: whole transfers).
    pub frame_bytes: usize,
}

/// A chunk on its way.
struct Delivery {
    t: f64,
    seq: u64,
    to: Rank,
    from: Rank,
    call: Call,
    id: ChunkId,
    len: usize,
    values: Vec<f64>,
}
impl PartialEq for Delivery {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Delivery {}
impl PartialOrd for Delivery {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Delivery {
    // Reversed: BinaryHeap pops the earliest delivery first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

/// Runs `plans` (index = rank) with whole transfers. `elem_bytes` converts spans to bytes.
pub fn simulate(
    plans: &[Plan],
    elem_bytes: usize,
    net: &dyn Network,
    window: usize,
    data: Option<SimData<'_>>,
) -> Result<SimOutcome, SimError> {
    let cfg = SimConfig {
        elem_bytes,
        window,
        frame_bytes: usize::MAX,
    };
    run(plans, &cfg, net, data, None)
}

/// The call every rank makes in [`run`] (the plans alone are compared there).
const SAME_CALL: Call = Call {
    kind: CallKind::Plan,
    dtype: DType::U8,
    count: 0,
    reduce: ReduceOp::Sum,
    root: 0,
    codec: Codec::Raw,
};

/// Runs `plans` (index = rank); with `trace`, records per rank every chunk sent
/// and applied, in the order the rank's executor asked for it.
pub fn run(
    plans: &[Plan],
    cfg: &SimConfig,
    net: &dyn Network,
    data: Option<SimData<'_>>,
    trace: Option<&mut Vec<Vec<Message>>>,
) -> Result<SimOutcome, SimError> {
    let calls = vec![SAME_CALL; plans.len()];
    let mut w = World::new(plans, &calls, cfg, net, data, trace);
    for r in 0..plans.len() {
        w.execs[r]
            .start(Duration::ZERO)
            .map_err(|e| SimError::at(r, e))?;
        w.drain(r, 0.0);
    }
    while let Some(d) = w.heap.pop() {
        let now = Duration::from_secs_f64(d.t);
        w.execs[d.to]
            .chunk_arrived(d.from, Some(d.call), d.id, d.len, d.values, now)
            .map_err(|e| SimError::at(d.to, e))?;
        w.drain(d.to, d.t);
    }
    for (r, ex) in w.execs.iter().enumerate() {
        if let Some((from, lane, step)) = ex.first_stashed() {
            return Err(SimError::Unmatched {
                from,
                to: r,
                lane,
                step,
            });
        }
    }
    for (rank, ex) in w.execs.iter().enumerate() {
        if !ex.is_done() {
            let (lane, step, peer) = ex.waiting_on().unwrap_or((0, 0, rank));
            return Err(SimError::Deadlock {
                rank,
                lane,
                step,
                peer,
            });
        }
    }
    Ok(SimOutcome {
        time: w.end,
        link_bytes: w.link_bytes,
    })
}

/// How one rank's operation ended in [`run_calls`].
#[derive(Debug, Clone, PartialEq)]
pub enum RankEnd {
    /// Completed at this time (the caller would see Ok).
    Done(f64),
    /// Refused a chunk (the caller would see this error).
    Failed(ExecError),
    /// Still waiting when nothing more was in flight (a timeout, in a real run).
    Stuck,
}

/// Runs rank r's plan for rank r's call `calls[r]`, to the end: a rank whose
/// executor refuses a chunk stops (sends nothing more), the others go on.
pub fn run_calls(
    plans: &[Plan],
    calls: &[Call],
    cfg: &SimConfig,
    net: &dyn Network,
) -> Vec<RankEnd> {
    let mut w = World::new(plans, calls, cfg, net, None, None);
    let mut ends = vec![RankEnd::Stuck; plans.len()];
    for (r, end) in ends.iter_mut().enumerate() {
        match w.execs[r].start(Duration::ZERO) {
            Ok(()) => w.drain(r, 0.0),
            Err(e) => *end = RankEnd::Failed(e),
        }
    }
    while let Some(d) = w.heap.pop() {
        if matches!(ends[d.to], RankEnd::Failed(_)) {
            continue;
        }
        let now = Duration::from_secs_f64(d.t);
        match w.execs[d.to].chunk_arrived(d.from, Some(d.call), d.id, d.len, d.values, now) {
            Ok(()) => w.drain(d.to, d.t),
            Err(e) => ends[d.to] = RankEnd::Failed(e),
        }
    }
    for (r, end) in ends.iter_mut().enumerate() {
        if *end == RankEnd::Stuck && w.execs[r].is_done() {
            *end = RankEnd::Done(w.done_at[r]);
        }
    }
    ends
}

/// The simulated ranks and the network between them.
struct World<'a, 'p, 'd, 't> {
    net: &'a dyn Network,
    elem_bytes: usize,
    execs: Vec<Executor<'p, Vec<f64>>>,
    heap: BinaryHeap<Delivery>,
    seq: u64,
    /// When each resource is next free.
    free: HashMap<(usize, usize), f64>,
    link_bytes: BTreeMap<(Rank, Rank), u64>,
    end: f64,
    data: Option<SimData<'d>>,
    trace: Option<&'t mut Vec<Vec<Message>>>,
    /// When each rank's executor finished.
    done_at: Vec<f64>,
}

impl<'a, 'p, 'd, 't> World<'a, 'p, 'd, 't> {
    fn new(
        plans: &'p [Plan],
        calls: &[Call],
        cfg: &SimConfig,
        net: &'a dyn Network,
        data: Option<SimData<'d>>,
        trace: Option<&'t mut Vec<Vec<Message>>>,
    ) -> Self {
        let execs = plans
            .iter()
            .zip(calls)
            .enumerate()
            .map(|(rank, (p, &call))| {
                let c = ExecConfig {
                    op: 0,
                    rank,
                    call,
                    elem_bytes: cfg.elem_bytes.max(1),
                    window: cfg.window,
                    frame_bytes: cfg.frame_bytes,
                    idle_timeout: Duration::MAX,
                    mark_tail: true,
                };
                Executor::new(p, c)
            })
            .collect();
        let trace = trace.map(|t| {
            *t = vec![Vec::new(); plans.len()];
            t
        });
        World {
            net,
            elem_bytes: cfg.elem_bytes.max(1),
            execs,
            heap: BinaryHeap::new(),
            seq: 0,
            free: HashMap::new(),
            link_bytes: BTreeMap::new(),
            end: 0.0,
            data,
            trace,
            done_at: vec![0.0; plans.len()],
        }
    }

    /// Performs rank `r`'s outputs at time `t`: schedules sends, applies chunks.
    fn drain(&mut self, r: Rank, t: f64) {
        let eb = self.elem_bytes;
        while let Some(out) = self.execs[r].poll() {
            match out {
                Output::Send(s) => {
                    if let Some(tr) = self.trace.as_deref_mut() {
                        tr[r].push(Message::of_send(&s));
                    }
                    let c = self.net.cost(r, s.peer);
                    let bytes = s.range.len();
                    let slot = self.free.entry(self.net.resource(r, s.peer)).or_insert(0.0);
                    let start = slot.max(t);
                    *slot = start + bytes as f64 * c.beta;
                    *self.link_bytes.entry((r, s.peer)).or_insert(0u64) += bytes as u64;
                    let values = match &self.data {
                        Some(d) => d.buffers[r][s.range.start / eb..s.range.end / eb].to_vec(),
                        None => Vec::new(),
                    };
                    self.heap.push(Delivery {
                        t: *slot + c.alpha,
                        seq: self.seq,
                        to: s.peer,
                        from: r,
                        call: s.call,
                        id: ChunkId {
                            lane: s.lane,
                            step: s.step,
                            offset: s.offset,
                        },
                        len: bytes,
                        values,
                    });
                    self.seq += 1;
                }
                Output::Apply(a) => {
                    if let Some(tr) = self.trace.as_deref_mut() {
                        tr[r].push(Message::applied(&a));
                    }
                    if let Some(d) = self.data.as_mut() {
                        let dst = &mut d.buffers[r][a.range.start / eb..a.range.end / eb];
                        for (x, y) in dst.iter_mut().zip(&a.payload) {
                            *x = if a.reduce { (d.reduce)(*x, *y) } else { *y };
                        }
                    }
                }
                Output::Done => {
                    self.end = self.end.max(t);
                    self.done_at[r] = t;
                }
            }
        }
    }
}

mod stall;
pub use stall::{run_stopped, StopEnd};

#[cfg(test)]
mod tests;
