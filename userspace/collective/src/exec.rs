//! Executes one plan: posts each lane's sends when the lane reaches a step,
//! applies received chunks (reduce or copy) as they arrive, and advances lanes,
//! `window` lanes in flight. Every check on incoming frames returns a typed error.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;

use super::{progress_add, Engine, Job, Progress};
use crate::dtype::reduce_into;
use crate::dtype::{DType, ReduceOp};
use crate::error::{CollectiveError, Rank, Result};
use crate::links::Event;
use crate::schedule::{Action, Plan};
use crate::wire::{decode_abort, Frame, FrameHeader, FrameKind};

/// What applying a chunk needs to know about the job.
struct Ctx<'a> {
    dtype: DType,
    op: ReduceOp,
    progress: &'a Progress,
}

struct Pending {
    peer: Rank,
    /// Byte range of the receive in the working buffer.
    start: usize,
    end: usize,
    reduce: bool,
    left: usize,
}

struct LaneState {
    step: usize,
    recvs: Vec<Pending>,
}

struct Run<'p> {
    seq: u64,
    plan: &'p Plan,
    esize: usize,
    lanes: Vec<LaneState>,
    next_lane: usize,
    done_lanes: usize,
    todo: Vec<(usize, usize)>,
    early: HashMap<(usize, usize), Vec<(Rank, Frame)>>,
}

pub(super) fn execute(
    e: &mut Engine,
    seq: u64,
    plan: &Plan,
    job: &mut Job,
    esize: usize,
) -> Result<()> {
    let total: usize = plan
        .lanes
        .iter()
        .flat_map(|l| l.steps.iter().flatten())
        .map(|a| {
            if let Action::Recv { span, .. } = a {
                span.len * esize
            } else {
                0
            }
        })
        .sum();
    job.progress.total.store(total as u64, Ordering::Relaxed);
    job.progress.done.store(0, Ordering::Relaxed);
    let n = plan.lanes.len();
    let mut run = Run {
        seq,
        plan,
        esize,
        lanes: (0..n)
            .map(|_| LaneState {
                step: 0,
                recvs: Vec::new(),
            })
            .collect(),
        next_lane: 0,
        done_lanes: 0,
        todo: Vec::new(),
        early: HashMap::new(),
    };
    let Job {
        buf: work,
        dtype,
        op,
        progress,
        ..
    } = job;
    let ctx = Ctx {
        dtype: *dtype,
        op: *op,
        progress,
    };
    let job = &ctx;
    let buf = work.bytes();
    match run_lanes(e, &mut run, buf, job) {
        Ok(()) => Ok(()),
        Err(err) => Err(refine(e, err)),
    }
}

fn run_lanes(e: &mut Engine, run: &mut Run<'_>, buf: &mut [u8], job: &Ctx<'_>) -> Result<()> {
    let (seq, n) = (run.seq, run.lanes.len());
    // What happened while no operation ran (a peer died, early frames) comes
    // first: a dead peer must be named before our sends find its socket gone.
    while let Ok(ev) = e.events.try_recv() {
        match ev {
            Event::Frame { peer, frame } => on_frame(e, run, peer, frame, buf, job)?,
            Event::Closed {
                peer,
                graceful,
                detail,
            } => on_closed(e, run, peer, graceful, detail)?,
        }
    }
    // Frames for this operation that arrived while earlier ones ran.
    let (mine, later): (Vec<_>, Vec<_>) = std::mem::take(&mut e.future)
        .into_iter()
        .partition(|(_, f)| f.header.op == seq);
    e.future = later;
    for (peer, f) in mine {
        on_frame(e, run, peer, f, buf, job)?;
    }
    run.next_lane = n.min(e.opts.window);
    run.todo = (0..run.next_lane).rev().map(|l| (l, 0)).collect();
    pump(e, run, buf, job)?;
    check_left(e, run)?;
    while run.done_lanes < n {
        match e.events.recv_timeout(e.opts.timeout) {
            Ok(Event::Frame { peer, frame }) => on_frame(e, run, peer, frame, buf, job)?,
            Ok(Event::Closed {
                peer,
                graceful,
                detail,
            }) => on_closed(e, run, peer, graceful, detail)?,
            Err(RecvTimeoutError::Timeout) => {
                let mut peers: Vec<Rank> = run
                    .lanes
                    .iter()
                    .flat_map(|l| l.recvs.iter().filter(|p| p.left > 0).map(|p| p.peer))
                    .collect();
                peers.sort_unstable();
                peers.dedup();
                return Err(CollectiveError::PeerTimeout {
                    peers,
                    after: e.opts.timeout,
                });
            }
            Err(RecvTimeoutError::Disconnected) => return Err(CollectiveError::Closed),
        }
    }
    Ok(())
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
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(100);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match e.events.recv_timeout(left) {
            Ok(Event::Frame { peer, frame }) if frame.header.kind == FrameKind::Abort => {
                if let Ok((failed, reason)) = decode_abort(&frame.payload) {
                    let failed = failed as usize;
                    if failed < e.world && failed != e.me {
                        let detail = format!("reported by rank {peer}: {reason}");
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

/// Advances lanes whose step is complete: posts sends, arms receives, applies early frames.
fn pump(e: &mut Engine, run: &mut Run<'_>, buf: &mut [u8], job: &Ctx<'_>) -> Result<()> {
    while let Some((l, s)) = run.todo.pop() {
        let steps = &run.plan.lanes[l].steps;
        if s == steps.len() {
            run.done_lanes += 1;
            if run.next_lane < run.lanes.len() {
                run.todo.push((run.next_lane, 0));
                run.next_lane += 1;
            }
            continue;
        }
        let mut recvs = Vec::new();
        for a in &steps[s] {
            match *a {
                Action::Send { peer, span } => {
                    let (start, end) = (span.start * run.esize, span.end() * run.esize);
                    send(e, run.seq, l, s, peer, &buf[start..end])?;
                }
                Action::Recv { peer, span, reduce } => {
                    let (start, end) = (span.start * run.esize, span.end() * run.esize);
                    recvs.push(Pending {
                        peer,
                        start,
                        end,
                        reduce,
                        left: end - start,
                    });
                }
            }
        }
        run.lanes[l] = LaneState { step: s, recvs };
        if run.lanes[l].recvs.is_empty() {
            run.todo.push((l, s + 1));
            continue;
        }
        for (peer, f) in run.early.remove(&(l, s)).unwrap_or_default() {
            apply(run, l, peer, &f, buf, job)?;
        }
    }
    Ok(())
}

fn send(
    e: &mut Engine,
    seq: u64,
    lane: usize,
    step: usize,
    peer: Rank,
    bytes: &[u8],
) -> Result<()> {
    let link =
        e.peers
            .get_mut(peer)
            .and_then(Option::as_mut)
            .ok_or(CollectiveError::PeerFailed {
                peer,
                detail: "no connection".into(),
            })?;
    let frame = (e.opts.chunk_bytes / 8).max(1) * 8;
    let small = bytes.len() <= e.opts.latency_bytes;
    for (i, piece) in bytes.chunks(frame).enumerate() {
        let mut p = e.pool.take(piece.len());
        p.copy_from_slice(piece);
        let h = FrameHeader {
            kind: FrameKind::Data,
            op: seq,
            lane: lane as u32,
            step: step as u32,
            offset: (i * frame) as u64,
            len: piece.len() as u32,
        };
        if !link.send_data(h, p, small) {
            return Err(CollectiveError::PeerFailed {
                peer,
                detail: "connection closed".into(),
            });
        }
    }
    Ok(())
}

fn on_frame(
    e: &mut Engine,
    run: &mut Run<'_>,
    peer: Rank,
    f: Frame,
    buf: &mut [u8],
    job: &Ctx<'_>,
) -> Result<()> {
    let h = f.header;
    if h.kind == FrameKind::Abort {
        let (failed, reason) =
            decode_abort(&f.payload).map_err(|source| CollectiveError::Frame { peer, source })?;
        let failed = failed as usize;
        let detail = if failed == peer {
            reason
        } else {
            format!("reported by rank {peer}: {reason}")
        };
        return Err(CollectiveError::PeerFailed {
            peer: failed.min(e.world.saturating_sub(1)),
            detail,
        });
    }
    let mismatch = |detail: String| CollectiveError::Mismatch { peer, detail };
    if h.kind != FrameKind::Data {
        return Err(mismatch(format!("unexpected {:?} frame", h.kind)));
    }
    if h.op > run.seq {
        e.future.push((peer, f));
        return Ok(());
    }
    let (l, s) = (h.lane as usize, h.step as usize);
    if h.op < run.seq || l >= run.lanes.len() || s >= run.plan.lanes[l].steps.len() {
        return Err(mismatch(format!(
            "frame for op {} lane {l} step {s} does not exist (running op {})",
            h.op, run.seq
        )));
    }
    let started = l < run.next_lane;
    let lane = &run.lanes[l];
    if !started || s > lane.step {
        run.early.entry((l, s)).or_default().push((peer, f));
        return Ok(());
    }
    if s < lane.step || lane.recvs.iter().all(|p| p.left == 0) {
        return Err(mismatch(format!("lane {l} step {s} is already complete")));
    }
    apply(run, l, peer, &f, buf, job)?;
    pump(e, run, buf, job)
}

/// Applies one chunk to the pending receive of lane `l` from `peer`.
fn apply(
    run: &mut Run<'_>,
    l: usize,
    peer: Rank,
    f: &Frame,
    buf: &mut [u8],
    job: &Ctx<'_>,
) -> Result<()> {
    let mismatch = |detail: String| CollectiveError::Mismatch { peer, detail };
    let h = f.header;
    let esize = run.esize;
    let Some(p) = run.lanes[l].recvs.iter_mut().find(|p| p.peer == peer) else {
        return Err(mismatch(format!(
            "lane {l} step {} expects nothing from this peer",
            h.step
        )));
    };
    // Offsets are relative to the transfer, so the two sides' spans may sit at different places.
    let (rel, len) = (h.offset, f.payload.len());
    let off = usize::try_from(rel)
        .ok()
        .and_then(|r| r.checked_add(p.start));
    let fits = off
        .and_then(|o| o.checked_add(len))
        .is_some_and(|end| end <= p.end)
        && len <= p.left;
    let off = match off {
        Some(o) if fits && (rel as usize).is_multiple_of(esize) && len.is_multiple_of(esize) => o,
        _ => {
            return Err(mismatch(format!(
                "chunk at +{rel} ({len} bytes) outside the expected {} bytes",
                p.end - p.start
            )))
        }
    };
    let dst = &mut buf[off..off + len];
    if p.reduce {
        reduce_into(job.dtype, job.op, dst, &f.payload);
    } else {
        dst.copy_from_slice(&f.payload);
    }
    p.left -= len;
    progress_add(job.progress, len as u64);
    if run.lanes[l].recvs.iter().all(|p| p.left == 0) {
        let s = run.lanes[l].step;
        run.todo.push((l, s + 1));
    }
    Ok(())
}

fn on_closed(
    e: &mut Engine,
    run: &Run<'_>,
    peer: Rank,
    graceful: bool,
    detail: String,
) -> Result<()> {
    e.closed_seen += 1;
    if !graceful {
        return Err(CollectiveError::PeerFailed { peer, detail });
    }
    if let Some(link) = e.peers.get_mut(peer).and_then(Option::as_mut) {
        link.open = link.open.saturating_sub(1);
    }
    check_left(e, run)
}

/// A peer that closed all its connections in order is only fine if everything we
/// still need from it has already arrived (and waits in a stash).
fn check_left(e: &Engine, run: &Run<'_>) -> Result<()> {
    for (peer, link) in e.peers.iter().enumerate() {
        if link.as_ref().is_none_or(|l| l.open != 0) {
            continue;
        }
        let mut needed = 0usize;
        for (l, st) in run.lanes.iter().enumerate() {
            let started = l < run.next_lane;
            if started {
                needed += st
                    .recvs
                    .iter()
                    .filter(|p| p.peer == peer)
                    .map(|p| p.left)
                    .sum::<usize>();
            }
            let from = if started { st.step + 1 } else { 0 };
            for a in run.plan.lanes[l].steps.iter().skip(from).flatten() {
                if let Action::Recv { peer: q, span, .. } = a {
                    needed += if *q == peer { span.len * run.esize } else { 0 };
                }
            }
        }
        let stashed: usize = run
            .early
            .values()
            .flatten()
            .filter(|(q, _)| *q == peer)
            .map(|(_, f)| f.payload.len())
            .sum();
        if needed > stashed {
            return Err(CollectiveError::PeerFailed {
                peer,
                detail: "left the communicator".into(),
            });
        }
    }
    Ok(())
}
