//! The framed, versioned wire protocol between ranks.
//!
//! Every frame is a fixed 56-byte little-endian header followed by `len` payload bytes:
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..4 | magic | `b"CWCL"` |
//! | 4 | version | [`VERSION`] |
//! | 5 | kind | [`FrameKind`] |
//! | 6..8 | reserved | must be zero |
//! | 8..16 | op | operation sequence number on this communicator |
//! | 16..20 | lane | pipeline lane inside the operation (`WanRate`, `WanSending`: the WAN path) |
//! | 20..24 | step | schedule step inside the lane |
//! | 24..32 | offset | byte offset of the payload inside the transfer (one schedule action) |
//! | 32..36 | len | payload length |
//! | 36..52 | call | the operation's signature ([`Call`]; zero in control frames) |
//! | 52..56 | check | FNV-1a of bytes 0..52 |
//!
//! The decoder checks everything before the payload is read, and refuses payloads
//! above the configured maximum, so a peer can never make us allocate without bound.

use std::io::{self, Read, Write};

use crate::pool::{BufferPool, PooledBuf};
use crate::transport::StreamRead;

mod abort;
mod call;

pub use abort::{decode_abort, encode_abort, Abort, CallReport};
use call::CALL_LEN;
pub use call::{Call, CallKind, Codec};

pub const MAGIC: [u8; 4] = *b"CWCL";
/// 2: the header carries the operation's [`Call`].
pub const VERSION: u8 = 2;
pub const HEADER_LEN: usize = 56;
const CHECK_AT: usize = HEADER_LEN - 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// First frame on every connection: who is speaking (payload: [`Hello`]).
    Hello = 1,
    /// A chunk of an operation's buffer.
    Data = 2,
    /// The sender gives up on the communicator; payload: [`Abort`] (who failed, how that was decided, why).
    Abort = 3,
    /// Orderly close: no more frames will follow.
    Goodbye = 4,
    /// The sender is alive (sent on a connection idle for a while; no payload).
    Heartbeat = 5,
    /// What the sender's WAN connections delivered in its last window, for
    /// the ranks of its domain (payload: [`WanRate`]).
    WanRate = 6,
    /// A [`FrameKind::Data`] frame sent twice, on two connections (a small
    /// transfer across domains, so that one loss does not cost it a round
    /// trip): the receiver takes the first copy and drops the other.
    DataCopy = 7,
    /// Whether the sender has data waiting to cross the WAN now, for the
    /// ranks of its domain: they split the path among the ranks that do
    /// (payload: [`WanSending`]).
    WanSending = 8,
}

/// Malformed input. Any of these closes the connection it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("truncated frame: got {got} of {need} bytes")]
    Truncated { got: usize, need: usize },
    #[error("bad magic {0:02x?}")]
    BadMagic([u8; 4]),
    #[error("unsupported protocol version {0} (this build speaks {VERSION})")]
    UnsupportedVersion(u8),
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("reserved header bits set: {0:#06x}")]
    Reserved(u16),
    #[error("header checksum mismatch")]
    BadChecksum,
    #[error("payload of {len} bytes exceeds the limit of {max}")]
    Oversized { len: u32, max: u32 },
    #[error("bad operation signature: {0}")]
    BadCall(&'static str),
    #[error("bad {kind:?} payload: {reason}")]
    BadPayload {
        kind: FrameKind,
        reason: &'static str,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: FrameKind,
    pub op: u64,
    pub lane: u32,
    pub step: u32,
    pub offset: u64,
    pub len: u32,
    /// The call a data frame belongs to; `None` in control frames.
    pub call: Option<Call>,
}

fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ *b as u32).wrapping_mul(0x0100_0193)
    })
}

fn le<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// The magic and version at the start of `b` (at least 5 bytes).
fn check_preamble(b: &[u8]) -> Result<(), FrameError> {
    let magic: [u8; 4] = le(b, 0);
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    if b[4] != VERSION {
        return Err(FrameError::UnsupportedVersion(b[4]));
    }
    Ok(())
}

impl FrameHeader {
    pub fn control(kind: FrameKind, len: u32) -> Self {
        FrameHeader {
            kind,
            op: 0,
            lane: 0,
            step: 0,
            offset: 0,
            len,
            call: None,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = self.kind as u8;
        b[8..16].copy_from_slice(&self.op.to_le_bytes());
        b[16..20].copy_from_slice(&self.lane.to_le_bytes());
        b[20..24].copy_from_slice(&self.step.to_le_bytes());
        b[24..32].copy_from_slice(&self.offset.to_le_bytes());
        b[32..36].copy_from_slice(&self.len.to_le_bytes());
        b[36..36 + CALL_LEN].copy_from_slice(&Call::encode(self.call.as_ref()));
        let check = fnv1a(&b[..CHECK_AT]);
        b[CHECK_AT..].copy_from_slice(&check.to_le_bytes());
        b
    }

    /// Validates and decodes a header; `max_payload` bounds `len`.
    pub fn decode(b: &[u8], max_payload: u32) -> Result<Self, FrameError> {
        if b.len() < HEADER_LEN {
            return Err(FrameError::Truncated {
                got: b.len(),
                need: HEADER_LEN,
            });
        }
        check_preamble(b)?;
        if u32::from_le_bytes(le(b, CHECK_AT)) != fnv1a(&b[..CHECK_AT]) {
            return Err(FrameError::BadChecksum);
        }
        let kind = match b[5] {
            1 => FrameKind::Hello,
            2 => FrameKind::Data,
            3 => FrameKind::Abort,
            4 => FrameKind::Goodbye,
            5 => FrameKind::Heartbeat,
            6 => FrameKind::WanRate,
            7 => FrameKind::DataCopy,
            8 => FrameKind::WanSending,
            k => return Err(FrameError::UnknownKind(k)),
        };
        let reserved = u16::from_le_bytes(le(b, 6));
        if reserved != 0 {
            return Err(FrameError::Reserved(reserved));
        }
        let len = u32::from_le_bytes(le(b, 32));
        if len > max_payload {
            return Err(FrameError::Oversized {
                len,
                max: max_payload,
            });
        }
        Ok(FrameHeader {
            kind,
            op: u64::from_le_bytes(le(b, 8)),
            lane: u32::from_le_bytes(le(b, 16)),
            step: u32::from_le_bytes(le(b, 20)),
            offset: u64::from_le_bytes(le(b, 24)),
            len,
            call: Call::decode(&le(b, 36))?,
        })
    }
}

/// A decoded frame with its payload.
#[derive(Debug)]
pub struct Frame {
    pub header: FrameHeader,
    pub payload: PooledBuf,
}

/// Why reading a frame stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("connection closed")]
    Closed,
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// Reads one frame. A clean end of stream before a header is `Closed`; an end of
/// stream inside a frame is `Truncated`.
pub fn read_frame(
    r: &mut impl Read,
    max_payload: u32,
    pool: &BufferPool,
) -> Result<Frame, ReadError> {
    let header = read_header(r, max_payload)?;
    let payload = read_payload(r, &header, pool)?;
    Ok(Frame { header, payload })
}

/// [`read_frame`] from a transport's read half: the payload is read in
/// place where the transport can hand it out so
/// ([`StreamRead::take_in_place`]: an RDMA receive ring), copied into a
/// buffer of `pool` otherwise.
pub fn read_frame_from(
    r: &mut dyn StreamRead,
    max_payload: u32,
    pool: &BufferPool,
) -> Result<Frame, ReadError> {
    let header = read_header(r, max_payload)?;
    let payload = match r.take_in_place(header.len as usize)? {
        Some(p) => p,
        None => read_payload(r, &header, pool)?,
    };
    Ok(Frame { header, payload })
}

fn read_header<R: Read + ?Sized>(r: &mut R, max_payload: u32) -> Result<FrameHeader, ReadError> {
    let mut hb = [0u8; HEADER_LEN];
    // Magic and version first: a peer speaking something else is refused at
    // once, not after it has sent a whole header's worth of bytes.
    let got = read_full(r, &mut hb[..5])?;
    if got == 0 {
        return Err(ReadError::Closed);
    }
    if got == 5 {
        check_preamble(&hb)?;
    }
    let got = got + read_full(r, &mut hb[got..])?;
    if got < HEADER_LEN {
        return Err(FrameError::Truncated {
            got,
            need: HEADER_LEN,
        }
        .into());
    }
    Ok(FrameHeader::decode(&hb, max_payload)?)
}

fn read_payload<R: Read + ?Sized>(
    r: &mut R,
    header: &FrameHeader,
    pool: &BufferPool,
) -> Result<PooledBuf, ReadError> {
    let mut payload = pool.take(header.len as usize);
    let got = read_full(r, &mut payload)?;
    if got < payload.len() {
        return Err(FrameError::Truncated {
            got: HEADER_LEN + got,
            need: HEADER_LEN + payload.len(),
        }
        .into());
    }
    Ok(payload)
}

/// Reads until `buf` is full or the stream ends; returns the count read.
fn read_full<R: Read + ?Sized>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

pub fn write_frame(w: &mut impl Write, header: &FrameHeader, payload: &[u8]) -> io::Result<()> {
    debug_assert_eq!(header.len as usize, payload.len());
    w.write_all(&header.encode())?;
    w.write_all(payload)?;
    Ok(())
}

/// Frames one [`FrameWriter::frames`] call takes at most.
pub const MAX_BATCH: usize = 16;

/// Payloads up to this size are copied into the gather buffer rather than
/// given their own vectored-write part.
const COPY_BELOW: usize = 16 << 10;

/// Where one part of a vectored write comes from.
enum Part {
    /// A range of the gather buffer (small frames, copied).
    Gathered(std::ops::Range<usize>),
    /// The encoded header of a large frame (index into `heads`).
    Head(usize),
    /// A large frame's payload, straight from the caller's buffer.
    Payload(usize),
}

/// Writes frames to a stream with as few system calls and copies as it can:
/// small frames gather in a buffer; a batch that does not fit goes out in
/// one vectored write together with what was gathered (each large frame's
/// header, and its payload straight from the caller's buffer, never copied
/// here). Over TCP a batch of large frames is one `writev`; over RDMA its
/// writes are all in flight before the transport waits for completions.
pub struct FrameWriter<W: Write> {
    inner: W,
    pending: Vec<u8>,
    cap: usize,
    heads: Vec<[u8; HEADER_LEN]>,
    parts: Vec<Part>,
}

impl<W: Write> FrameWriter<W> {
    /// Gathers up to `cap` bytes of small frames before writing.
    pub fn new(inner: W, cap: usize) -> Self {
        FrameWriter {
            inner,
            pending: Vec::with_capacity(cap),
            cap,
            heads: Vec::with_capacity(MAX_BATCH),
            parts: Vec::with_capacity(2 * MAX_BATCH + 1),
        }
    }

    pub fn frame(&mut self, header: &FrameHeader, payload: &[u8]) -> io::Result<()> {
        self.frames(&[(*header, payload)])
    }

    /// Writes `frames` (at most [`MAX_BATCH`]) in order: gathered when they
    /// all fit in the gather buffer, else in one vectored write with it.
    pub fn frames<P: std::ops::Deref<Target = [u8]>>(
        &mut self,
        frames: &[(FrameHeader, P)],
    ) -> io::Result<()> {
        assert!(
            frames.len() <= MAX_BATCH,
            "a batch of {} frames",
            frames.len()
        );
        for (h, p) in frames {
            debug_assert_eq!(h.len as usize, p.len());
        }
        let total: usize = frames.iter().map(|(_, p)| HEADER_LEN + p.len()).sum();
        if self.pending.len() + total <= self.cap {
            for (h, p) in frames {
                self.pending.extend_from_slice(&h.encode());
                self.pending.extend_from_slice(p);
            }
            return Ok(());
        }
        self.heads.clear();
        self.parts.clear();
        // The start of the gathered bytes not yet in a part.
        let mut from = 0;
        for (i, (h, p)) in frames.iter().enumerate() {
            if p.len() < COPY_BELOW {
                self.pending.extend_from_slice(&h.encode());
                self.pending.extend_from_slice(p);
                continue;
            }
            if self.pending.len() > from {
                self.parts.push(Part::Gathered(from..self.pending.len()));
                from = self.pending.len();
            }
            self.heads.push(h.encode());
            self.parts.push(Part::Head(self.heads.len() - 1));
            self.parts.push(Part::Payload(i));
        }
        if self.pending.len() > from {
            self.parts.push(Part::Gathered(from..self.pending.len()));
        }
        let empty = io::IoSlice::new(&[]);
        let mut slices = [empty; 2 * MAX_BATCH + 1];
        for (slot, part) in slices.iter_mut().zip(&self.parts) {
            *slot = match part {
                Part::Gathered(r) => io::IoSlice::new(&self.pending[r.clone()]),
                Part::Head(k) => io::IoSlice::new(&self.heads[*k]),
                Part::Payload(i) => io::IoSlice::new(&frames[*i].1),
            };
        }
        write_all_vectored(&mut self.inner, &mut slices[..self.parts.len()])?;
        self.pending.clear();
        Ok(())
    }

    /// Writes what was gathered and flushes the stream.
    pub fn flush(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            self.inner.write_all(&self.pending)?;
            self.pending.clear();
        }
        self.inner.flush()
    }
}

/// `Write::write_all_vectored` (unstable in std): writes every byte of
/// `parts`, retrying partial and interrupted writes.
fn write_all_vectored(w: &mut impl Write, mut parts: &mut [io::IoSlice<'_>]) -> io::Result<()> {
    io::IoSlice::advance_slices(&mut parts, 0);
    while !parts.is_empty() {
        match w.write_vectored(parts) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => io::IoSlice::advance_slices(&mut parts, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What kind of connection a [`Hello`] opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ConnRole {
    /// A TCP stream that carries data frames.
    TcpData = 1,
    /// A TCP stream kept for control frames and liveness next to shared memory.
    TcpControl = 2,
    /// The same next to an RDMA queue pair (whose endpoints went through the store).
    RdmaControl = 3,
}

/// Payload of a WanRate frame: one window of a rank's WAN bulk traffic
/// (`crate::estimates::domain`), sent to the other ranks of its domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WanRate {
    /// Index of the wall-clock window (`estimates::domain::WINDOW` long)
    /// the bytes were acknowledged in.
    pub window: u64,
    /// Payload bytes its WAN bulk connections had delivered.
    pub bytes: u64,
    /// Over how long (µs): from the sender's last reading before the window
    /// to its last reading in it.
    pub interval_us: u32,
    /// It had less to send than it could have (idle or app-limited for
    /// part of the window): `bytes` is a lower bound of its share.
    pub limited: bool,
    /// Its connections' RTT showed a queue at the bottleneck throughout
    /// the window: the path was full.
    pub queued: bool,
    /// ... or in less than a quarter of its readings (the pacing's short
    /// queue comes and goes): the path had room.
    pub clear: bool,
}

impl WanRate {
    pub const LEN: usize = 24;
    const LIMITED: u32 = 1;
    const QUEUED: u32 = 2;
    const CLEAR: u32 = 4;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut v = [0u8; Self::LEN];
        v[..8].copy_from_slice(&self.window.to_le_bytes());
        v[8..16].copy_from_slice(&self.bytes.to_le_bytes());
        v[16..20].copy_from_slice(&self.interval_us.to_le_bytes());
        let flags = if self.limited { Self::LIMITED } else { 0 }
            | if self.queued { Self::QUEUED } else { 0 }
            | if self.clear { Self::CLEAR } else { 0 };
        v[20..].copy_from_slice(&flags.to_le_bytes());
        v
    }

    pub fn decode(p: &[u8]) -> Result<Self, FrameError> {
        let bad = |reason| FrameError::BadPayload {
            kind: FrameKind::WanRate,
            reason,
        };
        if p.len() != Self::LEN {
            return Err(bad("not 24 bytes"));
        }
        let interval_us = u32::from_le_bytes(le(p, 16));
        if interval_us == 0 {
            return Err(bad("empty interval"));
        }
        let flags = u32::from_le_bytes(le(p, 20));
        if flags & !(Self::LIMITED | Self::QUEUED | Self::CLEAR) != 0 {
            return Err(bad("unknown flags"));
        }
        if flags & (Self::QUEUED | Self::CLEAR) == Self::QUEUED | Self::CLEAR {
            return Err(bad("queued and clear"));
        }
        Ok(WanRate {
            window: u64::from_le_bytes(le(p, 0)),
            bytes: u64::from_le_bytes(le(p, 8)),
            interval_us,
            limited: flags & Self::LIMITED != 0,
            queued: flags & Self::QUEUED != 0,
            clear: flags & Self::CLEAR != 0,
        })
    }
}

/// Payload of a WanSending frame: the sender has data waiting to cross
/// the WAN (`true`) or has had none for a while (`false`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WanSending(pub bool);

impl WanSending {
    pub const LEN: usize = 1;

    pub fn encode(&self) -> [u8; Self::LEN] {
        [u8::from(self.0)]
    }

    pub fn decode(p: &[u8]) -> Result<Self, FrameError> {
        match p {
            [0] => Ok(WanSending(false)),
            [1] => Ok(WanSending(true)),
            _ => Err(FrameError::BadPayload {
                kind: FrameKind::WanSending,
                reason: "not one byte of 0 or 1",
            }),
        }
    }
}

/// Payload of a Hello frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub session: u64,
    pub rank: u32,
    pub world: u32,
    pub index: u32,
    pub role: ConnRole,
    /// Shared-memory ring files the receiver should map (sender→receiver, receiver→sender).
    pub shm: Option<(String, String)>,
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&self.session.to_le_bytes());
        v.extend_from_slice(&self.rank.to_le_bytes());
        v.extend_from_slice(&self.world.to_le_bytes());
        v.extend_from_slice(&self.index.to_le_bytes());
        v.push(self.role as u8);
        if let Some((a, b)) = &self.shm {
            for s in [a, b] {
                v.extend_from_slice(&(s.len() as u16).to_le_bytes());
                v.extend_from_slice(s.as_bytes());
            }
        }
        v
    }

    pub fn decode(p: &[u8]) -> Result<Self, FrameError> {
        let bad = |reason| FrameError::BadPayload {
            kind: FrameKind::Hello,
            reason,
        };
        if p.len() < 21 {
            return Err(bad("shorter than 21 bytes"));
        }
        let role = match p[20] {
            1 => ConnRole::TcpData,
            2 => ConnRole::TcpControl,
            3 => ConnRole::RdmaControl,
            _ => return Err(bad("unknown connection role")),
        };
        let mut rest = &p[21..];
        let mut take_str = || -> Result<String, FrameError> {
            if rest.len() < 2 {
                return Err(bad("truncated shared-memory path"));
            }
            let n = u16::from_le_bytes([rest[0], rest[1]]) as usize;
            let s = rest
                .get(2..2 + n)
                .ok_or(bad("truncated shared-memory path"))?;
            let s = std::str::from_utf8(s).map_err(|_| bad("shared-memory path is not UTF-8"))?;
            rest = &rest[2 + n..];
            Ok(s.to_string())
        };
        let shm = if p.len() > 21 {
            Some((take_str()?, take_str()?))
        } else {
            None
        };
        Ok(Hello {
            session: u64::from_le_bytes(le(p, 0)),
            rank: u32::from_le_bytes(le(p, 8)),
            world: u32::from_le_bytes(le(p, 12)),
            index: u32::from_le_bytes(le(p, 16)),
            role,
            shm,
        })
    }
}

#[cfg(test)]
mod tests;
