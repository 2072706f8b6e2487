//! Per-rank timeline (`CAUSEWAY_TRACE=DIR`): every operation and every
//! chunk as a span, written when the communicator is dropped to
//! `DIR/rank-<r>.json` (`DIR/epoch-<e>-rank-<r>.json` after a shrink or
//! grow) in the Chrome trace event format (Perfetto, `chrome://tracing`).
//! `cargo xtask trace DIR` merges the ranks' files onto one time base.
//!
//! | span | `tid` | from | to |
//! |---|---|---|---|
//! | `op` (`allreduce`, …, `plan` for start-up probes) | 0 | the engine starts it | its result |
//! | `send` (a chunk to `peer`) | 1 + peer | the engine queues the frame | its writer thread has written it (to the socket or its buffer) |
//! | `recv` (a chunk from `peer`) | 1 + peer | its reader thread has read the whole frame | the engine has reduced or copied it |
//! | `encode` / `decode` (a WAN codec's work on a chunk to / from `peer`, `bytes` encoded) | 0 | the engine starts it | it is done (for a lossy codec, encode includes the sender's own decode) |
//!
//! A chunk is named by (`op`, `lane`, `step`, `offset`) on both sides. Times
//! are this host's CLOCK_TAI (the agent's timescale; CLOCK_REALTIME without
//! the `peer-clock` feature), ns in `args.start_ns`/`args.end_ns`, µs in
//! `ts`/`dur`: monotonic instants shifted by one (CLOCK_TAI, instant) pair
//! read at start, `anchor_error_ns` the time that read took. The metadata
//! lists, per peer rank, the offset of its clock from this one (peer −
//! local, ns) and its error bound: 0 and 0 on the same host (one clock),
//! the agent's estimate for the peer's address when `CAUSEWAY_CLOCK_MAP`
//! ([`Options::clock_map`](crate::Options::clock_map)) names its map,
//! otherwise 0 with the bound `null` (unknown).
//! At most [`MAX_SPANS`] spans are kept; later ones are counted as dropped.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::error::Rank;

/// Spans kept per rank (about 100 bytes each in memory).
pub const MAX_SPANS: usize = 1 << 20;

/// What a span covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Op {
        name: &'static str,
        seq: u64,
        bytes: u64,
        ok: bool,
    },
    Send(Chunk),
    Recv(Chunk),
    /// The engine encoding a chunk for another domain (`bytes`: encoded).
    Encode(Chunk),
    /// The engine decoding a chunk from another domain (`bytes`: encoded).
    Decode(Chunk),
}

/// One chunk of operation `seq` to or from `peer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub seq: u64,
    pub peer: Rank,
    pub lane: usize,
    pub step: usize,
    pub offset: u64,
    pub bytes: usize,
}

#[derive(Debug, Clone, Copy)]
struct Span {
    kind: SpanKind,
    start: Instant,
    end: Instant,
}

/// The clock of one peer rank relative to this rank's.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerClockNote {
    pub rank: Rank,
    /// Peer clock − local clock, ns.
    pub offset_ns: f64,
    /// `None`: unknown.
    pub bound_ns: Option<f64>,
    /// `same_host`, `kernel`, `so_timestamping`, `userspace` (the agent's), or `none`.
    pub source: &'static str,
}

/// A rank's recorder.
#[derive(Debug)]
pub struct Tracer {
    rank: Rank,
    dir: PathBuf,
    anchor: Instant,
    anchor_ns: u64,
    anchor_error_ns: u64,
    spans: Mutex<Vec<Span>>,
    dropped: AtomicU64,
}

/// This host's clock, ns (CLOCK_TAI with `peer-clock`).
pub fn local_clock_ns() -> u64 {
    #[cfg(feature = "peer-clock")]
    if let Ok(t) = crate::peer_clock::local_tai_now() {
        return t;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Tracer {
    pub fn new(rank: Rank, dir: &Path) -> Self {
        let before = Instant::now();
        let anchor_ns = local_clock_ns();
        let after = Instant::now();
        let half = (after - before) / 2;
        Tracer {
            rank,
            dir: dir.to_path_buf(),
            anchor: before + half,
            anchor_ns,
            anchor_error_ns: u64::try_from(half.as_nanos()).unwrap_or(u64::MAX),
            spans: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
        }
    }

    /// `t` on the local clock, ns.
    pub fn ns(&self, t: Instant) -> u64 {
        let d = |a: Instant, b: Instant| u64::try_from((a - b).as_nanos()).unwrap_or(u64::MAX);
        if t >= self.anchor {
            self.anchor_ns.saturating_add(d(t, self.anchor))
        } else {
            self.anchor_ns.saturating_sub(d(self.anchor, t))
        }
    }

    pub fn record(&self, kind: SpanKind, start: Instant, end: Instant) {
        let Ok(mut s) = self.spans.lock() else { return };
        if s.len() < MAX_SPANS {
            s.push(Span { kind, start, end });
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The local clock halfway through the recorded spans (where the
    /// clock estimates are evaluated).
    pub fn middle_ns(&self) -> u64 {
        let s = self.spans.lock().map(|s| s.clone()).unwrap_or_default();
        let first = s.iter().map(|s| s.start).min().unwrap_or_else(Instant::now);
        let last = s.iter().map(|s| s.end).max().unwrap_or_else(Instant::now);
        self.ns(first) / 2 + self.ns(last) / 2
    }

    /// The trace as Chrome trace event JSON.
    pub fn to_json(&self, world: usize, peers: &[PeerClockNote]) -> String {
        let spans = self.spans.lock().map(|s| s.clone()).unwrap_or_default();
        let r = self.rank;
        let mut out = String::from("{\"traceEvents\":[\n");
        let _ = write!(
            out,
            "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{r},\"tid\":0,\"args\":{{\"name\":\"rank {r}\"}}}}"
        );
        for s in &spans {
            let (a, b) = (self.ns(s.start), self.ns(s.end).max(self.ns(s.start)));
            let (ts, dur) = (a as f64 / 1e3, (b - a) as f64 / 1e3);
            let (name, cat, tid, args) = match s.kind {
                SpanKind::Op {
                    name,
                    seq,
                    bytes,
                    ok,
                } => (
                    name,
                    "op",
                    0,
                    format!("\"op\":{seq},\"bytes\":{bytes},\"ok\":{ok}"),
                ),
                SpanKind::Send(c)
                | SpanKind::Recv(c)
                | SpanKind::Encode(c)
                | SpanKind::Decode(c) => {
                    let (name, cat, tid) = match s.kind {
                        SpanKind::Send(_) => ("send", "chunk", 1 + c.peer),
                        SpanKind::Recv(_) => ("recv", "chunk", 1 + c.peer),
                        SpanKind::Encode(_) => ("encode", "codec", 0),
                        _ => ("decode", "codec", 0),
                    };
                    (
                        name,
                        cat,
                        tid,
                        format!(
                            "\"op\":{},\"peer\":{},\"lane\":{},\"step\":{},\"offset\":{},\"bytes\":{}",
                            c.seq, c.peer, c.lane, c.step, c.offset, c.bytes
                        ),
                    )
                }
            };
            let _ = write!(
                out,
                ",\n{{\"name\":\"{name}\",\"cat\":\"{cat}\",\"ph\":\"X\",\"pid\":{r},\"tid\":{tid},\"ts\":{ts:.3},\"dur\":{dur:.3},\"args\":{{{args},\"start_ns\":{a},\"end_ns\":{b}}}}}"
            );
        }
        let notes: Vec<String> = peers
            .iter()
            .map(|p| {
                let bound = p.bound_ns.map_or("null".to_string(), |b| format!("{b:.1}"));
                format!(
                    "{{\"rank\":{},\"offset_ns\":{:.1},\"bound_ns\":{bound},\"source\":\"{}\"}}",
                    p.rank, p.offset_ns, p.source
                )
            })
            .collect();
        let _ = write!(
            out,
            "\n],\"displayTimeUnit\":\"ns\",\"metadata\":{{\"causeway_trace\":1,\"rank\":{r},\"world\":{world},\"clock\":\"{}\",\"anchor_error_ns\":{},\"dropped_spans\":{},\"peers\":[{}]}}}}\n",
            if cfg!(feature = "peer-clock") { "CLOCK_TAI" } else { "CLOCK_REALTIME" },
            self.anchor_error_ns,
            self.dropped.load(Ordering::Relaxed),
            notes.join(",")
        );
        out
    }

    /// Writes `DIR/rank-<r>.json` (`epoch-<e>-rank-<r>.json` for `epoch` > 0).
    pub fn write(
        &self,
        epoch: u64,
        world: usize,
        peers: &[PeerClockNote],
    ) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)?;
        let name = match epoch {
            0 => format!("rank-{}.json", self.rank),
            e => format!("epoch-{e}-rank-{}.json", self.rank),
        };
        let path = self.dir.join(name);
        std::fs::write(&path, self.to_json(world, peers))?;
        Ok(path)
    }
}

/// How every other rank's clock relates to `me`'s, evaluated at local
/// time `at_ns`: same host, the agent's estimate for the rank's address
/// (the pinned map at `clock_map`), or unknown.
pub fn clock_notes(
    topo: &crate::topology::Topology,
    me: Rank,
    addrs: &[std::net::SocketAddr],
    clock_map: Option<&Path>,
    at_ns: u64,
) -> Vec<PeerClockNote> {
    #[cfg(feature = "peer-clock")]
    let map = clock_map.and_then(|p| {
        crate::peer_clock::PeerClocks::open(p)
            .map_err(|e| tracing::warn!(error = %e, "trace: no clock estimates"))
            .ok()
    });
    (0..topo.world())
        .filter(|&q| q != me)
        .map(|q| {
            if topo.host_of(q) == topo.host_of(me) {
                return PeerClockNote {
                    rank: q,
                    offset_ns: 0.0,
                    bound_ns: Some(0.0),
                    source: "same_host",
                };
            }
            #[cfg(feature = "peer-clock")]
            if let (Some(m), Some(a)) = (&map, addrs.get(q)) {
                if let Ok(Some(r)) = m.get_at(a.ip(), at_ns) {
                    use crate::peer_clock::ClockSource as S;
                    return PeerClockNote {
                        rank: q,
                        offset_ns: r.offset_ns,
                        bound_ns: Some(r.error_bound_ns),
                        source: match r.source {
                            S::Kernel => "kernel",
                            S::SoTimestamping => "so_timestamping",
                            S::Userspace => "userspace",
                        },
                    };
                }
            }
            let _ = (addrs, clock_map, at_ns);
            PeerClockNote {
                rank: q,
                offset_ns: 0.0,
                bound_ns: None,
                source: "none",
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
