//! The dispatcher of one striped peer: the engine queues bulk data frames
//! here; a path gets the next frame while its bytes in flight stay under its
//! share of the in-flight budget. Shares are [`Weights`] over per-path
//! [`PathEstimator`]s fed by `TCP_INFO` every [`TICK`]; a path that stops
//! acknowledging goes Down and what it held unacknowledged is queued again.
//! The last frames of an operation are cut across the paths so that their
//! pieces land together ([`tail`]).
//!
//! Bytes in flight on a connection = frames handed to its writer and not yet
//! written + the socket's unacknowledged bytes (`TIOCOUTQ`). A frame is
//! known delivered (its copy dropped) once the bytes written after it exceed
//! the socket's unacknowledged bytes.

use std::collections::VecDeque;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use causeway_core::paths::{EstimatorConfig, PathEstimator, PathState, Weights, WeightsConfig};

use super::{sock, tail};
use crate::error::Rank;
use crate::links::Out;
use crate::pool::PooledBuf;
use crate::wire::{Codec, FrameHeader, HEADER_LEN};

/// How often the monitor samples the sockets, updates the weights and dispatches.
pub(crate) const TICK: Duration = Duration::from_millis(5);
/// A path with bytes in flight and no ACK for this long is Down.
pub(crate) const DOWN_AFTER: Duration = Duration::from_millis(400);
/// In-flight allowance of a path nothing is known about yet.
const INITIAL_CAP: u64 = 8 << 20;
/// Smallest budget of all paths together: several chunks per connection, so
/// a path never waits chunk by chunk (shared by weight, like the budget).
const MIN_BUDGET: f64 = 16.0 * 1024.0 * 1024.0;
/// Smallest in-flight allowance of a path with a weight.
const MIN_CAP: u64 = 1 << 20;
/// The weights are planned for at least this many queued bytes.
const PLAN_MIN_BYTES: f64 = 16.0 * 1024.0 * 1024.0;
/// The budget is this many bandwidth-delay products of all paths.
const BUDGET_BDPS: f64 = 2.0;

/// One striped connection, as the links module hands it over.
pub(crate) struct StripeConn {
    pub path: usize,
    pub tx: Sender<Out>,
    /// A handle on the socket for `TCP_INFO` / `TIOCOUTQ`.
    pub sock: TcpStream,
    /// Data bytes (header + payload) its writer has written and flushed.
    pub written: Arc<AtomicU64>,
    /// Aborts the connection (at close, when its path is down).
    pub closer: Arc<dyn crate::transport::Closer>,
}

/// A frame waiting for a connection: header, payload, among its operation's
/// last frames, when it was queued.
type Item = (FrameHeader, PooledBuf, bool, Option<Instant>);

struct Retained {
    /// Dispatch position of the frame's last byte on its connection.
    end: u64,
    h: FrameHeader,
    copy: Vec<u8>,
}

#[derive(Default)]
struct ConnState {
    dispatched: u64,
    retained: VecDeque<Retained>,
    /// Bytes in flight at the last sample.
    in_flight: u64,
    /// Since when the socket has held unacknowledged bytes (ns), if it does.
    busy_since: Option<u64>,
}

struct PathSt {
    est: PathEstimator,
    seq: u64,
    down: bool,
    /// Share of the budget, bytes.
    cap: u64,
    /// It had a usable estimate at the last sample.
    known: bool,
    /// Its bandwidth estimate (bytes/s) and half its minimum RTT (ns).
    rate: f64,
    one_way_ns: f64,
}

struct State {
    pending: VecDeque<Item>,
    conns: Vec<ConnState>,
    paths: Vec<PathSt>,
    weights: Weights,
    /// Dispatch everything at once (closing, or an Abort must follow the data).
    draining: bool,
    resent_frames: u64,
    resent_bytes: u64,
    /// Tail frames cut into pieces on several paths.
    split_frames: u64,
}

struct Shared {
    peer: Rank,
    conns: Vec<StripeConn>,
    state: Mutex<State>,
    wake: Condvar,
    stop: AtomicBool,
    epoch: Instant,
}

/// Counters of one striped peer (tests, benchmarks).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StripeStats {
    /// Data bytes handed to each path's connections.
    pub bytes_per_path: Vec<u64>,
    pub weights: Vec<f64>,
    pub down: Vec<bool>,
    pub resent_frames: u64,
    pub resent_bytes: u64,
    /// Frames of operations' tails cut across the paths ([`tail`]).
    pub split_frames: u64,
}

/// The striping of one peer's bulk data over its paths.
pub(crate) struct Stripe {
    shared: Arc<Shared>,
    monitor: Option<thread::JoinHandle<()>>,
}

impl Stripe {
    pub fn start(peer: Rank, conns: Vec<StripeConn>) -> std::io::Result<Stripe> {
        let paths = conns.iter().map(|c| c.path + 1).max().unwrap_or(0);
        let cfg = EstimatorConfig {
            down_after_ns: DOWN_AFTER.as_nanos() as u64,
            ..EstimatorConfig::default()
        };
        let state = State {
            pending: VecDeque::new(),
            conns: conns.iter().map(|_| ConnState::default()).collect(),
            paths: (0..paths)
                .map(|_| PathSt {
                    est: PathEstimator::new(cfg.clone()),
                    seq: 0,
                    down: false,
                    cap: INITIAL_CAP,
                    known: false,
                    rate: 0.0,
                    one_way_ns: 0.0,
                })
                .collect(),
            weights: Weights::new(paths, WeightsConfig::default()),
            draining: false,
            resent_frames: 0,
            resent_bytes: 0,
            split_frames: 0,
        };
        let shared = Arc::new(Shared {
            peer,
            conns,
            state: Mutex::new(state),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            epoch: Instant::now(),
        });
        let s2 = shared.clone();
        let monitor = thread::Builder::new()
            .name(format!("cw-stripe-{peer}"))
            .spawn(move || monitor(&s2))?;
        Ok(Stripe {
            shared,
            monitor: Some(monitor),
        })
    }

    /// Queues a data frame (`tail`: among its operation's last frames);
    /// false once every connection is gone.
    pub fn send(&self, h: FrameHeader, p: PooledBuf, tail: bool, queued: Option<Instant>) -> bool {
        let Ok(mut st) = self.shared.state.lock() else {
            return false;
        };
        st.pending.push_back((h, p, tail, queued));
        dispatch(&self.shared, &mut st)
    }

    /// Hands every queued frame to a connection now (before a control frame
    /// that must follow them, or the close).
    pub fn drain(&self) {
        if let Ok(mut st) = self.shared.state.lock() {
            st.draining = true;
            dispatch(&self.shared, &mut st);
        }
    }

    /// Before the close: drains, and aborts the connections of a path that
    /// is down (their writers may be blocked on it; the data they hold was
    /// sent again on the others), so closing does not wait for them.
    pub fn close(&self) {
        self.drain();
        let st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        for c in &self.shared.conns {
            if st.paths[c.path].down {
                c.closer.close();
            }
        }
    }

    pub fn stats(&self) -> StripeStats {
        let st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut bytes = vec![0u64; st.paths.len()];
        for (c, s) in self.shared.conns.iter().zip(&st.conns) {
            bytes[c.path] += s.dispatched;
        }
        StripeStats {
            bytes_per_path: bytes,
            weights: st.weights.get().to_vec(),
            down: st.paths.iter().map(|p| p.down).collect(),
            resent_frames: st.resent_frames,
            resent_bytes: st.resent_bytes,
            split_frames: st.split_frames,
        }
    }
}

impl Drop for Stripe {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.wake.notify_all();
        if let Some(m) = self.monitor.take() {
            let _ = m.join();
        }
    }
}

fn wire_len(p: &[u8]) -> u64 {
    (HEADER_LEN + p.len()) as u64
}

/// Hands pending frames to connections with room (an operation's last
/// frames: in pieces across the paths, [`tail`]); false when a send failed
/// on every connection (the peer is gone).
fn dispatch(sh: &Shared, st: &mut State) -> bool {
    let mut ok = true;
    while !st.pending.is_empty() {
        if let Some(pieces) = tail_pieces(sh, st) {
            let Some((h, p, _, q)) = st.pending.pop_front() else {
                break;
            };
            if let [one] = pieces.as_slice() {
                ok &= hand(sh, st, one.0, h, p, q);
                continue;
            }
            st.split_frames += 1;
            super::TOTALS.split_frames.fetch_add(1, Ordering::Relaxed);
            for (c, piece) in pieces {
                let (at, n) = (piece.start as usize, piece.len as usize);
                let mut ph = h;
                ph.offset += piece.start;
                ph.len = piece.len as u32;
                let part = PooledBuf::unpooled(p[at..at + n].to_vec());
                ok &= hand(sh, st, c, ph, part, q);
            }
            continue;
        }
        let Some(c) = pick(sh, st) else { break };
        let Some((h, p, _, q)) = st.pending.pop_front() else {
            break;
        };
        ok &= hand(sh, st, c, h, p, q);
    }
    ok
}

/// Gives one frame to connection `c`: counted, retained until acknowledged
/// (not while draining), queued on its writer. False if the writer is gone.
fn hand(
    sh: &Shared,
    st: &mut State,
    c: usize,
    h: FrameHeader,
    p: PooledBuf,
    q: Option<Instant>,
) -> bool {
    let len = wire_len(&p);
    let path = sh.conns[c].path;
    if let Some(b) = super::TOTALS.bytes.get(path) {
        b.fetch_add(len, Ordering::Relaxed);
    }
    let cs = &mut st.conns[c];
    cs.dispatched += len;
    cs.in_flight += len;
    if !st.draining {
        cs.retained.push_back(Retained {
            end: cs.dispatched,
            h,
            copy: p.to_vec(),
        });
    }
    sh.conns[c].tx.send(Out::Frame(h, p.into(), q)).is_ok()
}

/// When the next pending frame is among its operation's last and its
/// payload is the elements themselves (no WAN codec): the pieces to cut it
/// into, each with its connection (one piece: the whole frame). `None`
/// otherwise (fewer than two measured paths, draining, a small frame): the
/// frame goes by [`pick`].
fn tail_pieces(sh: &Shared, st: &State) -> Option<Vec<(usize, tail::Piece)>> {
    let (h, p, is_tail, _) = st.pending.front()?;
    let call = h.call?;
    if !is_tail || st.draining || call.codec != Codec::Raw || (p.len() as u64) < 2 * tail::MIN_PIECE
    {
        return None;
    }
    // Per connection, what it has not sent yet: queued for its writer, and
    // in the socket not yet sent (read now, only for a frame to cut).
    let unsent: Vec<u64> = sh
        .conns
        .iter()
        .zip(&st.conns)
        .map(|(c, s)| {
            let written = c.written.load(Ordering::Acquire);
            s.dispatched.saturating_sub(written) + sock::unsent(&c.sock).unwrap_or(0)
        })
        .collect();
    // Per usable path, its connection with the least not yet sent.
    let mut lanes = Vec::new();
    let mut conns = Vec::new();
    for (pi, ps) in st.paths.iter().enumerate() {
        if ps.down || !ps.known || ps.rate <= 0.0 {
            continue;
        }
        let on_path = || (0..sh.conns.len()).filter(move |&i| sh.conns[i].path == pi);
        let Some(c) = on_path().min_by_key(|&i| unsent[i]) else {
            continue;
        };
        // The path's rate shared by its connections with bytes to send.
        let busy = on_path().filter(|&i| i != c && unsent[i] > 0).count() + 1;
        let rate = ps.rate / busy as f64;
        lanes.push(tail::Lane {
            busy_ns: unsent[c] as f64 / rate * 1e9,
            rate,
            one_way_ns: ps.one_way_ns,
        });
        conns.push(c);
    }
    if lanes.len() < 2 {
        return None;
    }
    let align = call.dtype.size() as u64;
    let pieces = tail::split(&lanes, p.len() as u64, align);
    // They tile the payload (tail::split's tests); anything else goes whole.
    let tiled = pieces
        .iter()
        .try_fold(0u64, |at, x| (x.start == at).then_some(at + x.len));
    if tiled != Some(p.len() as u64) || pieces.iter().any(|x| x.lane >= conns.len()) {
        return None;
    }
    Some(pieces.into_iter().map(|x| (conns[x.lane], x)).collect())
}

/// The connection with the largest fraction of its share of its path's cap
/// still free (draining: the one with the least in flight). A fraction, not
/// bytes: a path whose cap is small (unknown yet, or slow) gets its share of a
/// burst from the start instead of only once the large caps are nearly full.
/// Equal fractions (idle connections, when frames come one at a time) go by
/// [`Candidate::before`].
fn pick(sh: &Shared, st: &State) -> Option<usize> {
    let per_path = |p: usize| sh.conns.iter().filter(|c| c.path == p).count().max(1) as u64;
    let up = |p: usize| !st.paths[p].down;
    let mut best: Option<(usize, Candidate)> = None;
    for (i, c) in sh.conns.iter().enumerate() {
        // Down paths take frames only when draining and every path is down.
        let usable = up(c.path) || (st.draining && st.paths.iter().all(|p| p.down));
        if !usable {
            continue;
        }
        let in_flight = st.conns[i].in_flight as f64;
        let cap = (st.paths[c.path].cap / per_path(c.path)) as f64;
        let free = if st.draining {
            -in_flight
        } else {
            if cap <= in_flight {
                continue;
            }
            1.0 - in_flight / cap
        };
        let cand = Candidate {
            free,
            unknown: !st.paths[c.path].known,
            cap,
            dispatched: st.conns[i].dispatched,
        };
        if best.as_ref().is_none_or(|(_, b)| cand.before(b)) {
            best = Some((i, cand));
        }
    }
    best.map(|(i, _)| i)
}

/// What [`pick`] compares of a connection.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    /// Fraction of its cap free (draining: minus its bytes in flight).
    free: f64,
    /// Its path has no estimate yet.
    unknown: bool,
    /// Its share of its path's cap, bytes.
    cap: f64,
    /// Bytes handed to it so far.
    dispatched: u64,
}

impl Candidate {
    /// More free first. On a tie: a path nothing is known about (it must
    /// carry something to be measured: frames that come one at a time to
    /// idle connections would otherwise all take the first one), then the
    /// larger cap (the path with the larger weight), then the connection
    /// that has carried less.
    fn before(&self, other: &Candidate) -> bool {
        const SAME: f64 = 1e-9;
        if (self.free - other.free).abs() > SAME {
            return self.free > other.free;
        }
        if self.unknown != other.unknown {
            return self.unknown;
        }
        if (self.cap - other.cap).abs() > SAME * self.cap.max(other.cap) {
            return self.cap > other.cap;
        }
        self.dispatched < other.dispatched
    }
}

fn monitor(sh: &Shared) {
    let mut last_sample = Instant::now() - Duration::from_secs(1);
    loop {
        let st = sh.state.lock().unwrap_or_else(|e| e.into_inner());
        let (mut st, _) = sh
            .wake
            .wait_timeout(st, TICK)
            .unwrap_or_else(|e| e.into_inner());
        if sh.stop.load(Ordering::Relaxed) {
            return;
        }
        let now_i = Instant::now();
        let sampled = now_i.duration_since(last_sample) >= TICK * 4;
        if sampled {
            last_sample = now_i;
        }
        let now = now_i.duration_since(sh.epoch).as_nanos() as u64;
        sample(sh, &mut st, now, sampled);
        dispatch(sh, &mut st);
    }
}

/// Reads every socket, prunes delivered copies, feeds the estimators (when
/// `feed`), fails over a path that went Down and recomputes the caps.
fn sample(sh: &Shared, st: &mut State, now: u64, feed: bool) {
    let paths = st.paths.len();
    // Per path: (bytes in flight, any ACK recently while in flight, delivery rate sum,
    // all samples app-limited, max RTT µs).
    let mut agg = vec![(0u64, false, 0u64, true, 0u32); paths];
    // Per path: a connection stalled (bytes unacknowledged for DOWN_AFTER and no
    // ACK in that time), and whether every connection is healthy again.
    let mut stalled = vec![false; paths];
    let mut healthy = vec![true; paths];
    let down_ms = DOWN_AFTER.as_millis() as u32;
    for (i, c) in sh.conns.iter().enumerate() {
        let written = c.written.load(Ordering::Acquire);
        let outq = sock::unacked(&c.sock).unwrap_or(0);
        let cs = &mut st.conns[i];
        let queued = cs.dispatched.saturating_sub(written);
        cs.in_flight = queued + outq;
        let acked = written.saturating_sub(outq);
        cs.busy_since = match (outq > 0, cs.busy_since) {
            (false, _) => None,
            (true, None) => Some(now),
            (true, b) => b,
        };
        while cs.retained.front().is_some_and(|r| r.end <= acked) {
            cs.retained.pop_front();
        }
        if !feed {
            continue;
        }
        let Ok(info) = crate::transport::tcp::tcp_info(&c.sock) else {
            continue;
        };
        let busy_for = cs.busy_since.map_or(0, |b| now.saturating_sub(b));
        if busy_for >= DOWN_AFTER.as_nanos() as u64 && info.last_ack_recv_ms >= down_ms {
            stalled[c.path] = true;
        }
        if outq > 0 && info.last_ack_recv_ms >= down_ms / 4 {
            healthy[c.path] = false;
        }
        let a = &mut agg[c.path];
        a.0 += cs.in_flight;
        if outq > 0 && info.last_ack_recv_ms < (info.rtt_us / 1000).max(20) {
            a.1 = true;
        }
        a.2 += info.delivery_rate;
        a.3 &= info.app_limited;
        a.4 = a.4.max(info.rtt_us);
    }
    if !feed {
        return;
    }
    let mut ests = Vec::with_capacity(paths);
    for (p, &(in_flight, acked, rate, app_limited, rtt_us)) in agg.iter().enumerate() {
        let ps = &mut st.paths[p];
        // The kernel's RTT of an acknowledged flight is the probe reply: the
        // estimator keeps RTT and bandwidth; up/down is decided from the
        // sockets below (an idle path sends nothing to be acknowledged).
        if in_flight > 0 && acked && rtt_us > 0 {
            ps.seq += 1;
            let rtt = u64::from(rtt_us) * 1000;
            ps.est.probe_sent(ps.seq, now.saturating_sub(rtt));
            ps.est.probe_reply(ps.seq, now);
        }
        if rate > 0 {
            ps.est.delivery_sample(rate as f64, app_limited, now);
        }
        let mut e = ps.est.estimate(now);
        if ps.down && !stalled[p] && healthy[p] {
            tracing::info!(peer = sh.peer, path = p, "WAN path is back");
            super::TOTALS.path_up.fetch_add(1, Ordering::Relaxed);
            ps.down = false;
        }
        e.state = if stalled[p] || ps.down {
            PathState::Down { replies: 0 }
        } else if e.srtt_ns > 0.0 {
            PathState::Up
        } else {
            PathState::Unknown
        };
        ests.push(e);
    }
    // Fail over what a dead path holds.
    for (p, e) in ests.iter().enumerate() {
        let dead = matches!(e.state, PathState::Down { .. });
        if dead && !st.paths[p].down {
            st.paths[p].down = true;
            let mut again = Vec::new();
            for (i, c) in sh.conns.iter().enumerate() {
                if c.path == p {
                    again.extend(st.conns[i].retained.drain(..));
                }
            }
            again.sort_by_key(|r| (r.h.op, r.h.lane, r.h.step, r.h.offset));
            let bytes: u64 = again.iter().map(|r| wire_len(&r.copy)).sum();
            tracing::warn!(
                peer = sh.peer,
                path = p,
                frames = again.len(),
                bytes,
                "WAN path stopped acknowledging; resending its chunks on the others"
            );
            st.resent_frames += again.len() as u64;
            st.resent_bytes += bytes;
            let t = &super::TOTALS;
            t.path_down.fetch_add(1, Ordering::Relaxed);
            t.resent_frames
                .fetch_add(again.len() as u64, Ordering::Relaxed);
            t.resent_bytes.fetch_add(bytes, Ordering::Relaxed);
            for r in again.into_iter().rev() {
                // Never cut again: the receiver may have part of it, and a
                // duplicate is dropped only as the same (offset, length).
                st.pending
                    .push_front((r.h, PooledBuf::unpooled(r.copy), false, None));
            }
        }
    }
    // Caps: the budget (a few BDPs of every known path) split by weight.
    let queued: u64 = st
        .pending
        .iter()
        .map(|(_, p, _, _)| wire_len(p))
        .sum::<u64>()
        + st.conns.iter().map(|c| c.in_flight).sum::<u64>();
    // Planned for the bulk: at the end of an op only a few chunks are queued,
    // and their optimum (everything on the quickest path) would swing the
    // weights, and with them the split of the next op's first budget.
    let w = st
        .weights
        .update(&ests, (queued as f64).max(PLAN_MIN_BYTES))
        .to_vec();
    for (t, w) in super::TOTALS.weights.iter().zip(&w) {
        t.store(w.to_bits(), Ordering::Relaxed);
    }
    let budget: f64 = ests
        .iter()
        .filter(|e| e.is_usable())
        .map(|e| BUDGET_BDPS * e.bw_bytes_per_s * e.srtt_ns.max(e.min_rtt_ns as f64) / 1e9)
        .sum::<f64>()
        .max(MIN_BUDGET);
    for (p, e) in ests.iter().enumerate() {
        let ps = &mut st.paths[p];
        ps.known = e.is_usable();
        ps.rate = e.bw_bytes_per_s;
        ps.one_way_ns = e.min_rtt_ns as f64 / 2.0;
        ps.cap = if ps.down {
            0
        } else if e.is_usable() {
            ((w[p] * budget) as u64).max(if w[p] > 0.0 { MIN_CAP } else { 0 })
        } else {
            // Unknown (never carried data, or came back): room to be measured.
            INITIAL_CAP
        };
    }
}

#[cfg(test)]
mod tests {
    use super::Candidate;

    fn c(free: f64, unknown: bool, cap: f64, dispatched: u64) -> Candidate {
        Candidate {
            free,
            unknown,
            cap,
            dispatched,
        }
    }

    /// More free room wins whatever else differs.
    #[test]
    fn the_freer_connection_goes_first() {
        let a = c(0.9, false, 1e6, 0);
        let b = c(0.5, true, 8e6, 0);
        assert!(a.before(&b));
        assert!(!b.before(&a));
    }

    /// Idle connections (frames arriving one at a time): a path not measured
    /// yet first, so it gets measured; then the larger cap; then the one that
    /// carried less, so equal paths alternate.
    #[test]
    fn ties_go_to_an_unknown_path_then_the_larger_cap_then_the_less_used() {
        let known = c(1.0, false, 8e6, 0);
        let unknown = c(1.0, true, 8e6, 5 << 20);
        assert!(unknown.before(&known));
        assert!(!known.before(&unknown));
        let big = c(1.0, false, 12e6, 9 << 20);
        let small = c(1.0, false, 4e6, 0);
        assert!(big.before(&small));
        let used = c(1.0, false, 8e6, 3 << 20);
        let fresh = c(1.0, false, 8e6, 1 << 20);
        assert!(fresh.before(&used));
        assert!(!used.before(&fresh));
        assert!(!fresh.before(&fresh), "a connection is not before itself");
    }

    /// Draining compares minus the bytes in flight: the emptiest first.
    #[test]
    fn draining_prefers_the_least_in_flight() {
        let a = c(-1000.0, false, 0.0, 0);
        let b = c(-5000.0, true, 0.0, 0);
        assert!(a.before(&b));
    }
}
