//! [`Communicator`]: set-up (rendezvous, mesh, engine, probe) and the operations.

use std::any::Any;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::builder::CommunicatorBuilder;
use crate::calls::CallCodec;
use crate::config::{Identity, Options};
use crate::cost::CostModel;
use crate::dtype::{DType, Element, ReduceOp};
use crate::engine::lent::{Loan, Owned};
use crate::engine::{Engine, Job, JobKind, Progress, WorkBuf};
use crate::error::{CollectiveError, Rank, Result};
use crate::exec::trace::Message;
use crate::handle::{Finish, Handle};
use crate::links;
use crate::membership::Seat;
use crate::pool::BufferPool;
use crate::schedule::{Algorithm, OpKind, Plan, Span};
use crate::store::{StoreClient, StoreServer};
use crate::topology::Topology;

/// A group of ranks that run collectives together. Operations are executed by a
/// worker thread in submission order; `*_async` methods return at once with a
/// [`Handle`], the others block until done.
///
/// As with every collective library, all ranks must issue the same operations,
/// with the same sizes and element types, in the same order. Blocking methods
/// work in the caller's slice itself (the worker borrows it until the operation
/// is done; `reduce_scatter` and `allreduce_into` copy what they must); the
/// `*_async` ones take and return the `Vec` without copying (sends go from it, and
/// the `Handle` gives it back once they are written). Dropping the communicator finishes queued operations,
/// flushes what is still being sent and says goodbye to every peer.
pub struct Communicator {
    rank: Rank,
    world: usize,
    topo: Topology,
    domains: Vec<String>,
    jobs: Option<Sender<Job>>,
    worker: Option<JoinHandle<()>>,
    store: Mutex<StoreClient>,
    model: CostModel,
    opts: Options,
    pool: BufferPool,
    _server: Option<StoreServer>,
    /// What a shrink or grow needs (see `membership`).
    seat: Seat,
    /// Where this rank's metrics are served (`CAUSEWAY_METRICS_ADDR`).
    metrics: Option<crate::metrics_http::Serving>,
    /// This rank's timeline (`CAUSEWAY_TRACE`).
    tracer: Option<Arc<crate::trace::Tracer>>,
    /// Samples and paces this rank's bulk WAN connections (`estimates`).
    wan: Option<crate::estimates::WanPaths>,
}

impl Communicator {
    /// From torchrun's environment (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`,
    /// `LOCAL_RANK`) plus `CAUSEWAY_DOMAIN`/`CAUSEWAY_TOPOLOGY` and the `CAUSEWAY_*` options.
    pub fn from_env() -> Result<Self> {
        let config = Identity::from_env().and_then(|id| Ok((id, Options::from_env()?)));
        match config {
            Ok((id, opts)) => Self::start(id, opts, true),
            Err(e) => {
                let e = CollectiveError::from(e);
                crate::setup::report_unstarted(&e);
                Err(e)
            }
        }
    }

    pub fn builder(rank: Rank, world: usize) -> CommunicatorBuilder {
        CommunicatorBuilder::new(rank, world)
    }

    pub(crate) fn start(id: Identity, mut opts: Options, host_store: bool) -> Result<Self> {
        opts.validate()?;
        let agent = crate::agent_paths::socket(opts.agent_socket.as_deref());
        opts.wan_paths = crate::agent_paths::resolve(&opts.wan_paths, agent.as_deref());
        if id.world == 0 {
            return Err(crate::error::ConfigError::EmptyWorld.into());
        }
        if id.rank >= id.world {
            return Err(crate::error::ConfigError::RankOutOfRange {
                rank: id.rank,
                world: id.world,
            }
            .into());
        }
        let (joined, mut boot) = crate::rendezvous::join(&id, &opts, host_store)?;
        let conns = crate::mesh::connect_all(&joined, &mut boot.store, &opts, id.rank)
            .and_then(|c| crate::setup::done(&mut boot.store).map(|()| c));
        let conns = match conns {
            Ok(c) => c,
            Err(e) => {
                boot.give_up(id.rank, id.world, &e);
                return Err(e);
            }
        };
        let wan_bulk =
            std::mem::take(&mut *joined.wan_bulk.lock().unwrap_or_else(|p| p.into_inner()));
        let congestion = match (&opts.wan_congestion, opts.wan_pacing) {
            (Some(model), true)
                if !opts.wan_lossless_congestion.is_empty()
                    && !opts.wan_lossless_congestion.contains(model) =>
            {
                Some(crate::estimates::CcNames {
                    model_based: model.clone(),
                    loss_based: opts.wan_lossless_congestion.clone(),
                })
            }
            _ => None,
        };
        let wan = crate::estimates::WanPaths::start(
            id.rank,
            wan_bulk,
            opts.wan_inflight_gain,
            congestion,
        );
        let seat = Seat::new(
            &id,
            &opts,
            joined.addrs.clone(),
            joined.listener,
            joined.tls.clone(),
        );
        let pool = BufferPool::new(64 + 4 * id.world * opts.window);
        let (ev_tx, ev_rx) = channel();
        let tracer = opts
            .trace_dir
            .as_deref()
            .map(|d| Arc::new(crate::trace::Tracer::new(id.rank, d)));
        // Data frames carry at most one chunk; control frames (aborts) up to a few KiB.
        let max_frame = opts.chunk_bytes.max(64 << 10) as u32;
        let mut peers = Vec::with_capacity(id.world);
        for (q, c) in conns.into_iter().enumerate() {
            peers.push(if q == id.rank {
                None
            } else {
                Some(links::start(
                    q,
                    c,
                    &ev_tx,
                    &pool,
                    max_frame,
                    tracer.clone(),
                    wan.as_ref().map(crate::estimates::WanPaths::inbox),
                )?)
            });
        }
        drop(ev_tx);
        if let Some(wan) = &wan {
            // The domain's other ranks: they sum their WAN windows with this one's.
            let mine = joined.topology.domain_of(id.rank);
            let queues = (0..id.world)
                .filter(|&q| q != id.rank && joined.topology.domain_of(q) == mine)
                .filter_map(|q| peers.get(q)?.as_ref()?.small_frame_queue())
                .collect();
            wan.set_domain(id.rank, queues);
        }
        let metrics = match opts.metrics_addr {
            None => None,
            Some(base) => {
                let addr = crate::observe_env::rank_metrics_addr(base, id.local_rank.unwrap_or(0))?;
                let m = Arc::new(crate::metrics::RankMetrics::new(id.rank, 0));
                let serving = crate::metrics_http::serve(addr, m.clone())
                    .map_err(|e| CollectiveError::io(format!("serve metrics on {addr}"), e))?;
                Some((m, serving))
            }
        };
        let mut engine = Engine::new(
            id.rank,
            joined.topology.clone(),
            opts.clone(),
            peers,
            ev_rx,
            pool.clone(),
        );
        engine.metrics = metrics.as_ref().map(|(m, _)| m.clone());
        engine.tracer = tracer.clone();
        let (jobs, job_rx) = channel();
        let worker = std::thread::Builder::new()
            .name(format!("cw-engine-{}", id.rank))
            .spawn(move || engine.run(job_rx))
            .map_err(|e| CollectiveError::io("spawn engine", e))?;
        let mut comm = Communicator {
            rank: id.rank,
            world: id.world,
            topo: joined.topology,
            domains: joined.domains,
            jobs: Some(jobs),
            worker: Some(worker),
            store: Mutex::new(boot.store),
            model: opts.cost,
            opts: opts.clone(),
            pool,
            _server: boot.server,
            seat,
            metrics: metrics.map(|(_, s)| s),
            tracer,
            wan,
        };
        let mut wan_floor = false;
        let mut wan_paths = Vec::new();
        if opts.probe && id.world > 1 {
            let probed = crate::probe::measure(&comm, &opts)?;
            comm.model = probed.model;
            wan_floor = probed.wan_floor;
            wan_paths = probed.wan_paths;
            if let Some(spec) = &opts.cost_overrides {
                comm.model.apply_overrides(spec)?;
            }
        }
        if let Some(wan) = &comm.wan {
            // Start-up is over: every rank of the domain sends at once from now
            // on, from the rate every rank agreed on.
            let mine = comm.topo.domain_of(id.rank);
            let ranks = (0..id.world)
                .filter(|&r| comm.topo.domain_of(r) == mine)
                .count();
            let seed = (opts.probe || opts.cost_overrides.is_some())
                .then(|| 1.0 / comm.model.inter_domain.beta);
            let pace = opts
                .wan_pacing
                .then(|| (ranks, opts.wan_rate_bps.map(|b| b as f64 / 8.0)));
            wan.started(ranks, seed, pace, &wan_paths);
            if wan_floor && opts.cost_overrides.is_none() {
                wan.seed_is_floor();
            }
        }
        if opts.wan_warm_bytes > 0 && id.world > 1 {
            let (bulk, lat) = (opts.wan_warm_bytes, opts.latency_bytes);
            let plan = crate::warm::warm_plan(&comm.topo, id.rank, bulk, lat, 3);
            use crate::probe::ProbeLink;
            comm.run_plan(plan, crate::warm::warm_len(bulk, lat))?;
        }
        let model = comm.model;
        comm.submit::<u8, ()>(JobKind::SetCost(model), ReduceOp::Sum, Vec::new(), |_| ())
            .wait()?;
        Ok(comm)
    }

    pub fn rank(&self) -> Rank {
        self.rank
    }
    pub(crate) fn options(&self) -> &Options {
        &self.opts
    }
    pub fn world_size(&self) -> usize {
        self.world
    }
    pub fn topology(&self) -> &Topology {
        &self.topo
    }
    /// Domain label of `rank`, as it registered.
    pub fn domain_of(&self, rank: Rank) -> Option<&str> {
        self.domains.get(rank).map(String::as_str)
    }
    /// Where this rank's Prometheus metrics are served, when they are
    /// (`CAUSEWAY_METRICS_ADDR`, [`Options::metrics_addr`]).
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr())
    }
    /// The link costs the algorithm choice uses (probed or configured).
    pub fn cost_model(&self) -> CostModel {
        self.model
    }
    /// What this rank's bulk connections across domains tell of the WAN path
    /// now (rate, RTT, the pacing applied: [`crate::estimates`]); `None`
    /// without such connections or before their first delivery-rate sample.
    /// Striped over several paths: all of them as one link (rates summed,
    /// the quickest RTT; [`Communicator::path_estimates`] has each).
    /// The cost model keeps the start-up value every rank agreed on.
    pub fn link_estimates(&self) -> Option<crate::LinkEstimate> {
        self.wan.as_ref()?.estimate()
    }
    /// Each WAN path's estimate (index = path, as in `CAUSEWAY_WAN_PATHS`;
    /// one entry when not striped; `None` for a path not measured yet).
    pub fn path_estimates(&self) -> Vec<Option<crate::LinkEstimate>> {
        self.wan
            .as_ref()
            .map_or_else(Vec::new, crate::estimates::WanPaths::estimates)
    }
    /// Chunk buffers allocated so far (they are pooled: this stops growing once warm).
    pub fn buffer_allocations(&self) -> usize {
        self.pool.allocations()
    }
    /// The algorithm an allreduce of `count` elements of `T` runs with.
    pub fn allreduce_algorithm<T: Element>(&self, count: usize) -> Algorithm {
        let esize = T::DTYPE.size();
        let s = crate::cost::Setting::new(&self.topo, &self.model, &self.opts, esize);
        crate::cost::select(OpKind::Allreduce, count, esize, self.opts.algorithm, &s)
    }
    /// The elements of a `len`-element buffer that `rank` owns after a reduce-scatter.
    pub fn shard(&self, len: usize, rank: Rank) -> Range<usize> {
        let s = Span::new(0, len).piece(self.world, rank);
        s.start..s.end()
    }

    fn submit<T: Element, R: 'static>(
        &self,
        kind: JobKind,
        op: ReduceOp,
        buf: Vec<T>,
        map: impl FnOnce(Vec<T>) -> R + Send + 'static,
    ) -> Handle<R> {
        self.submit_recorded(kind, op, buf, None, map)
    }

    /// [`submit`](Self::submit), recording every chunk sent and applied into `record`.
    pub(crate) fn submit_recorded<T: Element, R: 'static>(
        &self,
        kind: JobKind,
        op: ReduceOp,
        buf: Vec<T>,
        record: Option<Arc<Mutex<Vec<Message>>>>,
        map: impl FnOnce(Vec<T>) -> R + Send + 'static,
    ) -> Handle<R> {
        let map = Box::new(move |b: Box<dyn Any + Send>| -> Result<R> {
            b.downcast::<Owned<T>>()
                .map(|v| map(v.into_vec()))
                .map_err(|_| CollectiveError::Closed)
        });
        let codec = self.default_codec(&kind, T::DTYPE);
        let buf = Owned::new(buf, self.opts.timeout);
        self.submit_work(kind, (T::DTYPE, op, codec), Box::new(buf), record, map)
    }

    /// Queues a job on any working buffer; `map` turns it back into the result.
    fn submit_work<R: 'static>(
        &self,
        kind: JobKind,
        (dtype, op, codec): (DType, ReduceOp, CallCodec),
        buf: Box<dyn WorkBuf>,
        record: Option<Arc<Mutex<Vec<Message>>>>,
        map: Finish<R>,
    ) -> Handle<R> {
        let (reply, rx) = channel();
        let progress = Arc::new(Progress::default());
        let waker = Arc::new(Mutex::new(None));
        let job = Job {
            kind,
            dtype,
            op,
            buf,
            progress: progress.clone(),
            reply: reply.clone(),
            waker: waker.clone(),
            record,
            codec,
        };
        if self
            .jobs
            .as_ref()
            .map(|j| j.send(job).is_ok())
            .is_none_or(|sent| !sent)
        {
            let _ = reply.send(Err(self.seat.closed_error()));
            progress.finished.store(true, Ordering::Release);
        }
        Handle {
            rx,
            map: Some(map),
            progress,
            waker,
        }
    }

    fn store(&self) -> Result<std::sync::MutexGuard<'_, StoreClient>> {
        self.store
            .lock()
            .map_err(|_| CollectiveError::Rendezvous("store lock poisoned".into()))
    }

    /// Runs `kind` in `buf` itself: the engine works in the caller's memory
    /// (lent for the duration, see [`Loan`]), no copy in or out.
    fn in_place<T: Element>(&self, kind: JobKind, op: ReduceOp, buf: &mut [T]) -> Result<()> {
        let codec = self.default_codec(&kind, T::DTYPE);
        self.in_place_with(kind, op, buf, codec)
    }

    /// [`in_place`](Self::in_place) with this call's codec.
    pub(crate) fn in_place_with<T: Element>(
        &self,
        kind: JobKind,
        op: ReduceOp,
        buf: &mut [T],
        codec: CallCodec,
    ) -> Result<()> {
        let (loan, lent) = Loan::new(buf, self.opts.timeout);
        let res = self
            .submit_work(
                kind,
                (T::DTYPE, op, codec),
                Box::new(lent),
                None,
                Box::new(|_| Ok(())),
            )
            .wait();
        drop(loan); // waits until the engine has let go of `buf`
        res
    }

    /// In-place allreduce: every rank ends with the same, bit-identical result.
    pub fn allreduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        self.in_place(JobKind::Op(OpKind::Allreduce), op, buf)
    }
    /// Out-of-place allreduce; `recv.len()` must equal `send.len()`.
    pub fn allreduce_into<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        same_len(send.len(), recv.len(), "allreduce: recv")?;
        recv.copy_from_slice(send);
        self.allreduce(recv, op)
    }
    pub fn allreduce_async<T: Element>(&self, buf: Vec<T>, op: ReduceOp) -> Handle<Vec<T>> {
        self.submit(JobKind::Op(OpKind::Allreduce), op, buf, |v| v)
    }

    /// Copies `root`'s buffer to every rank.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: Rank) -> Result<()> {
        self.check_root(root)?;
        self.in_place(JobKind::Op(OpKind::Broadcast { root }), ReduceOp::Sum, buf)
    }
    fn check_root(&self, root: Rank) -> Result<()> {
        if root >= self.world {
            return Err(CollectiveError::InvalidArgument(format!(
                "root {root} ≥ world size {}",
                self.world
            )));
        }
        Ok(())
    }
    pub fn broadcast_async<T: Element>(&self, buf: Vec<T>, root: Rank) -> Result<Handle<Vec<T>>> {
        self.check_root(root)?;
        Ok(self.submit(
            JobKind::Op(OpKind::Broadcast { root }),
            ReduceOp::Sum,
            buf,
            |v| v,
        ))
    }

    /// Gathers every rank's `send` into `recv` (rank r's part at `r * send.len()`).
    pub fn allgather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        same_len(
            recv.len(),
            send.len() * self.world,
            "allgather: recv (world × send)",
        )?;
        let n = send.len();
        recv[self.rank * n..(self.rank + 1) * n].copy_from_slice(send);
        self.in_place(JobKind::Op(OpKind::Allgather), ReduceOp::Sum, recv)
    }
    /// In-place allgather: `buf` holds `world` blocks, this rank's block is filled in.
    pub fn allgather_in_place<T: Element>(&self, buf: &mut [T]) -> Result<()> {
        if !buf.len().is_multiple_of(self.world) {
            return Err(CollectiveError::InvalidArgument(format!(
                "allgather: {} elements is not a multiple of the world size",
                buf.len()
            )));
        }
        self.in_place(JobKind::Op(OpKind::Allgather), ReduceOp::Sum, buf)
    }
    pub fn allgather_async<T: Element>(&self, send: Vec<T>) -> Handle<Vec<T>> {
        let n = send.len();
        let mut all = vec![T::zeroed(); n * self.world];
        all[self.rank * n..(self.rank + 1) * n].copy_from_slice(&send);
        self.submit(JobKind::Op(OpKind::Allgather), ReduceOp::Sum, all, |v| v)
    }

    /// Reduces `send` across ranks and leaves this rank's shard
    /// ([`Communicator::shard`]) in `recv`.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let mine = self.shard(send.len(), self.rank);
        same_len(
            recv.len(),
            mine.len(),
            "reduce_scatter: recv (this rank's shard)",
        )?;
        let v = self.reduce_scatter_async(send.to_vec(), op).wait()?;
        recv.copy_from_slice(&v);
        Ok(())
    }
    /// In-place reduce-scatter: afterwards only `buf[shard(len, rank)]` is meaningful.
    pub fn reduce_scatter_in_place<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        self.in_place(JobKind::Op(OpKind::ReduceScatter), op, buf)
    }
    pub fn reduce_scatter_async<T: Element>(&self, send: Vec<T>, op: ReduceOp) -> Handle<Vec<T>> {
        let mine = self.shard(send.len(), self.rank);
        self.submit(JobKind::Op(OpKind::ReduceScatter), op, send, move |v| {
            v[mine].to_vec()
        })
    }

    /// Returns once every rank has entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        self.barrier_async().wait()
    }
    pub fn barrier_async(&self) -> Handle<()> {
        self.submit(
            JobKind::Op(OpKind::Barrier),
            ReduceOp::Sum,
            vec![0u8; 2],
            |_| (),
        )
    }
}

impl crate::probe::ProbeLink for Communicator {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn topology(&self) -> &Topology {
        &self.topo
    }
    fn run_plan(&self, plan: Plan, len: usize) -> Result<()> {
        self.submit::<u8, ()>(JobKind::Plan(plan), ReduceOp::Sum, vec![0u8; len], |_| ())
            .wait()
    }
    fn publish(&self, key: &str, value: &[u8]) -> Result<()> {
        Ok(self.store()?.set(key, value)?)
    }
    fn lookup(&self, key: &str, timeout: std::time::Duration) -> Result<Vec<u8>> {
        Ok(self.store()?.get(key, timeout)?)
    }
    fn wan_goodput(&self) -> Option<f64> {
        self.link_estimates().map(|e| e.goodput_bps / 8.0)
    }
    fn wan_path_goodputs(&self) -> Vec<f64> {
        match self.wan.as_ref() {
            Some(w) if w.several() => w.goodputs(),
            _ => Vec::new(),
        }
    }
}

fn same_len(got: usize, want: usize, what: &str) -> Result<()> {
    if got != want {
        return Err(CollectiveError::InvalidArgument(format!(
            "{what} has {got} elements, expected {want}"
        )));
    }
    Ok(())
}

impl Communicator {
    pub(crate) fn seat(&self) -> &Seat {
        &self.seat
    }
    pub(crate) fn seat_mut(&mut self) -> &mut Seat {
        &mut self.seat
    }
    /// Writes the timeline (`CAUSEWAY_TRACE`), with the clock estimates of
    /// the peers evaluated halfway through it.
    fn write_trace(&self) {
        let Some(t) = &self.tracer else { return };
        let notes = crate::trace::clock_notes(
            &self.topo,
            self.rank,
            &self.seat.addrs,
            self.opts.clock_map.as_deref(),
            t.middle_ns(),
        );
        match t.write(self.seat.membership.epoch, self.world, &notes) {
            Ok(p) => tracing::info!(path = %p.display(), "trace written"),
            Err(e) => tracing::warn!(error = %e, "writing the trace failed"),
        }
    }
    /// Labels the metrics with the membership's epoch (after a shrink or grow).
    pub(crate) fn note_epoch(&self) {
        if let Some(m) = &self.metrics {
            m.metrics().set_epoch(self.seat.membership.epoch);
        }
    }
    /// Stops the engine without waiting for it (queued operations finish,
    /// goodbyes to a hung peer may take up to the timeout); every later
    /// operation fails with [`CollectiveError::Retired`].
    pub(crate) fn retire(&mut self) {
        self.seat.retire();
        self.jobs.take();
        self.worker.take(); // detached: it exits on its own
    }
}

impl Drop for Communicator {
    /// Finishes the queued operations, says goodbye to every peer, stops the worker.
    fn drop(&mut self) {
        // Refuse shrink probes at once: this rank is leaving (see `membership`).
        self.seat.close();
        // The WAN sampler sends windows to the domain's other ranks on their
        // connections: stopped first, so none can slip in after the Goodbye,
        // which ends the peer's reading (unread data makes a close a reset).
        self.wan.take();
        self.jobs.take();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
        self.write_trace();
    }
}
