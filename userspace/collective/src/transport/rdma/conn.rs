//! One RDMA connection as a byte stream: the receive ring, credits, the
//! registration cache and the progress thread (see the module docs). Its
//! `unsafe` blocks are the ring protocol's claims (who may touch which bytes
//! when); the verbs calls themselves are in `verbs`.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::error::{status_name, RdmaError};
use super::returns::Returns;
use super::verbs::{Completion, Device, Endpoint, Local, Region, MAX_SGE};
use super::{find_gid, stable, ConnInfo, GidLocation, Imm};
use crate::pool::{Borrowed, PooledBuf};
use crate::transport::{Closer, Reader, StreamRead, Transport, Writer};

/// Send and receive queue depth of every QP.
const DEPTH: u32 = 256;
/// Largest single RDMA WRITE.
const MAX_MSG: usize = 1 << 20;
/// Data writes in flight per connection.
const MAX_INFLIGHT: u64 = 32;
/// Credit messages in flight before the reader waits.
const MAX_CREDITS_INFLIGHT: u64 = 64;
/// Parts of one vectored write posted before its single completion wait:
/// a whole batch of the links' frame writer (a header and a payload per
/// frame, and what it had gathered).
const MAX_PARTS: usize = 2 * crate::wire::MAX_BATCH + 1;
/// The staging buffer for sends from memory the pool does not own.
const STAGING: usize = 1 << 20;
/// Registrations kept per connection (the pool's buffers in use).
const CACHE: usize = 32;
/// Polls of an empty CQ before sleeping on the completion channel.
const SPINS: u32 = 16;
/// Work request ids with this bit are control sends (credits, end of stream).
const CTL: u64 = 1 << 63;
/// Work request ids with this bit are data writes (receives have neither:
/// a failed completion's opcode is undefined, its id is not).
const DATA: u64 = 1 << 62;
/// How long the progress thread goes on after both halves ended, for the
/// data writes still in flight (their buffers are held until they complete).
const DRAIN: Duration = Duration::from_secs(10);

const WC_SEND: u32 = ibverbs_sys::ibv_wc_opcode::IBV_WC_SEND;
const WC_RDMA_WRITE: u32 = ibverbs_sys::ibv_wc_opcode::IBV_WC_RDMA_WRITE;
const WC_RECV: u32 = ibverbs_sys::ibv_wc_opcode::IBV_WC_RECV;
const WC_RECV_IMM: u32 = ibverbs_sys::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM;
const STATUS_FLUSH: u32 = ibverbs_sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR;

/// Process-wide data-path counters (every RDMA connection of the process).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bytes written to a peer straight from the sender's memory (a pool
    /// buffer or a caller's [`CommBuf`](crate::CommBuf)).
    pub zero_copy_bytes: u64,
    /// Of those, bytes written straight from a caller's own
    /// [`CommBuf`](crate::CommBuf) by a blocking call.
    pub lent_bytes: u64,
    /// Bytes copied into the staging buffer first (memory the pool does not own).
    pub copied_bytes: u64,
    /// Received payload bytes handed to the engine where the peer wrote
    /// them, in the receive ring (never copied out of it).
    pub received_in_place_bytes: u64,
    /// Received bytes copied out of the receive ring (frame headers, control
    /// frames, and payloads too long to be read in place).
    pub received_copied_bytes: u64,
    /// Memory registrations alive now (rings, staging, cached buffers).
    pub registrations: u64,
    /// `ibv_reg_mr` calls for cached send buffers since start.
    pub cache_misses: u64,
}

static ZERO_COPY: AtomicU64 = AtomicU64::new(0);
static COPIED: AtomicU64 = AtomicU64::new(0);
static LENT: AtomicU64 = AtomicU64::new(0);
static REGISTRATIONS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);
static IN_PLACE: AtomicU64 = AtomicU64::new(0);
static READ_COPIED: AtomicU64 = AtomicU64::new(0);

pub fn counters() -> Counters {
    Counters {
        zero_copy_bytes: ZERO_COPY.load(Ordering::Relaxed),
        lent_bytes: LENT.load(Ordering::Relaxed),
        copied_bytes: COPIED.load(Ordering::Relaxed),
        received_in_place_bytes: IN_PLACE.load(Ordering::Relaxed),
        received_copied_bytes: READ_COPIED.load(Ordering::Relaxed),
        registrations: REGISTRATIONS.load(Ordering::Relaxed),
        cache_misses: MISSES.load(Ordering::Relaxed),
    }
}

/// Every live connection of the process, for [`states`].
static LIVE: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// One line per live RDMA connection of this process: the peer, the QP and
/// its byte and work-request counters (what a stalled transfer waits for).
pub fn states() -> Vec<String> {
    let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    live.retain(|w| w.strong_count() > 0);
    live.iter()
        .filter_map(Weak::upgrade)
        .map(|s| {
            let g = s.lock();
            format!(
                "{} qp {}: in arrived {} consumed {} freed {} (+{} ranges) unreported {} fin {}; out head {} credit {} writes {}/{} done, ctl {}/{} done; error {:?}",
                s.peer,
                s.ep.qpn(),
                g.arrived,
                g.consumed,
                g.returns.freed(),
                g.returns.waiting(),
                g.unreported,
                g.fin,
                g.head,
                g.credit,
                g.data_posted - g.flight.len() as u64,
                g.data_posted,
                g.ctl_done,
                g.ctl_posted,
                g.error.as_ref().map(ToString::to_string)
            )
        })
        .collect()
}

/// A registration counted in [`Counters::registrations`].
struct Counted(Region);

impl Counted {
    fn new(r: Region) -> Self {
        REGISTRATIONS.fetch_add(1, Ordering::Relaxed);
        Counted(r)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        REGISTRATIONS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// This rank's device, found by its address.
pub struct RdmaDevice {
    dev: Arc<Device>,
    loc: GidLocation,
}

impl RdmaDevice {
    pub fn name(&self) -> &str {
        &self.loc.device
    }

    pub fn gid_index(&self) -> u8 {
        self.loc.gid_index
    }

    /// Creates a QP and its registered receive ring of `ring_bytes`, with
    /// every receive posted: ready to publish its [`ConnInfo`].
    pub fn prepare(&self, ring_bytes: usize) -> Result<Pending, RdmaError> {
        // Credits carry up to a whole ring in 30 bits.
        let ring_bytes = ring_bytes.clamp(4096, 1 << 29);
        let ep = Endpoint::new(&self.dev, DEPTH)?;
        let ring = Counted::new(Region::alloc_mirrored(&self.dev, ring_bytes)?);
        let staging = Counted::new(Region::alloc(&self.dev, STAGING, false)?);
        for i in 0..DEPTH {
            ep.post_recv(u64::from(i))?;
        }
        let info = ConnInfo {
            qpn: ep.qpn(),
            psn: rand::random::<u32>() & 0xff_ffff,
            gid: self.loc.gid,
            gid_index: self.loc.gid_index,
            mtu: self.dev.mtu,
            ring_addr: ring.0.addr(),
            ring_len: ring.0.len() as u32,
            rkey: ring.0.rkey(),
        };
        Ok(Pending {
            dev: self.dev.clone(),
            ep,
            ring,
            staging,
            info,
        })
    }
}

/// Opens the device that carries `ip` (its RoCE v2 GID).
pub fn open_device(ip: Ipv4Addr) -> Result<RdmaDevice, RdmaError> {
    let loc = find_gid(Path::new("/sys/class/infiniband"), ip)?;
    let dev = Device::open(&loc.device)?;
    Ok(RdmaDevice { dev, loc })
}

/// A queue pair whose info is published, waiting for the peer's.
pub struct Pending {
    dev: Arc<Device>,
    ep: Endpoint,
    ring: Counted,
    staging: Counted,
    info: ConnInfo,
}

impl Pending {
    pub fn info(&self) -> ConnInfo {
        self.info
    }

    /// Connects to `remote` (RTR, RTS). `peer` names it in errors.
    pub fn connect(self, remote: ConnInfo, peer: String) -> Result<RdmaTransport, RdmaError> {
        self.ep.connect(&self.info, &remote)?;
        let t = RdmaTransport {
            shared: Arc::new(Shared {
                dev: self.dev,
                ep: self.ep,
                ring: self.ring,
                staging: self.staging,
                remote,
                peer,
                cache: Mutex::new(Vec::new()),
                st: Mutex::new(State::default()),
                cv: Condvar::new(),
                closed: AtomicBool::new(false),
                halves: AtomicUsize::new(2),
            }),
        };
        LIVE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(&t.shared));
        Ok(t)
    }
}

#[derive(Default)]
struct State {
    /// Bytes the peer wrote into our ring / we read out of it or handed out
    /// in place.
    arrived: u64,
    consumed: u64,
    /// What of the consumed bytes came back (a frame read in place comes
    /// back when the engine drops it, in any order).
    returns: Returns,
    /// Came back but not yet given to the peer as credit.
    unreported: u64,
    fin: bool,
    /// The peer's hello arrived (see [`RdmaTransport::handshake`]).
    hello: bool,
    /// Bytes we wrote into the peer's ring / it gave back.
    head: u64,
    credit: u64,
    data_posted: u64,
    ctl_posted: u64,
    ctl_done: u64,
    /// Data writes posted and not yet completed, oldest first (so
    /// `data_posted - flight.len()` have completed).
    flight: VecDeque<Flight>,
    /// Bytes of the staging buffer handed out / given back, counted from the
    /// start (positions modulo [`STAGING`]).
    stage_head: u64,
    stage_tail: u64,
    error: Option<RdmaError>,
}

/// What one data write in flight reads from, released when it completes.
#[derive(Debug, Clone, Copy)]
struct Flight {
    /// Its work request id (without [`DATA`]).
    wr: u64,
    /// The pool allocations (start, id) it reads, each held in [`stable`].
    holds: [(usize, u64); MAX_SGE],
    held: usize,
    /// The staging position just past the last staged byte it reads: the
    /// new `stage_tail` once it completes.
    staged_to: Option<u64>,
}

/// Where the bytes of one part of a write come from.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// A pool allocation (start, id), held in [`stable`] while in flight.
    Pool(usize, u64),
    /// The staging buffer, from this position (counted from the start).
    Staged(u64),
}

/// One part of a write, ready to post: its bytes and where they lie.
#[derive(Debug, Clone, Copy)]
struct Seg {
    addr: u64,
    lkey: u32,
    len: usize,
    src: Source,
}

impl Flight {
    /// The pool allocations it holds.
    fn held(&self) -> &[(usize, u64)] {
        &self.holds[..self.held]
    }

    /// Releases its holds (it completed, or will never be posted).
    fn release(&self) {
        self.held()
            .iter()
            .for_each(|&(start, id)| stable::release(start, id));
    }
}

impl State {
    /// Ends every data write up to `wr` (RC completes them in order):
    /// returns the pool holds to release once the state lock is dropped.
    fn complete(&mut self, wr: u64, holds: &mut Vec<(usize, u64)>) {
        while let Some(f) = self.flight.front().filter(|f| f.wr <= wr).copied() {
            self.flight.pop_front();
            holds.extend_from_slice(f.held());
            if let Some(to) = f.staged_to {
                self.stage_tail = self.stage_tail.max(to);
            }
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // The queue pair (a field of `Shared` before this one) is gone: the
        // device reads none of these buffers any more.
        self.flight.drain(..).for_each(|f| f.release());
    }
}

/// A cached registration of one pool allocation (`id`, see [`stable`]).
struct Cached {
    /// The pool allocation or caller's `CommBuf` it was made for.
    id: u64,
    region: Counted,
}

struct Shared {
    dev: Arc<Device>,
    ep: Endpoint,
    ring: Counted,
    staging: Counted,
    remote: ConnInfo,
    peer: String,
    cache: Mutex<Vec<Cached>>,
    /// After `ep`: fields drop in order, so the QP is destroyed before the
    /// state releases the holds of writes still in flight.
    st: Mutex<State>,
    cv: Condvar,
    closed: AtomicBool,
    /// Reader and writer halves still alive; the progress thread ends at 0.
    halves: AtomicUsize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        // The timeout only guards against a missed wake-up.
        match self.cv.wait_timeout(g, Duration::from_millis(100)) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        }
    }

    fn fail(&self, e: RdmaError) {
        let mut g = self.lock();
        self.fail_locked(&mut g, e);
    }

    /// [`Shared::fail`] with the state already locked.
    fn fail_locked(&self, g: &mut State, e: RdmaError) {
        if g.error.is_none() {
            tracing::warn!(peer = %self.peer, error = %e, "rdma connection failed");
            g.error = Some(e);
        }
        self.ep.break_off();
        self.cv.notify_all();
    }

    fn closed_error(&self, g: &State) -> Option<io::Error> {
        if let Some(e) = &g.error {
            return Some(e.clone().into_io());
        }
        self.closed
            .load(Ordering::Acquire)
            .then(|| RdmaError::PeerGone(format!("{} (connection closed)", self.peer)).into_io())
    }

    fn handle(&self, c: &Completion) {
        if c.wr_id & DATA != 0 {
            // Successful or not, the device is done with its buffer.
            let mut holds = Vec::new();
            self.lock().complete(c.wr_id & !DATA, &mut holds);
            holds.into_iter().for_each(|(s, id)| stable::release(s, id));
            self.cv.notify_all();
            if c.error.is_none() {
                return;
            }
        }
        if let Some((status, vendor)) = c.error {
            if status == STATUS_FLUSH && self.closed.load(Ordering::Acquire) {
                return;
            }
            self.fail(RdmaError::Qp {
                peer: self.peer.clone(),
                qpn: self.ep.qpn(),
                status,
                name: status_name(status),
                vendor,
            });
            return;
        }
        let mut g = self.lock();
        match c.opcode {
            WC_RECV | WC_RECV_IMM => {
                match c.imm.and_then(Imm::decode) {
                    Some(Imm::Data(n)) => g.arrived += u64::from(n),
                    Some(Imm::Credit(n)) => g.credit += u64::from(n),
                    Some(Imm::Fin) => g.fin = true,
                    Some(Imm::Hello) => g.hello = true,
                    None => {
                        drop(g);
                        return self.fail(RdmaError::BadInfo {
                            peer: self.peer.clone(),
                            reason: format!("message without a valid immediate: {c:?}"),
                        });
                    }
                }
                if let Err(e) = self.ep.post_recv(c.wr_id) {
                    drop(g);
                    return self.fail(e);
                }
            }
            WC_SEND | WC_RDMA_WRITE if c.wr_id & CTL != 0 => g.ctl_done += 1,
            _ => {}
        }
        drop(g);
        self.cv.notify_all();
    }

    /// The progress thread: poll, spin a little, then sleep on the channel.
    fn progress(&self) {
        let mut got = Vec::with_capacity(16);
        let mut idle = 0u32;
        let mut ended: Option<Instant> = None;
        loop {
            if self.halves.load(Ordering::Acquire) == 0 {
                // The last writes may still be in flight: see them complete.
                // (After an error or a close, they complete flushed.)
                let drained = self.lock().flight.is_empty();
                let started = *ended.get_or_insert_with(Instant::now);
                if drained || started.elapsed() > DRAIN {
                    return;
                }
            }
            got.clear();
            if let Err(e) = self.ep.poll(&mut got, 16) {
                return self.fail(e);
            }
            if !got.is_empty() {
                got.iter().for_each(|c| self.handle(c));
                idle = 0;
                continue;
            }
            idle += 1;
            if idle < SPINS {
                if idle > SPINS / 2 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            if let Err(e) = self.ep.arm() {
                return self.fail(e);
            }
            // A completion that came before arming raises no event.
            if let Err(e) = self.ep.poll(&mut got, 16) {
                return self.fail(e);
            }
            if got.is_empty() {
                let t = Instant::now();
                let ev = self.ep.wait(Duration::from_millis(100));
                tracing::trace!(
                    peer = %self.peer,
                    slept_ms = t.elapsed().as_secs_f64() * 1e3,
                    event = ev,
                    "rdma progress thread woke"
                );
            } else {
                got.iter().for_each(|c| self.handle(c));
            }
            idle = 0;
        }
    }

    fn send_ctl(&self, g: &mut State, imm: Imm) -> Result<(), RdmaError> {
        let id = CTL | g.ctl_posted;
        self.ep.post_send_imm(id, imm.encode())?;
        g.ctl_posted += 1;
        Ok(())
    }

    /// The lkey of a registration covering `buf` and the pool allocation or
    /// caller's `CommBuf` it lies in (start, id, caller's), if it lies in a live one
    /// (registered now on the first use).
    fn registered(&self, buf: &[u8]) -> Option<(u32, usize, u64, bool)> {
        let f = stable::find(buf.as_ptr() as usize, buf.len())?;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.iter().find(|c| c.id == f.id) {
            return Some((c.region.0.lkey(), f.start, f.id, f.caller));
        }
        // Registrations of freed allocations are never used again: drop them.
        cache.retain(|c| stable::is_live(c.id));
        if cache.len() >= CACHE {
            // The oldest one no write in flight reads from (else copy).
            let old = cache.iter().position(|c| !stable::is_held(c.id))?;
            cache.remove(old);
        }
        // SAFETY: `[start, start+len)` is a live pool allocation or caller's
        // `CommBuf` (checked just above under the stable registry's
        // bookkeeping) and `buf` borrows it, so it is mapped now, and
        // `stable` holds it until the writes posted from it complete. Once
        // it is freed, the registration keeps only the pinned pages and is
        // never used again, because a later allocation gets a new id.
        let region = unsafe { Region::register_raw(&self.dev, f.start as *mut u8, f.len, false) };
        MISSES.fetch_add(1, Ordering::Relaxed);
        match region {
            Ok(r) => {
                let lkey = r.lkey();
                cache.push(Cached {
                    id: f.id,
                    region: Counted::new(r),
                });
                Some((lkey, f.start, f.id, f.caller))
            }
            Err(e) => {
                tracing::debug!(error = %e, "rdma: send buffer not registered; copying");
                None
            }
        }
    }

    /// Writes the non-empty `parts` (up to [`MAX_PARTS`]) as RDMA WRITEs
    /// posted back to back, each gathering up to [`MAX_SGE`] consecutive
    /// parts (a frame's header and payload go as one write), and returns
    /// without waiting for them: each one's source stays untouched until it
    /// completes. A part in a pool allocation goes straight from the
    /// caller's memory, which [`stable`] holds (the pool neither reuses nor
    /// frees it) until the write completes; any other part is copied into
    /// the staging ring (at most half of it per call), whose bytes are given
    /// back as their writes complete. So successive calls overlap on the
    /// wire, as `ib_write_bw`'s posts do. Returns the bytes written, which
    /// may be fewer than asked (a partial write).
    fn write_parts(&self, parts: &[io::IoSlice<'_>]) -> io::Result<usize> {
        if let Some(e) = self.closed_error(&self.lock()) {
            return Err(e);
        }
        let started = Instant::now();
        let none = Seg {
            addr: 0,
            lkey: 0,
            len: 0,
            src: Source::Staged(0),
        };
        let mut segs = [none; MAX_PARTS];
        let (mut used, mut staged, mut total) = (0usize, 0usize, 0usize);
        for part in parts.iter().filter(|p| !p.is_empty()).take(MAX_PARTS) {
            let seg = if let Some((lkey, start, id, caller)) = self.registered(part) {
                ZERO_COPY.fetch_add(part.len() as u64, Ordering::Relaxed);
                if caller {
                    LENT.fetch_add(part.len() as u64, Ordering::Relaxed);
                }
                Seg {
                    addr: part.as_ptr() as u64,
                    lkey,
                    len: part.len(),
                    src: Source::Pool(start, id),
                }
            } else {
                // Half the ring per call: what this call reserved can never
                // keep the rest of it from fitting once earlier writes end.
                let n = part.len().min(STAGING / 2 - staged);
                if n == 0 {
                    break;
                }
                let (at, base) = self.stage(n)?;
                // SAFETY: `stage` handed `at..at+n` of the staging buffer to
                // this writer alone (the only one): no write in flight reads
                // it until it is given back, after the write posted from it
                // below completes.
                unsafe { self.staging.0.write_at(at, &part[..n]) };
                COPIED.fetch_add(n as u64, Ordering::Relaxed);
                staged += n;
                Seg {
                    addr: self.staging.0.addr() + at as u64,
                    lkey: self.staging.0.lkey(),
                    len: n,
                    src: Source::Staged(base),
                }
            };
            segs[used] = seg;
            used += 1;
            total += seg.len;
            if seg.len < part.len() {
                break;
            }
        }
        if used == 0 {
            return Ok(0);
        }
        self.post(&segs[..used])?;
        tracing::trace!(
            peer = %self.peer,
            bytes = total,
            parts = used,
            posted_ms = started.elapsed().as_secs_f64() * 1e3,
            "rdma write posted"
        );
        Ok(total)
    }

    /// Hands out `n` (≤ [`STAGING`]) contiguous bytes of the staging ring,
    /// waiting for writes in flight to give room back: (offset in the
    /// buffer, position counted from the start).
    fn stage(&self, n: usize) -> io::Result<(usize, u64)> {
        let cap = STAGING as u64;
        let mut g = self.lock();
        loop {
            if g.stage_head == g.stage_tail {
                // Nothing in flight reads it: start again at offset 0.
                let next = g.stage_head.next_multiple_of(cap);
                g.stage_head = next;
                g.stage_tail = next;
            }
            let at = g.stage_head % cap;
            // Bytes skipped to the end when `n` does not fit before it.
            let skip = if at + n as u64 > cap { cap - at } else { 0 };
            if cap - (g.stage_head - g.stage_tail) >= skip + n as u64 {
                g.stage_head += skip;
                let base = g.stage_head;
                g.stage_head += n as u64;
                return Ok(((base % cap) as usize, base));
            }
            if let Some(e) = self.closed_error(&g) {
                return Err(e);
            }
            g = self.wait(g);
        }
    }

    /// Posts `segs` in order into the peer's ring as WRITEs WITH IMM of at
    /// most [`MAX_MSG`] and [`MAX_SGE`] gather entries, each inside the ring
    /// space the peer gave back as credit, waiting for credit or for a free
    /// slot of [`MAX_INFLIGHT`] as needed. Each write is recorded in flight
    /// with what it reads (its pool allocations held until it completes).
    fn post(&self, segs: &[Seg]) -> io::Result<()> {
        let cap = u64::from(self.remote.ring_len);
        let mut g = self.lock();
        // The next byte to post: segment `i`, offset `off` in it.
        let (mut i, mut off) = (0usize, 0usize);
        while i < segs.len() {
            let free = cap - (g.head - g.credit);
            if free == 0 || g.flight.len() as u64 >= MAX_INFLIGHT {
                if let Some(e) = self.closed_error(&g) {
                    return Err(e);
                }
                g = self.wait(g);
                continue;
            }
            let at = g.head % cap;
            let room = free.min(cap - at).min(MAX_MSG as u64) as usize;
            let mut local = [Local {
                addr: 0,
                len: 0,
                lkey: 0,
            }; MAX_SGE];
            let mut flight = Flight {
                wr: g.data_posted,
                holds: [(0, 0); MAX_SGE],
                held: 0,
                staged_to: None,
            };
            let (mut n, mut k) = (0usize, 0usize);
            while i < segs.len() && n < MAX_SGE && k < room {
                let s = segs[i];
                let take = (s.len - off).min(room - k);
                local[n] = Local {
                    addr: s.addr + off as u64,
                    len: take as u32,
                    lkey: s.lkey,
                };
                match s.src {
                    Source::Pool(start, id) => {
                        if !stable::hold(start, id) {
                            drop(g);
                            flight.release();
                            let e = RdmaError::Setup(format!(
                                "{}: send buffer at {start:#x} was freed while being sent",
                                self.peer
                            ));
                            self.fail(e.clone());
                            return Err(e.into_io());
                        }
                        flight.holds[flight.held] = (start, id);
                        flight.held += 1;
                    }
                    Source::Staged(base) => {
                        flight.staged_to = Some(base + (off + take) as u64);
                    }
                }
                n += 1;
                k += take;
                off += take;
                if off == s.len {
                    i += 1;
                    off = 0;
                }
            }
            // SAFETY: every gathered range lies in a caller's pool
            // allocation, held in `stable` until this write completes (the
            // pool neither reuses nor frees it before), or in staging bytes
            // handed to this write until it completes; either way the bytes
            // stay valid and unchanged while the device reads them. The
            // remote range `at..at+k` lies in the peer's ring, inside the
            // space it gave back as credit, and does not wrap.
            let posted = unsafe {
                self.ep.post_write_imm(
                    flight.wr | DATA,
                    &local[..n],
                    self.remote.ring_addr + at,
                    self.remote.rkey,
                    Imm::Data(k as u32).encode(),
                )
            };
            if let Err(e) = posted {
                drop(g);
                flight.release();
                self.fail(e.clone());
                return Err(e.into_io());
            }
            g.flight.push_back(flight);
            g.data_posted += 1;
            g.head += k as u64;
        }
        Ok(())
    }

    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let cap = self.ring.0.len() as u64;
        let mut g = self.lock();
        while g.consumed == g.arrived {
            if g.fin {
                return Ok(0);
            }
            if let Some(e) = &g.error {
                return Err(e.clone().into_io());
            }
            if self.closed.load(Ordering::Acquire) {
                return Ok(0);
            }
            g = self.wait_giving_credit(g)?;
        }
        let start = g.consumed;
        let at = start % cap;
        let n = (g.arrived - start).min(buf.len() as u64).min(cap - at) as usize;
        // Claimed before the lock is dropped: a frame handed out in place
        // meanwhile (same reader, so not now) could not take these bytes.
        g.consumed += n as u64;
        drop(g);
        // SAFETY: `[at, at+n)` holds bytes whose WRITE WITH IMM completed
        // (counted in `arrived`); the peer does not write there again until
        // this range comes back as credit below.
        unsafe { self.ring.0.read_at(at as usize, &mut buf[..n]) };
        READ_COPIED.fetch_add(n as u64, Ordering::Relaxed);
        let mut g = self.lock();
        self.give_back(&mut g, start, start + n as u64)?;
        Ok(n)
    }

    /// Hands out the next `len` bytes of the stream where they lie in the
    /// ring ([`RingBytes`]), once all of them arrived. `None` for what must
    /// be read by copying: nothing, more than half the ring (it could never
    /// arrive beside what is handed out already), or a stream that ends first.
    fn take_in_place(self: &Arc<Self>, len: usize) -> io::Result<Option<RingBytes>> {
        let cap = self.ring.0.len() as u64;
        if len == 0 || len as u64 > cap / 2 {
            return Ok(None);
        }
        let mut g = self.lock();
        while g.arrived - g.consumed < len as u64 {
            if let Some(e) = &g.error {
                return Err(e.clone().into_io());
            }
            if g.fin || self.closed.load(Ordering::Acquire) {
                return Ok(None);
            }
            g = self.wait_giving_credit(g)?;
        }
        let start = g.consumed;
        let Some(ptr) = self.ring.0.span((start % cap) as usize, len) else {
            return Ok(None);
        };
        g.consumed += len as u64;
        drop(g);
        IN_PLACE.fetch_add(len as u64, Ordering::Relaxed);
        Ok(Some(RingBytes {
            shared: self.clone(),
            start,
            ptr,
            len,
        }))
    }

    /// `[start, end)` of the stream came back: credit for the peer once the
    /// returned prefix grew by a quarter ring or covers all that arrived.
    fn give_back(&self, g: &mut State, start: u64, end: u64) -> io::Result<()> {
        g.unreported += g.returns.give(start, end);
        let cap = self.ring.0.len() as u64;
        if g.unreported >= cap / 4 || g.returns.freed() == g.arrived {
            self.send_credit(g)?;
        }
        Ok(())
    }

    /// Sends what came back as credit, unless the credits in flight are at
    /// their limit (then a later return or the waiting reader sends it).
    fn send_credit(&self, g: &mut State) -> io::Result<()> {
        if g.unreported == 0 || g.ctl_posted - g.ctl_done >= MAX_CREDITS_INFLIGHT {
            return Ok(());
        }
        if g.error.is_some() || self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let credit = g.unreported as u32;
        if let Err(e) = self.send_ctl(g, Imm::Credit(credit)) {
            // The caller holds the state's lock: `fail` would take it again.
            self.fail_locked(g, e.clone());
            return Err(e.into_io());
        }
        g.unreported = 0;
        Ok(())
    }

    /// Waits for the peer (more bytes, a credit completion) after giving it
    /// every byte that came back: it may be waiting for that very credit.
    fn wait_giving_credit<'a>(
        &'a self,
        mut g: MutexGuard<'a, State>,
    ) -> io::Result<MutexGuard<'a, State>> {
        self.send_credit(&mut g)?;
        Ok(self.wait(g))
    }
}

/// Received bytes lent to the engine where they lie in the receive ring
/// (a frame's payload read in place): the peer may not write over them
/// until this is dropped, which gives them back as credit.
struct RingBytes {
    shared: Arc<Shared>,
    /// Stream position of the first byte.
    start: u64,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the bytes are this value's alone (no credit covers them until it
// drops), and the ring they lie in lives as long as `shared`; moving the
// claim to another thread changes neither.
unsafe impl Send for RingBytes {}

impl std::fmt::Debug for RingBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RingBytes({} at {})", self.len, self.start)
    }
}

impl Borrowed for RingBytes {
    fn bytes(&self) -> &[u8] {
        // SAFETY: the `len` bytes at `ptr` (one run through the ring's second
        // mapping) arrived (their WRITE WITH IMM completed) and no credit
        // covers them while this value lives, so the peer does not write
        // them; the mapping lives as long as `shared`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for RingBytes {
    fn drop(&mut self) {
        let s = &self.shared;
        let mut g = s.lock();
        // An error here failed the connection already; the reader reports it.
        let _ = s.give_back(&mut g, self.start, self.start + self.len as u64);
        drop(g);
        s.cv.notify_all();
    }
}

/// A connected RDMA byte stream to one peer.
pub struct RdmaTransport {
    shared: Arc<Shared>,
}

impl RdmaTransport {
    /// Proves the path both ways before the connection is used: sends a
    /// hello and waits until the peer acknowledged it (its QP is ready to
    /// receive) and its own hello arrived (ours is, and so is its sender).
    /// Until then a write could reach a peer QP that is not yet at RTR,
    /// which drops it silently and leaves the retry to the ACK timeout.
    /// Polls the CQ itself: the progress thread starts only at `split`.
    pub fn handshake(&self, timeout: Duration) -> Result<(), RdmaError> {
        let s = &self.shared;
        s.send_ctl(&mut s.lock(), Imm::Hello)?;
        let deadline = Instant::now() + timeout;
        let mut got = Vec::with_capacity(16);
        loop {
            {
                let g = s.lock();
                if let Some(e) = &g.error {
                    return Err(e.clone());
                }
                if g.hello && g.ctl_done == g.ctl_posted {
                    return Ok(());
                }
            }
            got.clear();
            s.ep.poll(&mut got, 16)?;
            got.iter().for_each(|c| s.handle(c));
            if got.is_empty() {
                if Instant::now() >= deadline {
                    let g = s.lock();
                    return Err(RdmaError::Setup(format!(
                        "{}: no hello over the queue pair within {timeout:?} (ours {}, theirs {})",
                        s.peer,
                        if g.ctl_done == g.ctl_posted {
                            "acknowledged"
                        } else {
                            "not acknowledged"
                        },
                        if g.hello { "arrived" } else { "did not arrive" },
                    )));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// The address of the registration that would carry a send of `buf`
    /// (`None`: it would be copied): the zero-copy check of the tests.
    pub fn registered_start(&self, buf: &[u8]) -> Option<usize> {
        self.shared.registered(buf).map(|(_, start, _, _)| start)
    }
}

struct Half(Arc<Shared>);

impl Drop for Half {
    fn drop(&mut self) {
        self.0.halves.fetch_sub(1, Ordering::AcqRel);
        self.0.cv.notify_all();
    }
}

impl Read for Half {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read_some(buf)
    }
}

impl StreamRead for Half {
    fn take_in_place(&mut self, len: usize) -> io::Result<Option<PooledBuf>> {
        let got = self.0.take_in_place(len)?;
        Ok(got.map(|b| PooledBuf::borrowed(Box::new(b))))
    }
}

impl Write for Half {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write_parts(&[io::IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.write_parts(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct RdmaCloser(Arc<Shared>);

impl Closer for RdmaCloser {
    fn close(&self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.ep.break_off();
        self.0.cv.notify_all();
    }
    fn finish(&self) {
        let mut g = self.0.lock();
        if g.error.is_none() && !self.0.closed.load(Ordering::Acquire) {
            // Ordered after every earlier write on the QP (RC).
            let _ = self.0.send_ctl(&mut g, Imm::Fin);
        }
    }
}

impl Transport for RdmaTransport {
    fn describe(&self) -> String {
        format!(
            "rdma {} qp {} to {}",
            self.shared.dev.name,
            self.shared.ep.qpn(),
            self.shared.peer
        )
    }

    fn split(self: Box<Self>) -> io::Result<(Reader, Writer, Arc<dyn Closer>)> {
        let s = self.shared.clone();
        std::thread::Builder::new()
            .name("cw-rdma-cq".into())
            .spawn(move || s.progress())?;
        Ok((
            Box::new(Half(self.shared.clone())),
            Box::new(Half(self.shared.clone())),
            Arc::new(RdmaCloser(self.shared)),
        ))
    }
}
