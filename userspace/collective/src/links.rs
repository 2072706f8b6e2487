//! One reader and one writer thread per connection. Readers decode frames into
//! pooled buffers and hand them to the engine as events; writers drain a queue.
//!
//! Liveness: once told to ([`PeerLink::keep_alive`]), a writer whose queue was
//! idle for the interval sends a Heartbeat frame; readers note when anything
//! last arrived from the peer ([`PeerLink::last_heard`]) and keep heartbeats
//! to themselves. A peer that is alive but blocked is heard; one that stopped is not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{CollectiveError, Rank, Result};
use crate::estimates::RateInbox;
use crate::mesh::Conn;
use crate::pool::{BufferPool, Payload, PooledBuf};
use crate::stripe::sched::{Stripe, StripeConn, StripeStats};
use crate::stripe::Dedup;
use crate::trace::{Chunk, SpanKind, Tracer};
use crate::transport::{Closer, Reader};
use crate::wire::{
    read_frame_from, Frame, FrameError, FrameHeader, FrameKind, FrameWriter, ReadError, WanRate,
    WanSending, MAX_BATCH,
};

/// What the connection threads tell the engine.
pub(crate) enum Event {
    Frame {
        peer: Rank,
        frame: Frame,
        /// When the reader had read all of it.
        at: Instant,
    },
    /// A connection ended; `graceful` after the peer's Goodbye.
    Closed {
        peer: Rank,
        graceful: bool,
        detail: String,
    },
}

pub(crate) enum Out {
    /// A frame, and when it was queued if it is traced.
    Frame(FrameHeader, Payload, Option<Instant>),
    /// From now on, send a heartbeat whenever the queue was idle this long.
    KeepAlive(Duration),
    /// Close the connection once everything queued before has been written.
    Close,
}

/// The connections to one peer.
pub(crate) struct PeerLink {
    data: Vec<Sender<Out>>,
    /// The connection for small transfers, when there is one (across domains).
    latency: Option<Sender<Out>>,
    all: Vec<Sender<Out>>,
    next: usize,
    writers: Vec<thread::JoinHandle<()>>,
    closers: Vec<Arc<dyn Closer>>,
    /// Connections not yet closed by the peer.
    pub open: usize,
    heard: Arc<Heard>,
    /// Bulk data over several WAN paths (`crate::stripe`), when striped.
    stripe: Option<Stripe>,
    /// See [`PeerLink::small_frame_queue`].
    small: Option<Sender<Out>>,
    /// A connection sends only from registered memory (RDMA): see
    /// [`PeerLink::registers_sends`].
    registers: bool,
}

/// When a frame last arrived on any of one peer's connections.
struct Heard {
    epoch: Instant,
    nanos: AtomicU64,
}

impl Heard {
    fn now(&self) {
        let n = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_max(n, Ordering::Relaxed);
    }
}

impl PeerLink {
    /// Queues a data frame: a frame of a `small` transfer on the latency
    /// connection if there is one, others on the next bulk data connection
    /// (round-robin striping). With `twice` (a small transfer that is worth
    /// sending twice) and a latency connection beside unstriped bulk ones,
    /// the frame goes as a [`FrameKind::DataCopy`] on both. `tail`: among
    /// the operation's last frames ([`crate::exec::SendChunk::tail`]).
    /// `queued`: when it was queued, for the trace.
    pub fn send_data(
        &mut self,
        mut h: FrameHeader,
        payload: Payload,
        small: bool,
        twice: bool,
        tail: bool,
        queued: Option<Instant>,
    ) -> bool {
        if let (true, Some(l)) = (small, &self.latency) {
            if twice && self.stripe.is_none() && !self.data.is_empty() {
                h.kind = FrameKind::DataCopy;
                let copy = PooledBuf::unpooled(payload.to_vec()).into();
                let sent = l.send(Out::Frame(h, payload, queued)).is_ok();
                // Either copy queued is the send: the peer may take the first,
                // finish its last operation and say goodbye (which closes
                // this side of every connection to it) before the second is
                // queued. A connection that failed reports that itself.
                let copied = self.next_data().send(Out::Frame(h, copy, None)).is_ok();
                return sent || copied;
            }
            return l.send(Out::Frame(h, payload, queued)).is_ok();
        }
        if let Some(s) = &self.stripe {
            return s.send(h, payload.into_pooled(), tail, queued);
        }
        self.next_data()
            .send(Out::Frame(h, payload, queued))
            .is_ok()
    }

    /// The next bulk data connection, round-robin.
    fn next_data(&mut self) -> &Sender<Out> {
        let i = self.next % self.data.len();
        self.next = self.next.wrapping_add(1);
        &self.data[i]
    }

    /// Queues a control frame on every connection (after every data frame
    /// queued before it).
    pub fn send_control(&self, kind: FrameKind, payload: &[u8]) {
        if let Some(s) = &self.stripe {
            s.drain();
        }
        for s in &self.all {
            let h = FrameHeader::control(kind, payload.len() as u32);
            let _ = s.send(Out::Frame(
                h,
                PooledBuf::unpooled(payload.to_vec()).into(),
                None,
            ));
        }
    }

    /// True once every writer has written its queue and closed (or failed).
    pub fn flushed(&self) -> bool {
        self.writers.iter().all(|w| w.is_finished())
    }

    /// True once every writer has finished and the peer's kernel has
    /// acknowledged all of it ([`Closer::settled`]): only then may this
    /// process exit without losing what the peer still needs.
    pub fn settled(&self) -> bool {
        self.flushed() && self.closers.iter().all(|c| c.settled())
    }

    /// When anything (a heartbeat included) last arrived from the peer; the
    /// link's start if nothing has.
    pub fn last_heard(&self) -> Instant {
        self.heard.epoch + Duration::from_nanos(self.heard.nanos.load(Ordering::Relaxed))
    }

    /// Every connection sends a heartbeat when idle for `every`.
    pub fn keep_alive(&self, every: Duration) {
        for s in &self.all {
            let _ = s.send(Out::KeepAlive(every));
        }
    }

    pub fn connections(&self) -> usize {
        self.all.len()
    }

    /// The queue of a connection for small frames that are not part of an
    /// operation (the WAN windows of `crate::estimates::domain`): a TCP,
    /// TLS or shared-memory one. RDMA connections are left out: with them
    /// the VM suite's mixed world (RDMA inside domains) hung at teardown on
    /// 6.12, in the kernel, deleting the rxe devices; cause not found.
    pub fn small_frame_queue(&self) -> Option<Sender<Out>> {
        self.small.clone()
    }

    /// How the bulk data to this peer was striped, if it is.
    #[allow(dead_code)]
    pub fn stripe_stats(&self) -> Option<StripeStats> {
        self.stripe.as_ref().map(Stripe::stats)
    }

    /// Whether a connection to the peer sends from registered memory only
    /// (RDMA): any other send memory it copies or registers per use.
    pub fn registers_sends(&self) -> bool {
        self.registers
    }

    /// Every connection's closer (a closed one fails its writer at once).
    pub fn closers(&self) -> &[Arc<dyn Closer>] {
        &self.closers
    }

    /// Half-closes every connection after its queue drains.
    pub fn close_after_flush(&self) {
        if let Some(s) = &self.stripe {
            s.close();
        }
        for s in &self.all {
            let _ = s.send(Out::Close);
        }
    }
}

/// Starts the threads for `peer`'s connections.
pub(crate) fn start(
    peer: Rank,
    conns: Vec<Conn>,
    events: &Sender<Event>,
    pool: &BufferPool,
    max_frame: u32,
    tracer: Option<Arc<Tracer>>,
    rates: Option<RateInbox>,
) -> Result<PeerLink> {
    let mut link = PeerLink {
        data: Vec::new(),
        latency: None,
        all: Vec::new(),
        next: 0,
        writers: Vec::new(),
        closers: Vec::new(),
        open: conns.len(),
        heard: Arc::new(Heard {
            epoch: Instant::now(),
            nanos: AtomicU64::new(0),
        }),
        stripe: None,
        small: None,
        registers: false,
    };
    // Striped when the bulk connections span two paths or more.
    let mut paths: Vec<usize> = conns
        .iter()
        .filter_map(|c| Some(c.path.as_ref()?.0))
        .collect();
    paths.sort_unstable();
    paths.dedup();
    let striped = paths.len() > 1;
    let dedup = striped.then(|| Arc::new(Dedup::default()));
    let mut stripe_conns = Vec::new();
    for (i, c) in conns.into_iter().enumerate() {
        let what = c.transport.describe();
        let (r, w, closer) = c
            .transport
            .split()
            .map_err(|e| CollectiveError::io(format!("split {what}"), e))?;
        let (tx, rx) = channel();
        let rdma = what.starts_with("rdma");
        if link.small.is_none() && !rdma {
            link.small = Some(tx.clone());
        }
        link.registers |= rdma;
        let (ev, ev2, pool, c2) = (events.clone(), events.clone(), pool.clone(), closer.clone());
        let heard = link.heard.clone();
        let dd = dedup.clone();
        let inbox = rates.clone();
        let own_writer = tx.clone();
        let written = match (striped && c.data && !c.latency, c.path) {
            (true, Some((path, sock))) => {
                let written = Arc::new(AtomicU64::new(0));
                stripe_conns.push(StripeConn {
                    path,
                    tx: tx.clone(),
                    sock,
                    written: written.clone(),
                    closer: closer.clone(),
                });
                Some(written)
            }
            _ => None,
        };
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(|e| CollectiveError::io("spawn connection thread", e))
        };
        spawn(
            format!("cw-rx-{peer}-{i}"),
            Box::new(move || {
                let to = Recipients {
                    events: ev,
                    dedup: dd,
                    rates: inbox,
                    own_writer,
                };
                reader(peer, r, to, pool, max_frame, c2, &heard);
            }),
        )?;
        link.closers.push(closer.clone());
        let (c3, tracer) = (closer.clone(), tracer.clone());
        link.writers.push(spawn(
            format!("cw-tx-{peer}-{i}"),
            Box::new(move || writer(peer, w, rx, ev2, c3, tracer, written)),
        )?);
        if c.latency {
            link.latency = Some(tx.clone());
        } else if c.data {
            link.data.push(tx.clone());
        }
        link.all.push(tx);
    }
    if striped {
        link.stripe = Some(
            Stripe::start(peer, stripe_conns)
                .map_err(|e| CollectiveError::io("spawn stripe thread", e))?,
        );
    }
    Ok(link)
}

/// Where a reader hands what it read.
struct Recipients {
    events: Sender<Event>,
    /// The duplicate filter of a striped peer.
    dedup: Option<Arc<Dedup>>,
    /// The WAN windows of a rank of this rank's domain.
    rates: Option<RateInbox>,
    /// This connection's writer: after the peer's Goodbye it half-closes
    /// too, so no heartbeat reaches the peer's socket once its process has
    /// gone (the kernel would answer with a reset and drop what the peer
    /// still had unsent).
    own_writer: Sender<Out>,
}

fn reader(
    peer: Rank,
    mut r: Reader,
    to: Recipients,
    pool: BufferPool,
    max: u32,
    closer: Arc<dyn Closer>,
    heard: &Heard,
) {
    let Recipients {
        events,
        dedup,
        rates,
        own_writer,
    } = to;
    loop {
        let got = read_frame_from(&mut *r, max, &pool);
        if got.is_ok() {
            heard.now();
        }
        let ev = match got {
            Ok(f) if f.header.kind == FrameKind::Heartbeat => continue,
            // A chunk resent on another path after this one arrived (or the reverse).
            Ok(f) if dedup.as_ref().is_some_and(|d| d.duplicate(&f.header)) => continue,
            Ok(f) if f.header.kind == FrameKind::Goodbye => {
                let _ = own_writer.send(Out::Close);
                Event::Closed {
                    peer,
                    graceful: true,
                    detail: "goodbye".into(),
                }
            }
            Ok(f) if f.header.kind == FrameKind::Hello => {
                closer.close();
                Event::Closed {
                    peer,
                    graceful: false,
                    detail: "protocol violation: second Hello".into(),
                }
            }
            Ok(f) if matches!(f.header.kind, FrameKind::WanRate | FrameKind::WanSending) => {
                match to_inbox(rates.as_ref(), peer, &f) {
                    Ok(()) => continue,
                    Err(e) => {
                        closer.close();
                        Event::Closed {
                            peer,
                            graceful: false,
                            detail: format!("malformed frame: {e}"),
                        }
                    }
                }
            }
            Ok(frame) => {
                let at = Instant::now();
                if events.send(Event::Frame { peer, frame, at }).is_err() {
                    return;
                }
                continue;
            }
            Err(ReadError::Closed) => Event::Closed {
                peer,
                graceful: false,
                detail: "connection closed".into(),
            },
            Err(ReadError::Io(e)) => Event::Closed {
                peer,
                graceful: false,
                detail: format!("read failed: {e}"),
            },
            Err(ReadError::Frame(e)) => {
                // Malformed input: this connection cannot be trusted any more.
                closer.close();
                Event::Closed {
                    peer,
                    graceful: false,
                    detail: format!("malformed frame: {e}"),
                }
            }
        };
        let _ = events.send(ev);
        return;
    }
}

/// The payload bytes after which a writer stops adding queued frames to
/// one batch (at most [`MAX_BATCH`] frames).
const BATCH_BYTES: usize = 8 << 20;

/// Frames taken off a connection's queue to be written together (one
/// vectored write: over RDMA all their writes are in flight at once).
struct Batch {
    frames: Vec<(FrameHeader, Payload)>,
    /// When each frame was queued, for the trace.
    queued_at: Vec<Option<Instant>>,
    /// Payload bytes in `frames`.
    bytes: usize,
    peer: Rank,
    tracer: Option<Arc<Tracer>>,
}

impl Batch {
    fn new(peer: Rank, tracer: Option<Arc<Tracer>>) -> Self {
        Batch {
            frames: Vec::with_capacity(MAX_BATCH),
            queued_at: Vec::with_capacity(MAX_BATCH),
            bytes: 0,
            peer,
            tracer,
        }
    }

    /// Adds a frame; true when the batch is full ([`MAX_BATCH`] frames or
    /// [`BATCH_BYTES`]).
    fn push(&mut self, h: FrameHeader, p: Payload, queued: Option<Instant>) -> bool {
        self.bytes += p.len();
        self.frames.push((h, p));
        self.queued_at.push(queued);
        self.frames.len() == MAX_BATCH || self.bytes >= BATCH_BYTES
    }

    /// Writes the frames and empties the batch, adding its data frames'
    /// bytes to `written` and recording each frame's send span.
    fn write(
        &mut self,
        w: &mut FrameWriter<crate::transport::Writer>,
        written: &mut u64,
    ) -> std::io::Result<()> {
        if self.frames.is_empty() {
            return Ok(());
        }
        w.frames(&self.frames)?;
        let done = Instant::now();
        for ((h, p), queued) in self.frames.iter().zip(&self.queued_at) {
            if matches!(h.kind, FrameKind::Data | FrameKind::DataCopy) {
                *written += (crate::wire::HEADER_LEN + p.len()) as u64;
            }
            if let (Some(t), Some(start)) = (&self.tracer, queued) {
                let c = Chunk {
                    seq: h.op,
                    peer: self.peer,
                    lane: h.lane as usize,
                    step: h.step as usize,
                    offset: h.offset,
                    bytes: p.len(),
                };
                t.record(SpanKind::Send(c), *start, done);
            }
        }
        self.frames.clear();
        self.queued_at.clear();
        self.bytes = 0;
        Ok(())
    }
}

/// Hands a `WanRate` or `WanSending` frame of a rank of the same domain to
/// the WAN estimates of the path it names in `lane` (dropped where this rank
/// has none).
fn to_inbox(rates: Option<&RateInbox>, peer: Rank, f: &Frame) -> Result<(), FrameError> {
    match f.header.kind {
        FrameKind::WanRate => {
            let w = WanRate::decode(&f.payload)?;
            if let Some(inbox) = rates {
                inbox.deliver(peer, f.header.lane, w);
            }
        }
        FrameKind::WanSending => {
            let s = WanSending::decode(&f.payload)?;
            if let Some(inbox) = rates {
                inbox.sending(peer, f.header.lane, s.0);
            }
        }
        _ => {}
    }
    Ok(())
}

fn writer(
    peer: Rank,
    w: crate::transport::Writer,
    rx: Receiver<Out>,
    events: Sender<Event>,
    closer: Arc<dyn Closer>,
    tracer: Option<Arc<Tracer>>,
    written: Option<Arc<AtomicU64>>,
) {
    let mut w = FrameWriter::new(w, 64 << 10);
    let mut batch = Batch::new(peer, tracer);
    // Data bytes written since the last flush (a striped connection reports them).
    let mut unreported = 0u64;
    let fail = |e: std::io::Error| {
        closer.close();
        let _ = events.send(Event::Closed {
            peer,
            graceful: false,
            detail: format!("write failed: {e}"),
        });
    };
    let mut idle: Option<Duration> = None;
    loop {
        let first = match idle {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(every) => rx.recv_timeout(every),
        };
        let first = match first {
            Ok(out) => out,
            Err(RecvTimeoutError::Timeout) => {
                let h = FrameHeader::control(FrameKind::Heartbeat, 0);
                Out::Frame(h, PooledBuf::unpooled(Vec::new()).into(), None)
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut next = Some(first);
        while let Some(out) = next.take() {
            match out {
                Out::Frame(h, p, queued) => {
                    if batch.push(h, p, queued) {
                        if let Err(e) = batch.write(&mut w, &mut unreported) {
                            return fail(e);
                        }
                    }
                }
                Out::KeepAlive(every) => idle = Some(every),
                Out::Close => {
                    let _ = batch.write(&mut w, &mut unreported);
                    let _ = w.flush();
                    closer.finish();
                    return;
                }
            }
            next = rx.try_recv().ok();
        }
        if let Err(e) = batch.write(&mut w, &mut unreported) {
            return fail(e);
        }
        if let Err(e) = w.flush() {
            return fail(e);
        }
        if let Some(n) = &written {
            n.fetch_add(std::mem::take(&mut unreported), Ordering::Release);
        }
    }
}

#[cfg(test)]
#[path = "links_tests.rs"]
mod tests;
