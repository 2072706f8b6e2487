//! The plan executor as a pure state machine (sans-IO, in the manner of
//! quinn-proto's `Connection`): it owns the lanes, the window of lanes in flight,
//! the early-chunk stash and every check on incoming chunks, and nothing else.
//!
//! No sockets, no threads, no clock: time is an input (a [`Duration`] since an
//! epoch the driver picks). The driver feeds inputs — [`Executor::start`],
//! [`Executor::chunk_arrived`], [`Executor::peer_left`], [`Executor::note_activity`],
//! [`Executor::handle_timeout`] — and after each one drains [`Executor::poll`] *in
//! order*, performing each [`Output`] before the next: a [`SendChunk`] names the
//! byte range of the working buffer to copy out now, an [`ApplyChunk`] the range to
//! reduce the payload into (or overwrite), [`Output::Done`] the end of the
//! operation. [`Executor::poll_timeout`] says when to call `handle_timeout`.
//!
//! Two drivers run it: the engine over real transports (`engine::drive`) and the
//! virtual-clock simulator ([`crate::schedule::sim`]). It is deterministic: the
//! same inputs in the same order give the same outputs.
//!
//! The payload type `P` is the driver's (a pooled buffer, simulated values); the
//! executor only stores early chunks and hands them back in an [`ApplyChunk`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;
use std::time::Duration;

use crate::error::Rank;
use crate::schedule::{Action, Plan};
use crate::wire::Call;

mod departed;
mod error;
mod ranges;
#[cfg(test)]
mod tests;
pub mod trace;
mod types;

pub use error::ExecError;
use ranges::Received;
pub use types::{ApplyChunk, ChunkId, ExecConfig, Output, SendChunk};

/// A receive of the current step of a lane.
#[derive(Debug)]
struct Pending {
    peer: Rank,
    /// Byte range of the receive in the working buffer.
    range: Range<usize>,
    reduce: bool,
    got: Received,
}

impl Pending {
    fn left(&self) -> usize {
        self.range.len() - self.got.total()
    }
}

#[derive(Debug, Default)]
struct LaneState {
    step: usize,
    recvs: Vec<Pending>,
}

/// Whether a send's bytes may be read from the working buffer on their way
/// ([`SendChunk::settled`], [`SendChunk::answered`]).
#[derive(Debug, Clone, Copy)]
struct Lend {
    settled: bool,
    answered: bool,
}

/// A chunk that arrived before its lane reached its step.
#[derive(Debug)]
struct Stashed<P> {
    peer: Rank,
    offset: u64,
    len: usize,
    payload: P,
}

/// One rank's execution of one plan.
#[derive(Debug)]
pub struct Executor<'p, P> {
    cfg: ExecConfig,
    plan: &'p Plan,
    lanes: Vec<LaneState>,
    /// Lanes `0..next_lane` have started.
    next_lane: usize,
    done_lanes: usize,
    started: bool,
    todo: Vec<(usize, usize)>,
    early: BTreeMap<(usize, usize), Vec<Stashed<P>>>,
    departed: BTreeSet<Rank>,
    out: VecDeque<Output<P>>,
    deadline: Duration,
    failed: Option<ExecError>,
    finished: bool,
}

impl<'p, P> Executor<'p, P> {
    pub fn new(plan: &'p Plan, cfg: ExecConfig) -> Self {
        Executor {
            cfg: ExecConfig {
                window: cfg.window.max(1),
                frame_bytes: cfg.frame_bytes.max(1),
                ..cfg
            },
            plan,
            lanes: plan.lanes.iter().map(|_| LaneState::default()).collect(),
            next_lane: 0,
            done_lanes: 0,
            started: false,
            todo: Vec::new(),
            early: BTreeMap::new(),
            departed: BTreeSet::new(),
            out: VecDeque::new(),
            deadline: cfg.idle_timeout,
            failed: None,
            finished: false,
        }
    }

    /// Bytes this rank receives in the whole operation.
    pub fn total_recv_bytes(&self) -> usize {
        self.plan
            .lanes
            .iter()
            .flat_map(|l| l.steps.iter().flatten())
            .map(|a| match a {
                Action::Recv { span, .. } => span.len * self.cfg.elem_bytes,
                Action::Send { .. } => 0,
            })
            .sum()
    }

    /// Starts the first `window` lanes. Chunks that arrived before are applied now.
    pub fn start(&mut self, now: Duration) -> Result<(), ExecError> {
        self.input(now)?;
        if self.started {
            return Ok(());
        }
        self.started = true;
        self.next_lane = self.lanes.len().min(self.cfg.window);
        self.todo = (0..self.next_lane).rev().map(|l| (l, 0)).collect();
        let res = self.pump().and_then(|()| self.check_departed());
        self.settle(res)
    }

    /// A chunk of `len` bytes from `peer`, of the call `call` (refused unless it
    /// is this rank's: a chunk of another call never touches the buffer). Chunks for steps not reached yet are
    /// kept and applied when the lane gets there (before or after [`start`](Self::start)).
    pub fn chunk_arrived(
        &mut self,
        peer: Rank,
        call: Option<Call>,
        id: ChunkId,
        len: usize,
        payload: P,
        now: Duration,
    ) -> Result<(), ExecError> {
        self.input(now)?;
        let res = if call == Some(self.cfg.call) {
            self.on_chunk(peer, id, len, payload)
        } else {
            Err(ExecError::CallMismatch {
                op: self.cfg.op,
                me: self.cfg.rank,
                mine: self.cfg.call,
                peer,
                theirs: call,
            })
        };
        self.settle(res)
    }

    /// Whether a chunk `id` arriving now would be kept for later (its step
    /// is not reached yet) rather than applied at once: a payload that
    /// borrows a transport's memory is copied out first
    /// ([`crate::pool::PooledBuf::detach`]).
    pub fn keeps_for_later(&self, id: ChunkId) -> bool {
        id.lane < self.lanes.len() && self.is_early(id.lane, id.step)
    }

    /// Lane `l` (in range) has not reached step `s`: its chunks wait.
    fn is_early(&self, l: usize, s: usize) -> bool {
        !self.started || l >= self.next_lane || s > self.lanes[l].step
    }

    /// Whether the chunk `id` from `peer` has arrived already (applied, or
    /// kept for a step not reached yet). The second copy of a frame sent
    /// twice ([`crate::wire::FrameKind::DataCopy`]) is dropped when it has,
    /// before it is decoded; nothing changes either way. A step's chunks from
    /// one peer never overlap, so the chunk starting at `id.offset` has
    /// arrived when that byte has. False for an empty chunk, and for one the
    /// plan does not have: its first copy gets the error.
    pub fn holds(&self, peer: Rank, id: ChunkId) -> bool {
        let (l, s) = (id.lane, id.step);
        if l >= self.lanes.len() || s >= self.plan.lanes[l].steps.len() {
            return false;
        }
        let kept = self.early.get(&(l, s)).is_some_and(|v| {
            v.iter()
                .any(|c| c.peer == peer && c.offset == id.offset && c.len > 0)
        });
        if kept {
            return true;
        }
        if !self.started || l >= self.next_lane {
            return false;
        }
        let lane = &self.lanes[l];
        if s != lane.step {
            // A step behind the lane's is complete: all of it arrived.
            return s < lane.step;
        }
        let Some(rel) = usize::try_from(id.offset).ok() else {
            return false;
        };
        lane.recvs
            .iter()
            .find(|p| p.peer == peer)
            .is_some_and(|p| p.got.covers(rel..rel.saturating_add(1)))
    }

    /// `peer` closed every connection in order: fine only if everything still
    /// needed from it has already arrived (and waits in the stash).
    pub fn peer_left(&mut self, peer: Rank, now: Duration) -> Result<(), ExecError> {
        self.input(now)?;
        self.departed.insert(peer);
        let res = self.check_departed();
        self.settle(res)
    }

    /// Something arrived that is not for this operation: the peers are alive.
    pub fn note_activity(&mut self, now: Duration) -> Result<(), ExecError> {
        self.input(now)
    }

    /// When [`handle_timeout`](Self::handle_timeout) should be called, while running.
    pub fn poll_timeout(&self) -> Option<Duration> {
        (self.failed.is_none() && !self.finished).then_some(self.deadline)
    }

    /// Fails with [`ExecError::Timeout`] if nothing arrived for the idle timeout.
    pub fn handle_timeout(&mut self, now: Duration) -> Result<(), ExecError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.finished || now < self.deadline {
            return Ok(());
        }
        let e = ExecError::Timeout {
            peers: self.waiting_for(),
            after: self.cfg.idle_timeout,
        };
        self.settle(Err(e))
    }

    /// The next thing the driver must do.
    pub fn poll(&mut self) -> Option<Output<P>> {
        self.out.pop_front()
    }

    pub fn is_done(&self) -> bool {
        self.finished
    }

    /// Every peer a started lane waits for bytes from, ascending (none once done).
    pub fn waiting_for(&self) -> Vec<Rank> {
        if self.finished {
            return Vec::new();
        }
        let mut peers: Vec<Rank> = self
            .lanes
            .iter()
            .flat_map(|l| l.recvs.iter().filter(|p| p.left() > 0).map(|p| p.peer))
            .collect();
        peers.sort_unstable();
        peers.dedup();
        peers
    }

    /// The first lane still waiting, its step and a peer it waits for (deadlock reports).
    pub fn waiting_on(&self) -> Option<(usize, usize, Rank)> {
        if self.finished {
            return None;
        }
        self.lanes.iter().enumerate().find_map(|(l, st)| {
            let p = st.recvs.iter().find(|p| p.left() > 0)?;
            Some((l, st.step, p.peer))
        })
    }

    /// A kept chunk that no step has taken yet: (from, lane, step).
    pub fn first_stashed(&self) -> Option<(Rank, usize, usize)> {
        let (&(l, s), v) = self.early.iter().find(|(_, v)| !v.is_empty())?;
        v.first().map(|c| (c.peer, l, s))
    }

    fn input(&mut self, now: Duration) -> Result<(), ExecError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.deadline = now.saturating_add(self.cfg.idle_timeout);
        Ok(())
    }

    /// Records the first error: the executor refuses every later input with it.
    fn settle(&mut self, res: Result<(), ExecError>) -> Result<(), ExecError> {
        if let Err(e) = &res {
            self.failed = Some(e.clone());
        }
        res
    }

    fn on_chunk(
        &mut self,
        peer: Rank,
        id: ChunkId,
        len: usize,
        payload: P,
    ) -> Result<(), ExecError> {
        let (l, s) = (id.lane, id.step);
        if l >= self.lanes.len() || s >= self.plan.lanes[l].steps.len() {
            return Err(ExecError::UnknownChunk {
                peer,
                op: self.cfg.op,
                lane: l,
                step: s,
            });
        }
        let lane = &self.lanes[l];
        if self.is_early(l, s) {
            let c = Stashed {
                peer,
                offset: id.offset,
                len,
                payload,
            };
            self.early.entry((l, s)).or_default().push(c);
            return Ok(());
        }
        if s < lane.step || lane.recvs.iter().all(|p| p.left() == 0) {
            return Err(ExecError::StepComplete {
                peer,
                lane: l,
                step: s,
            });
        }
        self.apply(l, peer, id.offset, len, payload)?;
        self.pump()
    }

    /// Advances lanes whose step is complete: emits sends, arms receives, applies kept chunks.
    fn pump(&mut self) -> Result<(), ExecError> {
        let esize = self.cfg.elem_bytes;
        while let Some((l, s)) = self.todo.pop() {
            let steps = &self.plan.lanes[l].steps;
            if s == steps.len() {
                self.done_lanes += 1;
                if self.next_lane < self.lanes.len() {
                    self.todo.push((self.next_lane, 0));
                    self.next_lane += 1;
                }
                continue;
            }
            let mut recvs = Vec::new();
            for a in &steps[s] {
                match *a {
                    Action::Send { peer, span } => {
                        let range = span.start * esize..span.end() * esize;
                        let lane = &self.plan.lanes[l];
                        let lend = Lend {
                            settled: lane.settled(s, span),
                            answered: lane.answered_by(s, span, peer),
                        };
                        self.emit_sends(peer, l, s, range, lend);
                    }
                    Action::Recv { peer, span, reduce } => recvs.push(Pending {
                        peer,
                        range: span.start * esize..span.end() * esize,
                        reduce,
                        got: Received::default(),
                    }),
                }
            }
            let empty = recvs.is_empty();
            self.lanes[l] = LaneState { step: s, recvs };
            let kept = self.early.remove(&(l, s)).unwrap_or_default();
            if empty {
                if let Some(c) = kept.first() {
                    return Err(ExecError::NotExpected {
                        peer: c.peer,
                        lane: l,
                        step: s,
                    });
                }
                self.todo.push((l, s + 1));
                continue;
            }
            for c in kept {
                self.apply(l, c.peer, c.offset, c.len, c.payload)?;
            }
        }
        if self.started && self.done_lanes == self.lanes.len() && !self.finished {
            self.finished = true;
            self.out.push_back(Output::Done);
        }
        Ok(())
    }

    /// One transfer, cut into chunks of at most `frame_bytes`.
    fn emit_sends(
        &mut self,
        peer: Rank,
        lane: usize,
        step: usize,
        range: Range<usize>,
        lend: Lend,
    ) {
        let transfer_len = range.len();
        let frame = self.cfg.frame_bytes;
        let mut at = range.start;
        while at < range.end {
            let end = range.end.min(at.saturating_add(frame));
            self.out.push_back(Output::Send(SendChunk {
                peer,
                call: self.cfg.call,
                lane,
                step,
                offset: (at - range.start) as u64,
                range: at..end,
                transfer_len,
                settled: lend.settled,
                answered: lend.answered,
                tail: self.cfg.mark_tail && self.next_lane + self.cfg.window >= self.lanes.len(),
            }));
            at = end;
        }
    }

    /// Checks one chunk against the pending receive of lane `l` from `peer` and emits its apply.
    fn apply(
        &mut self,
        l: usize,
        peer: Rank,
        offset: u64,
        len: usize,
        payload: P,
    ) -> Result<(), ExecError> {
        let esize = self.cfg.elem_bytes;
        let step = self.lanes[l].step;
        let Some(p) = self.lanes[l].recvs.iter_mut().find(|p| p.peer == peer) else {
            return Err(ExecError::NotExpected {
                peer,
                lane: l,
                step,
            });
        };
        let expected = p.range.len();
        let rel = usize::try_from(offset).ok();
        let fits = rel
            .and_then(|r| r.checked_add(len))
            .is_some_and(|end| end <= expected);
        let rel = match rel {
            Some(r) if fits && r.is_multiple_of(esize) && len.is_multiple_of(esize) => r,
            _ => {
                return Err(ExecError::OutOfRange {
                    peer,
                    lane: l,
                    step,
                    offset,
                    len,
                    expected,
                })
            }
        };
        if !p.got.insert(rel..rel + len) {
            return Err(ExecError::Duplicate {
                peer,
                lane: l,
                step,
                offset,
                len,
            });
        }
        let range = p.range.start + rel..p.range.start + rel + len;
        let reduce = p.reduce;
        self.out.push_back(Output::Apply(ApplyChunk {
            peer,
            id: ChunkId {
                lane: l,
                step,
                offset,
            },
            range,
            reduce,
            payload,
        }));
        if self.lanes[l].recvs.iter().all(|p| p.left() == 0) {
            self.todo.push((l, step + 1));
        }
        Ok(())
    }
}
