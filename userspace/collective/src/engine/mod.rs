//! The worker thread of a communicator: runs jobs one at a time, in submission
//! order; each job's plan is run by the pure [`crate::exec::Executor`], driven
//! over the connections by [`drive`].

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use crate::blame::{heartbeat_interval, How, Verdict};
use crate::calls::CallCodec;
use crate::codec::{CodecSpec, ErrorFeedback};
use crate::config::Options;
use crate::cost::{select, CostModel, Setting};
use crate::dtype::{finish, DType, ReduceOp};
use crate::error::{CollectiveError, Rank, Result};
use crate::exec::trace::Message;
use crate::links::{Event, PeerLink};
use crate::pool::BufferPool;
use crate::schedule::{build_all, Algorithm, OpKind, Plan, Span};
use crate::topology::Topology;
use crate::wire::{encode_abort, Abort, Call, CallKind, CallReport, Codec, Frame, FrameKind};

#[cfg(test)]
mod call_tests;
mod drive;
pub(crate) mod lent;
#[cfg(test)]
mod tests;
mod wan;

/// A working buffer the engine can view as bytes (a `Vec<T>` of some element type).
pub(crate) trait WorkBuf: Send {
    fn bytes(&mut self) -> &mut [u8];
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
    /// What hands out chunks of this buffer to send without a copy, if it
    /// lends them ([`lent::Lent`]: the caller's memory, which its call keeps
    /// until every chunk is written).
    fn lender(&self) -> Option<lent::Lender> {
        None
    }
}

impl<T: crate::dtype::Element> WorkBuf for Vec<T> {
    fn bytes(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(self.as_mut_slice())
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// Bytes received so far and in total for the running job.
#[derive(Debug, Default)]
pub struct Progress {
    pub done: AtomicU64,
    pub total: AtomicU64,
    /// Set once the result is available.
    pub finished: std::sync::atomic::AtomicBool,
}

pub(crate) enum JobKind {
    Op(OpKind),
    /// A fixed plan (start-up probes); the reply carries the time it took.
    Plan(Plan),
    SetCost(CostModel),
    /// Forget error-feedback residuals (one tensor's, or all).
    ResetFeedback(Option<crate::codec::TensorKey>),
}

pub(crate) struct Job {
    pub kind: JobKind,
    pub dtype: DType,
    pub op: ReduceOp,
    pub buf: Box<dyn WorkBuf>,
    pub progress: Arc<Progress>,
    pub reply: Sender<Result<Box<dyn WorkBuf>>>,
    /// Woken after the reply is sent (for handles polled as futures).
    pub waker: Arc<std::sync::Mutex<Option<std::task::Waker>>>,
    /// When set, every chunk sent and applied is recorded here (tests).
    pub record: Option<Arc<std::sync::Mutex<Vec<Message>>>>,
    /// The codec across domains and the error-feedback key.
    pub codec: CallCodec,
}

pub(crate) struct Engine {
    pub me: Rank,
    pub world: usize,
    pub topo: Topology,
    pub opts: Options,
    pub model: CostModel,
    pub peers: Vec<Option<PeerLink>>,
    pub events: Receiver<Event>,
    pub pool: BufferPool,
    next_op: u64,
    failure: Option<CollectiveError>,
    /// Frames that arrived for operations not started yet.
    future: Vec<(Rank, Frame, std::time::Instant)>,
    plans: HashMap<(OpKind, usize, usize, Option<Algorithm>), Arc<Plan>>,
    /// Residuals of lossy calls with a feedback key.
    pub feedback: ErrorFeedback,
    /// Connection-ended events seen so far, per peer.
    pub closed: Vec<usize>,
    /// How the failing operation decided whom to blame (for the Abort).
    pub verdict: Option<Verdict>,
    /// What `CAUSEWAY_METRICS_ADDR` serves ([`crate::metrics`]).
    pub metrics: Option<Arc<crate::metrics::RankMetrics>>,
    /// What `CAUSEWAY_TRACE` records ([`crate::trace`]).
    pub tracer: Option<Arc<crate::trace::Tracer>>,
}

impl Engine {
    pub fn new(
        me: Rank,
        topo: Topology,
        opts: Options,
        peers: Vec<Option<PeerLink>>,
        events: Receiver<Event>,
        pool: BufferPool,
    ) -> Self {
        for p in peers.iter().flatten() {
            p.keep_alive(heartbeat_interval(opts.timeout));
        }
        let world = topo.world();
        Engine {
            me,
            world: topo.world(),
            model: opts.cost,
            topo,
            opts,
            peers,
            events,
            pool,
            next_op: 0,
            failure: None,
            future: Vec::new(),
            plans: HashMap::new(),
            feedback: ErrorFeedback::new(),
            closed: vec![0; world],
            verdict: None,
            metrics: None,
            tracer: None,
        }
    }

    /// Runs jobs until the communicator is dropped, then says goodbye to every peer.
    pub fn run(mut self, jobs: Receiver<Job>) {
        while let Ok(mut job) = jobs.recv() {
            let started = std::time::Instant::now();
            let res = self.run_job(&mut job);
            if let (Some(m), JobKind::Op(k)) = (&self.metrics, &job.kind) {
                match &res {
                    Ok(()) => m.op_done(*k, job.buf.bytes().len() as u64, started.elapsed()),
                    Err(e) => m.op_failed(*k, e),
                }
            }
            let _ = job.reply.send(res.map(|()| job.buf));
            job.progress.finished.store(true, Ordering::Release);
            if let Some(w) = job.waker.lock().ok().and_then(|mut w| w.take()) {
                w.wake();
            }
        }
        if self.failure.is_none() {
            for p in self.peers.iter().flatten() {
                p.send_control(FrameKind::Goodbye, &[]);
                p.close_after_flush();
            }
            // An operation is complete here once everything was received; what we
            // still send to slower peers must reach them before the process may
            // exit: written, and acknowledged by their kernels. Leaving earlier
            // (after the writes alone) lost a paced tail on a 120 ms, 0.5 % loss
            // path: the peer's next heartbeat hit the closed socket, whose reset
            // dropped the unsent rest, and the peer failed with "connection reset".
            let deadline = std::time::Instant::now() + self.opts.timeout;
            while !self.peers.iter().flatten().all(PeerLink::settled)
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        self.linger(std::time::Duration::from_secs(2), None);
    }

    /// Waits (bounded) until every peer has closed its side too. Closing a socket
    /// with unread data makes the kernel send a reset, which can destroy the last
    /// frames (an Abort naming the failed rank) before the peer reads them.
    /// A `stopped` peer is not waited for: it closes nothing.
    fn linger(&mut self, limit: std::time::Duration, stopped: Option<Rank>) {
        let deadline = std::time::Instant::now() + limit;
        let open = |e: &Self| {
            e.peers.iter().enumerate().any(|(q, p)| {
                Some(q) != stopped && p.as_ref().is_some_and(|p| e.closed[q] < p.connections())
            })
        };
        while open(self) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Closed { peer, .. }) => self.note_closed(peer),
                Ok(Event::Frame { .. }) => {}
                Err(_) => break,
            }
        }
    }

    fn run_job(&mut self, job: &mut Job) -> Result<()> {
        let kind = match &job.kind {
            JobKind::SetCost(m) => {
                self.model = *m;
                self.plans.clear();
                return Ok(());
            }
            JobKind::ResetFeedback(key) => {
                match key {
                    Some(k) => {
                        self.feedback.reset(*k);
                    }
                    None => self.feedback.clear(),
                }
                return Ok(());
            }
            JobKind::Op(k) => Some(*k),
            JobKind::Plan(_) => None,
        };
        let force = codec_plan(&self.topo, kind, job.dtype, job.codec.spec)?;
        let esize = job.dtype.size();
        let bytes = job.buf.bytes();
        if !bytes.len().is_multiple_of(esize) {
            return Err(CollectiveError::InvalidArgument(
                "buffer is not a whole number of elements".into(),
            ));
        }
        let count = bytes.len() / esize;
        let seq = self.next_op;
        self.next_op += 1;
        if let Some(f) = &self.failure {
            return Err(f.clone());
        }
        let plan = match (&job.kind, kind) {
            (JobKind::Plan(p), _) => Arc::new(p.clone()),
            (_, Some(k)) => match self.plan(k, count, esize, force) {
                Ok(p) => p,
                Err(e) => {
                    self.fail(e.clone());
                    return Err(e);
                }
            },
            _ => return Ok(()),
        };
        let mut call = call_of(kind, job.dtype, job.op, count);
        call.codec = Codec::of(job.codec.spec);
        let res = drive::execute(self, seq, call, &plan, job, esize);
        if let Err(e) = &res {
            self.fail(e.clone());
        } else if let Some(k) = kind {
            let bytes = job.buf.bytes();
            let span = match k {
                OpKind::Allreduce => Span::new(0, count),
                OpKind::ReduceScatter => Span::new(0, count).piece(self.world, self.me),
                _ => Span::new(0, 0),
            };
            finish(
                job.dtype,
                job.op,
                &mut bytes[span.start * esize..span.end() * esize],
                self.world,
            );
        }
        res
    }

    /// The plan for `kind` on `count` elements: the algorithm is chosen once per
    /// (operation, size, element size) by [`select`], then cached.
    /// `force` overrides the configured algorithm (a lossy codec's shape).
    fn plan(
        &mut self,
        kind: OpKind,
        count: usize,
        esize: usize,
        force: Option<Algorithm>,
    ) -> Result<Arc<Plan>> {
        if let Some(p) = self.plans.get(&(kind, count, esize, force)) {
            return Ok(p.clone());
        }
        let s = Setting::new(&self.topo, &self.model, &self.opts, esize);
        let algo = force.unwrap_or_else(|| select(kind, count, esize, self.opts.algorithm, &s));
        let mut plans = build_all(kind, count, &self.topo, algo, s.chunk).ok_or_else(|| {
            CollectiveError::InvalidArgument(format!(
                "{algo:?} cannot run {kind:?} on this topology"
            ))
        })?;
        let plan = plans.swap_remove(self.me);
        tracing::debug!(?kind, count, ?algo, "planned");
        if self.plans.len() >= 64 {
            self.plans.clear();
        }
        let plan = Arc::new(plan);
        self.plans.insert((kind, count, esize, force), plan.clone());
        Ok(plan)
    }

    pub fn note_closed(&mut self, peer: Rank) {
        if let Some(c) = self.closed.get_mut(peer) {
            *c += 1;
        }
    }

    /// Gives up on the communicator: tells every peer who failed, closes everything.
    fn fail(&mut self, e: CollectiveError) {
        if self.failure.is_some() {
            return;
        }
        tracing::warn!(rank = self.me, error = %e, "communicator failed");
        let blamed = e.peer().unwrap_or(self.me);
        let verdict = self.verdict.take().unwrap_or(Verdict {
            culprit: blamed,
            observer: self.me,
            how: match &e {
                CollectiveError::PeerTimeout { after, .. } => How::NoProgress(*after),
                CollectiveError::Unresponsive { how, .. } => *how,
                _ => How::Failed,
            },
        });
        let report = match &e {
            CollectiveError::CallMismatch {
                op,
                me,
                mine,
                peer,
                theirs,
                ..
            } => Some(CallReport {
                op: *op,
                rank: *me as u32,
                call: *mine,
                other: *peer as u32,
                other_call: *theirs,
            }),
            _ => None,
        };
        let payload = encode_abort(&Abort {
            failed: verdict.culprit as u32,
            report,
            verdict: Some(verdict),
            reason: e.to_string(),
        });
        for p in self.peers.iter().flatten() {
            p.send_control(FrameKind::Abort, &payload);
            p.close_after_flush();
        }
        self.failure = Some(e);
        let stopped = matches!(verdict.how, How::Silent(_)).then_some(verdict.culprit);
        self.linger(
            self.opts.timeout.min(std::time::Duration::from_secs(1)),
            stopped,
        );
    }
}

/// Refuses a lossy codec where it would not leave every rank bit-identical
/// ([`crate::calls`]) and returns the algorithm it needs: a lossy allreduce
/// across domains runs the hierarchical exchange between two equal domains.
fn codec_plan(
    topo: &Topology,
    kind: Option<OpKind>,
    dtype: DType,
    spec: CodecSpec,
) -> Result<Option<Algorithm>> {
    if spec.is_lossless() {
        return match kind {
            None | Some(OpKind::Barrier) if spec != CodecSpec::None => Err(
                CollectiveError::InvalidArgument(format!("{spec} does not apply to a barrier")),
            ),
            _ => Ok(None),
        };
    }
    let refuse = |why: &str| Err(CollectiveError::InvalidArgument(format!("{spec}: {why}")));
    if dtype != DType::F32 {
        return refuse("lossy codecs take f32 buffers only");
    }
    let single = topo.domains().len() < 2;
    match kind {
        Some(OpKind::ReduceScatter) => Ok(None),
        Some(OpKind::Allreduce) if single => Ok(None),
        Some(OpKind::Allreduce) if topo.is_uniform_multi_domain() && topo.domains().len() == 2 => {
            Ok(Some(Algorithm::Hierarchical))
        }
        Some(OpKind::Allreduce) => {
            refuse("a lossy allreduce needs two domains of equal size (or one domain)")
        }
        _ => refuse("lossy codecs apply to allreduce and reduce-scatter only"),
    }
}

/// The signature the frames of this job carry (`None`: a fixed plan).
fn call_of(kind: Option<OpKind>, dtype: DType, reduce: ReduceOp, count: usize) -> Call {
    let (kind, root) = match kind {
        Some(OpKind::Allreduce) => (CallKind::Allreduce, 0),
        Some(OpKind::Broadcast { root }) => (CallKind::Broadcast, root as u32),
        Some(OpKind::Allgather) => (CallKind::Allgather, 0),
        Some(OpKind::ReduceScatter) => (CallKind::ReduceScatter, 0),
        Some(OpKind::Barrier) => (CallKind::Barrier, 0),
        None => (CallKind::Plan, 0),
    };
    Call {
        kind,
        dtype,
        count: count as u64,
        reduce,
        root,
        codec: Codec::Raw,
    }
}

pub(crate) fn progress_add(p: &Progress, n: u64) {
    p.done.fetch_add(n, Ordering::Relaxed);
}
