//! Drives the pure [`Executor`] for one operation over the real connections:
//! turns connection events into executor inputs, performs its outputs (copies a
//! send's bytes into a pooled frame, reduces or copies a received chunk into the
//! working buffer) and feeds it the clock. Frames of the wire protocol that are
//! not chunks of this operation (aborts, later operations) are handled here, and
//! what goes wrong with peers (silent links, stalls, closed connections, Aborts)
//! is weighed by a [`Judge`] before the operation fails naming one rank.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use super::wan::{seed, WanCodec};
use super::{progress_add, Engine, Job, Progress};
use crate::blame::{Decision, How, Judge, JudgeConfig, Link, Verdict};
use crate::config::Options;
use crate::dtype::{reduce_into, DType, ReduceOp};
use crate::error::{CollectiveError, Rank, Result};
use crate::exec::trace::Message;
use crate::exec::{ApplyChunk, ChunkId, ExecConfig, ExecError, Executor, Output, SendChunk};
use crate::links::Event;
use crate::pool::{Payload, PooledBuf};
use crate::schedule::confirm::scratch_elems;
use crate::schedule::Plan;
use crate::topology::LinkClass;
use crate::trace::{Chunk, SpanKind};
use crate::wire::CallKind;
use crate::wire::{decode_abort, Abort, Call, Frame, FrameHeader, FrameKind};

/// How the engine configures the executor for operation `op` (`rank`'s `call`)
/// on elements of `elem_bytes`.
pub(crate) fn exec_config(
    opts: &Options,
    op: u64,
    rank: Rank,
    call: Call,
    elem_bytes: usize,
) -> ExecConfig {
    ExecConfig {
        op,
        rank,
        call,
        elem_bytes,
        window: opts.window,
        frame_bytes: (opts.chunk_bytes / 8).max(1) * 8,
        idle_timeout: opts.timeout,
        mark_tail: true,
    }
}

/// Chunks shorter than this are copied even from a lent buffer: the copy
/// costs less than holding the caller's call until they are written.
const LEND_MIN: usize = 32 << 10;

struct Driver<'a, 'p> {
    e: &'a mut Engine,
    ex: Executor<'p, PooledBuf>,
    seq: u64,
    /// This rank's call (a reported mismatch blames the rank that differs from it).
    call: Call,
    buf: &'a mut [u8],
    /// Hands out settled ranges of `buf` to send without a copy, when `buf`
    /// is the caller's lent memory ([`super::lent`]).
    lender: Option<super::lent::Lender>,
    /// Bytes the plan uses past the working buffer (a confirmation lane).
    scratch: Vec<u8>,
    dtype: DType,
    op: ReduceOp,
    progress: &'a Progress,
    epoch: Instant,
    /// What was sent and applied, in order, when the job asked for it.
    trace: Option<Vec<Message>>,
    /// Whom to blame if the operation stops ([`crate::blame`]).
    judge: Judge,
    /// Why each peer's first connection ended, and what each Abort said.
    closed_why: BTreeMap<Rank, String>,
    reasons: BTreeMap<Rank, String>,
    /// What crosses domains is encoded with this ([`crate::calls`]).
    wan: Option<WanCodec>,
    /// When traced: when each chunk not yet applied arrived, and its wire bytes.
    arrived: HashMap<(Rank, ChunkId), (Instant, usize)>,
}

pub(super) fn execute(
    e: &mut Engine,
    seq: u64,
    call: Call,
    plan: &Plan,
    job: &mut Job,
    esize: usize,
) -> Result<()> {
    let cfg = ExecConfig {
        // A plan given as it is: the start-up probe's measurement
        // (ExecConfig::mark_tail).
        mark_tail: !matches!(job.kind, super::JobKind::Plan(_)),
        ..exec_config(&e.opts, seq, e.me, call, esize)
    };
    let max_raw = cfg.frame_bytes;
    let ex = Executor::new(plan, cfg);
    let len = job.buf.bytes().len();
    let scratch = vec![0u8; scratch_elems(plan, len / esize.max(1)) * esize];
    job.progress
        .total
        .store(ex.total_recv_bytes() as u64, Ordering::Relaxed);
    job.progress.done.store(0, Ordering::Relaxed);
    let Job {
        buf,
        dtype,
        op,
        progress,
        record,
        ..
    } = job;
    let judge = Judge::new(JudgeConfig::new(e.me, e.opts.timeout));
    let wan = WanCodec::new(job.codec, max_raw)?;
    // `finish` divides an average in place after the plan's last step, when
    // sends from the buffer may still be on their way: those ops copy.
    let lender = if *op == ReduceOp::Avg {
        None
    } else {
        buf.lender()
    };
    let mut d = Driver {
        e,
        ex,
        seq,
        call,
        lender,
        buf: buf.bytes(),
        scratch,
        dtype: *dtype,
        op: *op,
        progress,
        epoch: Instant::now(),
        trace: record.as_ref().map(|_| Vec::new()),
        judge,
        closed_why: BTreeMap::new(),
        reasons: BTreeMap::new(),
        wan,
        arrived: HashMap::new(),
    };
    let started = Instant::now();
    let res = d.run();
    if let Some(t) = &d.e.tracer {
        let kind = SpanKind::Op {
            name: op_name(call.kind),
            seq,
            bytes: len as u64,
            ok: res.is_ok(),
        };
        t.record(kind, started, Instant::now());
    }
    if let (Some(t), Some(r)) = (d.trace.take(), record.as_ref()) {
        if let Ok(mut r) = r.lock() {
            r.extend(t);
        }
    }
    res
}

impl Driver<'_, '_> {
    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn run(&mut self) -> Result<()> {
        // What happened while no operation ran (a peer died, early frames) comes
        // first: a dead peer must be named before our sends find its socket gone.
        while let Ok(ev) = self.e.events.try_recv() {
            self.on_event(ev)?;
        }
        // Frames for this operation that arrived while earlier ones ran.
        let seq = self.seq;
        let (mine, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.e.future)
            .into_iter()
            .partition(|(_, f, _)| f.header.op == seq);
        self.e.future = later;
        for (peer, f, at) in mine {
            self.on_frame(peer, f, at)?;
        }
        // Peers that left during earlier operations.
        let gone: Vec<Rank> = (0..self.e.peers.len())
            .filter(|&q| self.e.peers[q].as_ref().is_some_and(|l| l.open == 0))
            .collect();
        for q in gone {
            let now = self.now();
            self.ex.peer_left(q, now)?;
        }
        if !self.judge.is_failing() {
            let now = self.now();
            self.ex.start(now)?;
            self.flush()?;
        }
        loop {
            let now = self.now();
            let links = self.links();
            self.judge.check_links(&links, now);
            if let Some(d) = self.judge.decision(&links, now) {
                return Err(self.blame(d));
            }
            let failing = self.judge.is_failing();
            if !failing && self.ex.is_done() {
                return Ok(());
            }
            let exec_due = if failing {
                None
            } else {
                self.ex.poll_timeout()
            };
            let wake = [exec_due, self.judge.poll_timeout(&links, now)]
                .into_iter()
                .flatten()
                .min();
            let left = wake.map_or(self.e.opts.timeout, |t| t.saturating_sub(now));
            match self.e.events.recv_timeout(left) {
                Ok(ev) => self.on_event(ev)?,
                Err(RecvTimeoutError::Timeout) if !failing => {
                    let now = self.now();
                    match self.ex.handle_timeout(now) {
                        Ok(()) => {}
                        Err(ExecError::Timeout { peers, after }) => {
                            self.judge.stalled(&peers, after, now);
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                // Every connection has ended: a verdict still held is final.
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(match self.judge.final_decision() {
                        Some(d) => self.blame(d),
                        None => CollectiveError::Closed,
                    })
                }
            }
        }
    }

    /// The peers the operation waits on, and when each was last heard from.
    fn links(&self) -> Vec<Link> {
        self.ex
            .waiting_for()
            .into_iter()
            .filter_map(|peer| {
                let link = self.e.peers.get(peer)?.as_ref()?;
                let heard = link.last_heard().saturating_duration_since(self.epoch);
                Some(Link { peer, heard })
            })
            .collect()
    }

    /// The error for the decided verdict (kept for this rank's own Abort).
    fn blame(&mut self, d: Decision) -> CollectiveError {
        let v = d.verdict;
        self.e.verdict = Some(v);
        let peer = v.culprit;
        match (d.from, v.how) {
            (reported_by, How::Silent(_)) => CollectiveError::Unresponsive {
                peer,
                how: v.how,
                observer: v.observer,
                reported_by,
            },
            (None, How::NoProgress(after)) => {
                let stalled = self.judge.stalled_on();
                CollectiveError::PeerTimeout {
                    peers: if stalled.is_empty() {
                        vec![peer]
                    } else {
                        stalled.to_vec()
                    },
                    after,
                }
            }
            (None, _) => CollectiveError::PeerFailed {
                peer,
                detail: self
                    .closed_why
                    .get(&peer)
                    .cloned()
                    .unwrap_or_else(|| v.how.to_string()),
            },
            (Some(by), _) => {
                let reason = self.reasons.get(&by).cloned().unwrap_or_default();
                CollectiveError::PeerFailed {
                    peer,
                    detail: if by == peer {
                        reason
                    } else {
                        format!("reported by rank {by}: {reason}")
                    },
                }
            }
        }
    }

    /// A connection of `peer` ended without a goodbye (or cannot be written).
    fn lost(&mut self, peer: Rank, detail: String) {
        self.closed_why.entry(peer).or_insert(detail);
        let now = self.now();
        self.judge.closed(peer, now);
    }

    fn on_event(&mut self, ev: Event) -> Result<()> {
        match ev {
            Event::Frame { peer, frame, at } => self.on_frame(peer, frame, at),
            Event::Closed {
                peer,
                graceful,
                detail,
            } => {
                self.e.note_closed(peer);
                if !graceful {
                    self.lost(peer, detail);
                    return Ok(());
                }
                let now = self.now();
                let failing = self.judge.is_failing();
                let link = self.e.peers.get_mut(peer).and_then(Option::as_mut);
                match link {
                    Some(link) if link.open > 0 => {
                        link.open -= 1;
                        if failing {
                            return Ok(());
                        }
                        if link.open == 0 {
                            self.ex.peer_left(peer, now)?;
                            return self.flush();
                        }
                        Ok(self.ex.note_activity(now)?)
                    }
                    _ if failing => Ok(()),
                    _ => Ok(self.ex.note_activity(now)?),
                }
            }
        }
    }

    fn on_frame(&mut self, peer: Rank, f: Frame, at: Instant) -> Result<()> {
        let h = f.header;
        if h.kind == FrameKind::Abort {
            let a = decode_abort(&f.payload)
                .map_err(|source| CollectiveError::Frame { peer, source })?;
            if let Some(e) = call_mismatch(peer, &a, self.e.world, self.call) {
                return Err(e);
            }
            let world = self.e.world;
            let verdict = match a.verdict {
                Some(v) if v.culprit < world && v.observer < world => v,
                _ => Verdict {
                    culprit: if (a.failed as usize) < world {
                        a.failed as usize
                    } else {
                        peer
                    },
                    observer: peer,
                    how: How::Failed,
                },
            };
            self.reasons.entry(peer).or_insert(a.reason);
            let now = self.now();
            self.judge.report(peer, verdict, now);
            return Ok(());
        }
        let mismatch = |detail: String| CollectiveError::Mismatch { peer, detail };
        // One of two copies of a small transfer's frame: the first to
        // arrive counts, the other is dropped (before its operation, or as
        // a duplicate within it).
        let copy = h.kind == FrameKind::DataCopy;
        if h.kind != FrameKind::Data && !copy {
            return Err(mismatch(format!("unexpected {:?} frame", h.kind)));
        }
        if self.judge.is_failing() {
            return Ok(());
        }
        let now = self.now();
        if h.op > self.seq {
            let f = Frame {
                header: f.header,
                payload: f.payload.detach(&self.e.pool),
            };
            self.e.future.push((peer, f, at));
            return Ok(self.ex.note_activity(now)?);
        }
        if h.op < self.seq {
            if copy {
                self.copy_dropped();
                return Ok(());
            }
            return Err(mismatch(format!(
                "frame for op {} lane {} step {} does not exist (running op {})",
                h.op, h.lane, h.step, self.seq
            )));
        }
        let id = ChunkId {
            lane: h.lane as usize,
            step: h.step as usize,
            offset: h.offset,
        };
        if copy && self.ex.holds(peer, id) {
            self.copy_dropped();
            return Ok(());
        }
        if let Some(m) = &self.e.metrics {
            m.received(self.e.topo.class(self.e.me, peer), f.payload.len());
        }
        let wire_len = f.payload.len();
        let payload = if h.call == Some(self.call) && self.crosses(peer) {
            let started = self.e.tracer.as_ref().map(|_| Instant::now());
            let p = self.decode(peer, &f.payload)?;
            self.span(SpanKind::Decode, started, peer, id, wire_len);
            p
        } else {
            f.payload
        };
        let payload = if self.ex.keeps_for_later(id) {
            payload.detach(&self.e.pool)
        } else {
            payload
        };
        let len = payload.len();
        if self.e.tracer.is_some() {
            self.arrived.insert((peer, id), (at, wire_len));
        }
        self.ex.chunk_arrived(peer, h.call, id, len, payload, now)?;
        self.flush()
    }

    /// Performs the executor's outputs, in order.
    fn flush(&mut self) -> Result<()> {
        while let Some(out) = self.ex.poll() {
            if self.judge.is_failing() {
                return Ok(());
            }
            match out {
                Output::Send(s) => self.send(&s)?,
                Output::Apply(a) => self.apply(a)?,
                Output::Done => {}
            }
        }
        Ok(())
    }

    fn send(&mut self, s: &SendChunk) -> Result<()> {
        let peer = s.peer;
        let p = if self.crosses(peer) {
            let started = self.e.tracer.as_ref().map(|_| Instant::now());
            let p = self.encode(s)?;
            let id = ChunkId {
                lane: s.lane,
                step: s.step,
                offset: s.offset,
            };
            self.span(SpanKind::Encode, started, peer, id, p.len());
            Payload::Pooled(p)
        } else if let Some(c) = self.lent_chunk(s) {
            Payload::Lent(c)
        } else {
            let bytes = region(self.buf, &mut self.scratch, s.range.clone());
            let mut p = self.e.pool.take(bytes.len());
            p.copy_from_slice(bytes);
            Payload::Pooled(p)
        };
        let link = self.e.peers.get_mut(peer).and_then(Option::as_mut).ok_or(
            CollectiveError::PeerFailed {
                peer,
                detail: "no connection".into(),
            },
        )?;
        let h = FrameHeader {
            kind: FrameKind::Data,
            op: self.seq,
            lane: s.lane as u32,
            step: s.step as u32,
            offset: s.offset,
            len: p.len() as u32,
            call: Some(s.call),
        };
        if let Some(t) = &mut self.trace {
            t.push(Message::sent(peer, &h));
        }
        if let Some(m) = &self.e.metrics {
            m.sent(self.e.topo.class(self.e.me, peer), p.len());
        }
        let small = s.transfer_len <= self.e.opts.latency_bytes;
        let twice = (1..=self.e.opts.wan_duplicate_bytes).contains(&s.transfer_len);
        let queued = self.e.tracer.as_ref().map(|_| Instant::now());
        if !link.send_data(h, p, small, twice, s.tail, queued) {
            self.lost(peer, "connection closed".into());
        }
        Ok(())
    }

    /// Chunk `s` of the caller's own buffer, to send as it is: when the
    /// buffer is lent, the chunk is large enough for a copy to matter, and
    /// either the plan writes nothing more into its range during this
    /// operation (over RDMA: if the range lies in registered memory) or it
    /// writes there only with the peer's answer (not over RDMA, whose
    /// writes outlive the chunk; [`Self::apply`] waits for the chunk first).
    fn lent_chunk(&self, s: &SendChunk) -> Option<super::lent::LentChunk> {
        if !(s.settled || s.answered) || s.range.len() < LEND_MIN || s.range.end > self.buf.len() {
            return None;
        }
        let link = self.e.peers.get(s.peer)?.as_ref()?;
        let lender = self.lender.as_ref()?;
        if link.registers_sends() && !(s.settled && lender.registered()) {
            return None;
        }
        lender.chunk(s.range.clone(), s.peer, link.closers())
    }

    /// Waits until no chunk lent out of `range` is still being sent
    /// ([`SendChunk::answered`]): only then may the engine write there.
    fn wait_unread(&self, range: &Range<usize>) -> Result<()> {
        let Some(lender) = &self.lender else {
            return Ok(());
        };
        lender
            .wait_unread(range, self.e.opts.timeout)
            .map_err(|peer| CollectiveError::PeerFailed {
                peer,
                detail: format!(
                    "a send to it from the caller's buffer was not written within {:?}",
                    self.e.opts.timeout
                ),
            })
    }

    /// Records a `kind` span of chunk `id` to or from `peer` (`bytes` long)
    /// from `started` until now, when tracing (`started` is `None` otherwise).
    fn span(
        &self,
        kind: fn(Chunk) -> SpanKind,
        started: Option<Instant>,
        peer: Rank,
        id: ChunkId,
        bytes: usize,
    ) {
        if let (Some(t), Some(at)) = (&self.e.tracer, started) {
            let c = Chunk {
                seq: self.seq,
                peer,
                lane: id.lane,
                step: id.step,
                offset: id.offset,
                bytes,
            };
            t.record(kind(c), at, Instant::now());
        }
    }

    fn copy_dropped(&self) {
        if let Some(m) = &self.e.metrics {
            m.copy_dropped();
        }
    }

    /// Whether payloads to and from `peer` are encoded (a codec, another domain).
    fn crosses(&self, peer: Rank) -> bool {
        self.wan.is_some() && self.e.topo.class(self.e.me, peer) == LinkClass::InterDomain
    }

    /// The encoded payload of send `s` ([`WanCodec::encode`]).
    fn encode(&mut self, s: &SendChunk) -> Result<PooledBuf> {
        // A lossy codec writes what the receiver will decode into the range.
        self.wait_unread(&s.range)?;
        let Some(w) = self.wan.as_mut() else {
            return Err(CollectiveError::InvalidArgument("no codec".into()));
        };
        let seed = seed(self.seq, s, self.e.me);
        let total = self.buf.len() / 4;
        let part = (s.range.end <= self.buf.len()).then_some(s.range.start / 4);
        let bytes = region(self.buf, &mut self.scratch, s.range.clone());
        let part = part.map(|at| (total, at));
        w.encode(
            bytes,
            part,
            self.dtype,
            seed,
            &mut self.e.feedback,
            &self.e.pool,
        )
        .map_err(|e| CollectiveError::InvalidArgument(format!("encoding for rank {}: {e}", s.peer)))
    }

    fn decode(&mut self, peer: Rank, payload: &[u8]) -> Result<PooledBuf> {
        let Some(w) = self.wan.as_ref() else {
            return Err(CollectiveError::InvalidArgument("no codec".into()));
        };
        w.decode(payload, self.dtype, &self.e.pool)
            .map_err(|source| CollectiveError::Codec { peer, source })
    }

    fn apply(&mut self, a: ApplyChunk<PooledBuf>) -> Result<()> {
        self.wait_unread(&a.range)?;
        let dst = region(self.buf, &mut self.scratch, a.range.clone());
        if a.reduce {
            reduce_into(self.dtype, self.op, dst, &a.payload);
        } else {
            dst.copy_from_slice(&a.payload);
        }
        progress_add(self.progress, a.payload.len() as u64);
        if let Some((at, bytes)) = self.arrived.remove(&(a.peer, a.id)) {
            self.span(SpanKind::Recv, Some(at), a.peer, a.id, bytes);
        }
        if let Some(t) = &mut self.trace {
            t.push(Message::applied(&a));
        }
        Ok(())
    }
}

/// The trace's name of an operation.
fn op_name(k: CallKind) -> &'static str {
    match k {
        CallKind::Allreduce => "allreduce",
        CallKind::Broadcast => "broadcast",
        CallKind::Allgather => "allgather",
        CallKind::ReduceScatter => "reduce_scatter",
        CallKind::Barrier => "barrier",
        CallKind::Plan => "plan",
    }
}

/// The bytes `r` of the plan's address space: the working buffer, then the scratch.
fn region<'b>(buf: &'b mut [u8], scratch: &'b mut [u8], r: Range<usize>) -> &'b mut [u8] {
    match r.start.checked_sub(buf.len()) {
        Some(at) => &mut scratch[at..at + r.len()],
        None => &mut buf[r],
    }
}

/// The typed error an Abort from `peer` carries when ranks made different
/// calls, blaming the rank whose call differs from `own` (this rank's): the
/// rank that noticed may be the odd one.
fn call_mismatch(peer: Rank, a: &Abort, world: usize, own: Call) -> Option<CollectiveError> {
    let r = a.report?;
    let (noticer, other) = (r.rank as usize, r.other as usize);
    if noticer >= world || other >= world {
        return None;
    }
    let noticer_is_odd = own == r.other_call && own != r.call;
    let ((me, mine), (odd, theirs)) = if noticer_is_odd {
        ((other, r.other_call), (noticer, r.call))
    } else {
        ((noticer, r.call), (other, r.other_call))
    };
    Some(CollectiveError::CallMismatch {
        op: r.op,
        me,
        mine,
        peer: odd,
        theirs,
        reported_by: Some(peer),
    })
}
