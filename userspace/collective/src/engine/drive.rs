//! Drives the pure [`Executor`] for one operation over the real connections:
//! turns connection events into executor inputs, performs its outputs (copies a
//! send's bytes into a pooled frame, reduces or copies a received chunk into the
//! working buffer) and feeds it the clock. Frames of the wire protocol that are
//! not chunks of this operation (aborts, later operations) are handled here.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use super::{progress_add, Engine, Job, Progress};
use crate::config::Options;
use crate::dtype::{reduce_into, DType, ReduceOp};
use crate::error::{CollectiveError, Rank, Result};
use crate::exec::trace::Message;
use crate::exec::{ApplyChunk, ChunkId, ExecConfig, Executor, Output, SendChunk};
use crate::links::Event;
use crate::pool::PooledBuf;
use crate::schedule::confirm::scratch_elems;
use crate::schedule::Plan;
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
    }
}

struct Driver<'a, 'p> {
    e: &'a mut Engine,
    ex: Executor<'p, PooledBuf>,
    seq: u64,
    buf: &'a mut [u8],
    /// Bytes the plan uses past the working buffer (a confirmation lane).
    scratch: Vec<u8>,
    dtype: DType,
    op: ReduceOp,
    progress: &'a Progress,
    epoch: Instant,
    /// What was sent and applied, in order, when the job asked for it.
    trace: Option<Vec<Message>>,
}

pub(super) fn execute(
    e: &mut Engine,
    seq: u64,
    call: Call,
    plan: &Plan,
    job: &mut Job,
    esize: usize,
) -> Result<()> {
    let ex = Executor::new(plan, exec_config(&e.opts, seq, e.me, call, esize));
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
    let mut d = Driver {
        e,
        ex,
        seq,
        buf: buf.bytes(),
        scratch,
        dtype: *dtype,
        op: *op,
        progress,
        epoch: Instant::now(),
        trace: record.as_ref().map(|_| Vec::new()),
    };
    let res = d.run();
    if let (Some(t), Some(r)) = (d.trace.take(), record.as_ref()) {
        if let Ok(mut r) = r.lock() {
            r.extend(t);
        }
    }
    res.map_err(|err| refine(d.e, err))
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
            .partition(|(_, f)| f.header.op == seq);
        self.e.future = later;
        for (peer, f) in mine {
            self.on_frame(peer, f)?;
        }
        // Peers that left during earlier operations.
        let gone: Vec<Rank> = (0..self.e.peers.len())
            .filter(|&q| self.e.peers[q].as_ref().is_some_and(|l| l.open == 0))
            .collect();
        for q in gone {
            let now = self.now();
            self.ex.peer_left(q, now)?;
        }
        let now = self.now();
        self.ex.start(now)?;
        self.flush()?;
        while !self.ex.is_done() {
            let left = self
                .ex
                .poll_timeout()
                .map_or(self.e.opts.timeout, |t| t.saturating_sub(self.now()));
            match self.e.events.recv_timeout(left) {
                Ok(ev) => self.on_event(ev)?,
                Err(RecvTimeoutError::Timeout) => {
                    let now = self.now();
                    self.ex.handle_timeout(now)?;
                }
                Err(RecvTimeoutError::Disconnected) => return Err(CollectiveError::Closed),
            }
        }
        Ok(())
    }

    fn on_event(&mut self, ev: Event) -> Result<()> {
        match ev {
            Event::Frame { peer, frame } => self.on_frame(peer, frame),
            Event::Closed {
                peer,
                graceful,
                detail,
            } => {
                self.e.closed_seen += 1;
                if !graceful {
                    return Err(CollectiveError::PeerFailed { peer, detail });
                }
                let now = self.now();
                let link = self.e.peers.get_mut(peer).and_then(Option::as_mut);
                match link {
                    Some(link) if link.open > 0 => {
                        link.open -= 1;
                        if link.open == 0 {
                            self.ex.peer_left(peer, now)?;
                            return self.flush();
                        }
                        Ok(self.ex.note_activity(now)?)
                    }
                    _ => Ok(self.ex.note_activity(now)?),
                }
            }
        }
    }

    fn on_frame(&mut self, peer: Rank, f: Frame) -> Result<()> {
        let h = f.header;
        if h.kind == FrameKind::Abort {
            let a = decode_abort(&f.payload)
                .map_err(|source| CollectiveError::Frame { peer, source })?;
            if let Some(e) = call_mismatch(peer, &a, self.e.world) {
                return Err(e);
            }
            let failed = a.failed as usize;
            let detail = if failed == peer {
                a.reason
            } else {
                format!("reported by rank {peer}: {}", a.reason)
            };
            return Err(CollectiveError::PeerFailed {
                peer: failed.min(self.e.world.saturating_sub(1)),
                detail,
            });
        }
        let mismatch = |detail: String| CollectiveError::Mismatch { peer, detail };
        if h.kind != FrameKind::Data {
            return Err(mismatch(format!("unexpected {:?} frame", h.kind)));
        }
        let now = self.now();
        if h.op > self.seq {
            self.e.future.push((peer, f));
            return Ok(self.ex.note_activity(now)?);
        }
        if h.op < self.seq {
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
        let len = f.payload.len();
        self.ex
            .chunk_arrived(peer, h.call, id, len, f.payload, now)?;
        self.flush()
    }

    /// Performs the executor's outputs, in order.
    fn flush(&mut self) -> Result<()> {
        while let Some(out) = self.ex.poll() {
            match out {
                Output::Send(s) => self.send(&s)?,
                Output::Apply(a) => self.apply(a),
                Output::Done => {}
            }
        }
        Ok(())
    }

    fn send(&mut self, s: &SendChunk) -> Result<()> {
        let peer = s.peer;
        let link = self.e.peers.get_mut(peer).and_then(Option::as_mut).ok_or(
            CollectiveError::PeerFailed {
                peer,
                detail: "no connection".into(),
            },
        )?;
        let bytes = region(self.buf, &mut self.scratch, s.range.clone());
        let mut p = self.e.pool.take(bytes.len());
        p.copy_from_slice(bytes);
        let h = FrameHeader {
            kind: FrameKind::Data,
            op: self.seq,
            lane: s.lane as u32,
            step: s.step as u32,
            offset: s.offset,
            len: bytes.len() as u32,
            call: Some(s.call),
        };
        if let Some(t) = &mut self.trace {
            t.push(Message::sent(peer, &h));
        }
        let small = s.transfer_len <= self.e.opts.latency_bytes;
        if !link.send_data(h, p, small) {
            return Err(CollectiveError::PeerFailed {
                peer,
                detail: "connection closed".into(),
            });
        }
        Ok(())
    }

    fn apply(&mut self, a: ApplyChunk<PooledBuf>) {
        let dst = region(self.buf, &mut self.scratch, a.range.clone());
        if a.reduce {
            reduce_into(self.dtype, self.op, dst, &a.payload);
        } else {
            dst.copy_from_slice(&a.payload);
        }
        progress_add(self.progress, a.payload.len() as u64);
        if let Some(t) = &mut self.trace {
            t.push(Message::applied(&a));
        }
    }
}

/// The bytes `r` of the plan's address space: the working buffer, then the scratch.
fn region<'b>(buf: &'b mut [u8], scratch: &'b mut [u8], r: Range<usize>) -> &'b mut [u8] {
    match r.start.checked_sub(buf.len()) {
        Some(at) => &mut scratch[at..at + r.len()],
        None => &mut buf[r],
    }
}

/// The typed error an Abort from `peer` carries when ranks made different calls.
fn call_mismatch(peer: Rank, a: &Abort, world: usize) -> Option<CollectiveError> {
    let r = a.report?;
    let (me, other) = (r.rank as usize, r.other as usize);
    (me < world && other < world).then_some(CollectiveError::CallMismatch {
        op: r.op,
        me,
        mine: r.call,
        peer: other,
        theirs: r.other_call,
        reported_by: Some(peer),
    })
}

/// A lost connection or a silent peer is often a symptom: the rank that saw the
/// root cause has sent an Abort naming it. Wait briefly for one before reporting.
fn refine(e: &mut Engine, err: CollectiveError) -> CollectiveError {
    if !matches!(
        err,
        CollectiveError::PeerFailed { .. } | CollectiveError::PeerTimeout { .. }
    ) {
        return err;
    }
    let deadline = Instant::now() + Duration::from_millis(100);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match e.events.recv_timeout(left) {
            Ok(Event::Frame { peer, frame }) if frame.header.kind == FrameKind::Abort => {
                if let Ok(a) = decode_abort(&frame.payload) {
                    if let Some(typed) = call_mismatch(peer, &a, e.world) {
                        return typed;
                    }
                    let failed = a.failed as usize;
                    if failed < e.world && failed != e.me {
                        let detail = format!("reported by rank {peer}: {}", a.reason);
                        return CollectiveError::PeerFailed {
                            peer: failed,
                            detail,
                        };
                    }
                }
            }
            Ok(Event::Frame { .. }) => {}
            Ok(Event::Closed { .. }) => e.closed_seen += 1,
            Err(_) => return err,
        }
    }
}
