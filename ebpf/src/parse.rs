//! The one packet parser of Causeway's eBPF programs, shared by XDP ingress
//! and TC egress. It reads through [`Bytes`]: either the packet itself
//! ([`Packet`], raw `(data, data_end)` addresses so that any context —
//! `xdp_md`, `__sk_buff` — can feed it, every read preceded by an explicit
//! bounds check against `data_end` that the verifier can follow), or a copy of
//! the frame's head on the stack ([`StackCopy`], XDP ingress: one helper call,
//! word loads, and a fall back to the packet when the parser needs a byte past
//! the copy).
//!
//! # Rules (mirrored by `userspace/causeway/src/classifier/reference.rs`)
//!
//! * **Ethernet**: 14-byte header; then at most two VLAN tags: the outer one
//!   `0x88a8` (802.1ad) or `0x8100`, an inner one only `0x8100`. Any other
//!   EtherType after that than IPv4 (`0x0800`) or IPv6 (`0x86dd`) is
//!   [`ParseError::NotIp`] (ARP, LLDP), except a tag where none may follow
//!   (a third tag, `0x88a8` inside a tag): [`ParseError::VlanDepth`].
//! * **IPv4**: the 20-byte fixed header must be present, version 4,
//!   `IHL >= 5`, the header with its options inside the linear data, and
//!   `IHL*4 <= total length`; otherwise the frame is [`ParseError::Truncated`]
//!   or [`ParseError::BadHeader`]. Options are skipped, never read. When
//!   `l3 + total length` exceeds the frame length the frame is classified on
//!   the bytes present ([`FLAG_LENGTH_OVERRUN`], the datagram ends at the
//!   frame's end).
//! * **IPv6**: the 40-byte header present, version 6; a payload length past
//!   the frame's end is [`FLAG_LENGTH_OVERRUN`] as for IPv4. Extension headers hop-by-hop (0), routing (43),
//!   fragment (44), destination options (60) and AH (51) are walked, at most
//!   [`MAX_IPV6_EXT_HEADERS`]; each must lie inside the IPv6 payload and its
//!   first 8 bytes inside the linear data. When the walk stops early (the limit
//!   is reached, or the next extension header does not fit) the frame is still
//!   classified, with `proto` = the last Next Header value seen, no ports and
//!   [`FLAG_EXT_UNFINISHED`].
//! * **Fragments**: a non-first fragment (IPv4 offset != 0, or an IPv6
//!   fragment header with offset != 0) carries no L4 header: `proto` is the
//!   declared protocol, there are no ports ([`FLAG_LATER_FRAGMENT`]). A first
//!   fragment is parsed like an unfragmented datagram.
//! * **Ports**: read only for TCP (6) and UDP (17), only when the fixed L4
//!   header (TCP 20 bytes, UDP 8 bytes) lies inside both the IP datagram and
//!   the linear data; otherwise the frame has no ports
//!   ([`FLAG_L4_TRUNCATED`]). Frames without ports are classified by
//!   addresses, protocol and DSCP only: rules with port ranges never match them.
//!
//! Whatever is [`ParseError`] is passed untouched and counted as unclassified
//! by the programs; it is never classified with half-read fields.

use core::{cell::Cell, mem::MaybeUninit};

use bpf_maps::classifier::MAX_IPV6_EXT_HEADERS;

pub const ETH_HLEN: usize = 14;
pub const ETH_P_IPV4: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86dd;
pub const ETH_P_8021Q: u16 = 0x8100;
pub const ETH_P_8021AD: u16 = 0x88a8;

pub const IPPROTO_HOPOPTS: u8 = 0;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_ROUTING: u8 = 43;
pub const IPPROTO_FRAGMENT: u8 = 44;
pub const IPPROTO_AH: u8 = 51;
pub const IPPROTO_DSTOPTS: u8 = 60;

/// The datagram is a fragment (IPv4 MF or offset, or an IPv6 fragment header).
pub const FLAG_FRAGMENT: u8 = 1 << 0;
/// A non-first fragment: it carries no L4 header, hence no ports.
pub const FLAG_LATER_FRAGMENT: u8 = 1 << 1;
/// TCP/UDP whose fixed header is not fully inside the frame: no ports.
pub const FLAG_L4_TRUNCATED: u8 = 1 << 2;
/// The IPv6 extension-header walk stopped before the upper-layer header.
pub const FLAG_EXT_UNFINISHED: u8 = 1 << 3;
/// `src_port`/`dst_port` are valid.
pub const FLAG_HAS_PORTS: u8 = 1 << 4;
/// The IP length field claimed more bytes than the frame holds; `ip_end` is
/// the frame's end.
pub const FLAG_LENGTH_OVERRUN: u8 = 1 << 5;

/// Everything the programs need from one parsed frame. Offsets are in bytes
/// from the start of the frame (`data`).
#[derive(Clone, Copy)]
pub struct ParsedFrame {
    /// Offset of the IP header (after Ethernet and VLAN tags).
    pub l3_offset: u32,
    /// Offset of the upper-layer header (after IPv4 options / IPv6 extension
    /// headers). Only meaningful when neither [`FLAG_LATER_FRAGMENT`] nor
    /// [`FLAG_EXT_UNFINISHED`] is set; it may lie beyond `data_end`.
    pub l4_offset: u32,
    /// Offset one past the IP datagram (from its length field).
    pub ip_end: u32,
    /// 4 or 6.
    pub ip_version: u8,
    /// IPv4 protocol, or the IPv6 upper-layer Next Header (see the rules).
    pub proto: u8,
    /// Differentiated Services Code Point, 0..=63.
    pub dscp: u8,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// Host byte order; 0 unless [`FLAG_HAS_PORTS`].
    pub src_port: u16,
    pub dst_port: u16,
    /// When [`FLAG_FRAGMENT`]: the IPv4 identification or the IPv6 fragment
    /// header's identification, and the IPv4 protocol or that header's Next
    /// Header (the same in every fragment of a datagram).
    pub frag_id: u32,
    pub frag_proto: u8,
    /// The address bytes as they are on the wire, in 4-byte words (word-sized
    /// so that copies and LPM keys need no byte loops); an IPv4 address is
    /// word 0, the other words are zero.
    pub src_addr: [u32; 4],
    pub dst_addr: [u32; 4],
}

impl ParsedFrame {
    #[inline(always)]
    pub fn has_ports(&self) -> bool {
        self.flags & FLAG_HAS_PORTS != 0
    }
}

/// Why a frame was not parsed (the programs count it as unclassified).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Shorter than the headers it announces.
    Truncated,
    /// Not IPv4/IPv6 after at most two VLAN tags.
    NotIp,
    /// An IP header with an impossible version, IHL or length.
    BadHeader,
    /// A VLAN tag where the parser reads no more tags.
    VlanDepth,
}

/// A readable range of a frame, handed out only by [`Bytes::span`]: reads at
/// `k` with `k + size <= len` are inside the frame.
#[derive(Clone, Copy)]
pub struct Span {
    /// The packet address ([`Packet`]) or frame offset ([`StackCopy`]).
    at: usize,
    len: usize,
}

/// Where the parser reads a frame's bytes: the packet itself ([`Packet`]),
/// or a copy of its first bytes on the stack ([`StackCopy`]). One parser
/// runs over both, so both read a frame the same way.
pub trait Bytes {
    /// `[off, off + len)` of the frame, if it can be read.
    fn span(&self, off: usize, len: usize) -> Option<Span>;
    /// Byte `k` of `s` (0 when `k` is outside `s`: never, by construction).
    fn byte(&self, s: Span, k: usize) -> u8;
    /// Big-endian u16 at `k` of `s`.
    fn be16(&self, s: Span, k: usize) -> u16;
    /// Four bytes at `k` of `s`, as they are in memory.
    fn word(&self, s: Span, k: usize) -> u32;
}

/// The frame's linear data `[data, data_end)`: every read is preceded by an
/// explicit bounds check against `data_end` that the verifier can follow.
#[derive(Clone, Copy)]
pub struct Packet {
    pub data: usize,
    pub data_end: usize,
}

impl Bytes for Packet {
    /// The bounds check the verifier sees before the reads below.
    #[inline(always)]
    fn span(&self, off: usize, len: usize) -> Option<Span> {
        let start = self.data + off;
        if start + len > self.data_end {
            return None;
        }
        Some(Span { at: start, len })
    }

    #[inline(always)]
    fn byte(&self, s: Span, k: usize) -> u8 {
        if k >= s.len {
            return 0;
        }
        // SAFETY: `s` was checked against `data_end` by `span` and `k < len`;
        // the kernel maps the frame readable.
        unsafe { *((s.at + k) as *const u8) }
    }

    #[inline(always)]
    fn be16(&self, s: Span, k: usize) -> u16 {
        u16::from_be_bytes([self.byte(s, k), self.byte(s, k + 1)])
    }

    #[inline(always)]
    fn word(&self, s: Span, k: usize) -> u32 {
        if k + 4 > s.len {
            return 0;
        }
        // SAFETY: in bounds as in `byte`; read_unaligned has no alignment need.
        unsafe { ((s.at + k) as *const u32).read_unaligned() }
    }
}

/// Bytes of a frame copied to the stack: enough for Ethernet, two VLAN tags,
/// an IPv6 header and a TCP header (22 + 40 + 20).
pub const COPY_LEN: usize = 82;
/// The copy starts 2 bytes into a word array, so that the IP header (at 14,
/// 18 or 22) and everything after it that the parser reads in words (the
/// addresses, the ports) are word-aligned: one load per word, not four.
const COPY_SHIFT: usize = 2;
const COPY_WORDS: usize = (COPY_SHIFT + COPY_LEN).div_ceil(4);

/// Stack room for a [`StackCopy`]; uninitialised until [`StackCopy::fill`].
pub type CopyBuffer = MaybeUninit<[u32; COPY_WORDS]>;

/// The first `len` bytes of a frame, copied to the stack with one helper
/// call: reads need no packet bounds checks and the addresses are read a
/// word at a time. When the frame is longer than the copy (`!complete`) and
/// the parser asks for a byte past it, the copy is `spilled`: the result
/// must be thrown away and the frame parsed from the [`Packet`]. An unfilled
/// copy (`len == 0`) spills at the first read.
pub struct StackCopy<'a> {
    /// Initialised when `len != 0` (see [`StackCopy::fill`]).
    buf: &'a mut CopyBuffer,
    len: usize,
    complete: bool,
    spilled: Cell<bool>,
}

impl<'a> StackCopy<'a> {
    /// An empty copy over `buf`.
    #[inline(always)]
    pub fn new(buf: &'a mut CopyBuffer) -> Self {
        StackCopy {
            buf,
            len: 0,
            complete: false,
            spilled: Cell::new(false),
        }
    }

    /// Copies the first `LEN` bytes (`LEN <= COPY_LEN`) of a frame of
    /// `linear >= LEN` linear bytes with `copy(dst, LEN)`, which writes
    /// exactly `LEN` bytes at `dst` and returns true, or returns false (then
    /// the copy stays empty). The words outside `[COPY_SHIFT, COPY_SHIFT +
    /// LEN)` are zeroed first, so that every word is initialised afterwards
    /// (not the whole buffer: a store per word on every frame).
    ///
    /// # Safety
    /// `copy` returns true only after writing all `LEN` bytes at `dst`.
    #[inline(always)]
    pub unsafe fn fill<const LEN: usize>(
        &mut self,
        linear: usize,
        copy: impl FnOnce(*mut u8, usize) -> bool,
    ) {
        const { assert!(LEN <= COPY_LEN && LEN > 0) };
        let words = self.buf.as_mut_ptr().cast::<u32>();
        // SAFETY: every index is below COPY_WORDS; volatile so that the
        // compiler neither drops the stores nor turns them into a memset call.
        unsafe {
            words.write_volatile(0);
            for i in (COPY_SHIFT + LEN) / 4..COPY_WORDS {
                words.add(i).write_volatile(0);
            }
        }
        if copy(words.cast::<u8>().wrapping_add(COPY_SHIFT), LEN) {
            self.len = LEN;
            self.complete = LEN == linear;
        }
    }

    /// Whether the parser asked for a byte past the copy.
    #[inline(always)]
    pub fn spilled(&self) -> bool {
        self.spilled.get()
    }

    /// The word holding copy byte `i`.
    #[inline(always)]
    fn word_of(&self, i: usize) -> u32 {
        if self.len == 0 {
            return 0;
        }
        // SAFETY: `len != 0` only after `fill` initialised every word.
        let words = unsafe { self.buf.assume_init_ref() };
        words.get(i / 4).copied().unwrap_or(0)
    }
}

/// Byte `j` (0..4) in memory of the word `w`, by shifts: indexing the
/// word's bytes would address the stack with a variable offset built by `|`,
/// which the verifier refuses.
#[inline(always)]
fn byte_of(w: u32, j: usize) -> u8 {
    let shift = if cfg!(target_endian = "little") {
        (j & 3) * 8
    } else {
        (3 - (j & 3)) * 8
    };
    (w >> shift) as u8
}

impl Bytes for StackCopy<'_> {
    #[inline(always)]
    fn span(&self, off: usize, len: usize) -> Option<Span> {
        if off + len <= self.len {
            return Some(Span { at: off, len });
        }
        if !self.complete {
            self.spilled.set(true);
        }
        None
    }

    #[inline(always)]
    fn byte(&self, s: Span, k: usize) -> u8 {
        if k >= s.len {
            return 0;
        }
        let i = s.at + k + COPY_SHIFT;
        byte_of(self.word_of(i), i & 3)
    }

    #[inline(always)]
    fn be16(&self, s: Span, k: usize) -> u16 {
        if k + 2 > s.len {
            return 0;
        }
        let i = s.at + k + COPY_SHIFT;
        let j = i & 3;
        if j == 3 {
            return u16::from_be_bytes([self.byte(s, k), self.byte(s, k + 1)]);
        }
        let w = self.word_of(i);
        u16::from_be_bytes([byte_of(w, j), byte_of(w, j + 1)])
    }

    #[inline(always)]
    fn word(&self, s: Span, k: usize) -> u32 {
        if k + 4 > s.len {
            return 0;
        }
        let i = s.at + k + COPY_SHIFT;
        if i & 3 == 0 {
            return self.word_of(i);
        }
        u32::from_ne_bytes([
            self.byte(s, k),
            self.byte(s, k + 1),
            self.byte(s, k + 2),
            self.byte(s, k + 3),
        ])
    }
}

#[inline(always)]
fn load_be16<B: Bytes>(src: &B, off: usize) -> Option<u16> {
    let p = src.span(off, 2)?;
    Some(src.be16(p, 0))
}

/// Parses the frame at `[data, data_end)`; `frame_len` is the whole frame's
/// length (larger than `data_end - data` for non-linear frames), used only
/// for the IP length sanity checks.
#[inline(always)]
pub fn parse_frame(
    data: usize,
    data_end: usize,
    frame_len: usize,
) -> Result<ParsedFrame, ParseError> {
    parse_from(&Packet { data, data_end }, frame_len)
}

/// Parses the frame `src` reads; `frame_len` as in [`parse_frame`].
#[inline(always)]
pub fn parse_from<B: Bytes>(src: &B, frame_len: usize) -> Result<ParsedFrame, ParseError> {
    let mut ethertype = load_be16(src, 12).ok_or(ParseError::Truncated)?;
    let mut l3 = ETH_HLEN;
    if ethertype == ETH_P_8021AD || ethertype == ETH_P_8021Q {
        ethertype = load_be16(src, l3 + 2).ok_or(ParseError::Truncated)?;
        l3 += 4;
        if ethertype == ETH_P_8021Q {
            ethertype = load_be16(src, l3 + 2).ok_or(ParseError::Truncated)?;
            l3 += 4;
        }
    }
    if ethertype == ETH_P_8021AD || ethertype == ETH_P_8021Q {
        return Err(ParseError::VlanDepth);
    }
    let mut frame = ParsedFrame {
        l3_offset: l3 as u32,
        l4_offset: 0,
        ip_end: 0,
        ip_version: 0,
        proto: 0,
        dscp: 0,
        flags: 0,
        src_port: 0,
        dst_port: 0,
        frag_id: 0,
        frag_proto: 0,
        src_addr: [0; 4],
        dst_addr: [0; 4],
    };
    match ethertype {
        ETH_P_IPV4 => parse_ipv4(src, frame_len, &mut frame)?,
        ETH_P_IPV6 => parse_ipv6(src, frame_len, &mut frame)?,
        _ => return Err(ParseError::NotIp),
    }
    Ok(frame)
}

#[inline(always)]
fn parse_ipv4<B: Bytes>(
    src: &B,
    frame_len: usize,
    frame: &mut ParsedFrame,
) -> Result<(), ParseError> {
    // l3 is at most 22 (two tags); masking keeps that visible to the verifier.
    let l3 = (frame.l3_offset as usize) & 0x1f;
    let p = src.span(l3, 20).ok_or(ParseError::Truncated)?;
    let (version_ihl, tos, total_len, id, frag, proto, saddr, daddr) = (
        src.byte(p, 0),
        src.byte(p, 1),
        src.be16(p, 2),
        src.be16(p, 4),
        src.be16(p, 6),
        src.byte(p, 9),
        src.word(p, 12),
        src.word(p, 16),
    );
    if version_ihl >> 4 != 4 {
        return Err(ParseError::BadHeader);
    }
    let ihl = usize::from(version_ihl & 0x0f) * 4;
    if ihl < 20 {
        return Err(ParseError::BadHeader);
    }
    if src.span(l3, ihl).is_none() {
        return Err(ParseError::Truncated);
    }
    let total_len = usize::from(total_len);
    if total_len < ihl {
        return Err(ParseError::BadHeader);
    }
    let mut ip_end = l3 + total_len;
    if ip_end > frame_len {
        frame.flags |= FLAG_LENGTH_OVERRUN;
        ip_end = frame_len;
    }
    let more_fragments = frag & 0x2000 != 0;
    let offset = frag & 0x1fff;

    frame.ip_version = 4;
    frame.proto = proto;
    frame.dscp = tos >> 2;
    frame.src_addr[0] = saddr;
    frame.dst_addr[0] = daddr;
    frame.l4_offset = (l3 + ihl) as u32;
    frame.ip_end = ip_end as u32;
    if more_fragments || offset != 0 {
        frame.flags |= FLAG_FRAGMENT;
        frame.frag_id = u32::from(id);
        frame.frag_proto = proto;
    }
    if offset != 0 {
        frame.flags |= FLAG_LATER_FRAGMENT;
        return Ok(());
    }
    read_ports(src, frame);
    Ok(())
}

#[inline(always)]
fn parse_ipv6<B: Bytes>(
    src: &B,
    frame_len: usize,
    frame: &mut ParsedFrame,
) -> Result<(), ParseError> {
    let l3 = (frame.l3_offset as usize) & 0x1f;
    let p = src.span(l3, 40).ok_or(ParseError::Truncated)?;
    let (b0, b1, payload_len, first_next) = (
        src.byte(p, 0),
        src.byte(p, 1),
        src.be16(p, 4),
        src.byte(p, 6),
    );
    if b0 >> 4 != 6 {
        return Err(ParseError::BadHeader);
    }
    let mut ip_end = l3 + 40 + usize::from(payload_len);
    if ip_end > frame_len {
        frame.flags |= FLAG_LENGTH_OVERRUN;
        ip_end = frame_len;
    }
    let traffic_class = ((b0 & 0x0f) << 4) | (b1 >> 4);
    frame.ip_version = 6;
    frame.dscp = traffic_class >> 2;
    frame.src_addr = [
        src.word(p, 8),
        src.word(p, 12),
        src.word(p, 16),
        src.word(p, 20),
    ];
    frame.dst_addr = [
        src.word(p, 24),
        src.word(p, 28),
        src.word(p, 32),
        src.word(p, 36),
    ];
    frame.ip_end = ip_end as u32;

    let mut next = first_next;
    let mut off = l3 + 40;
    let mut finished = false;
    for _ in 0..MAX_IPV6_EXT_HEADERS {
        if !is_extension(next) {
            finished = true;
            break;
        }
        // Every extension header is at least 8 bytes long.
        let Some(ext) = src.span(off, 8) else {
            break;
        };
        let (ext_next, ext_len, frag, id) = (
            src.byte(ext, 0),
            src.byte(ext, 1),
            src.be16(ext, 2),
            src.word(ext, 4),
        );
        let len = match next {
            IPPROTO_FRAGMENT => 8,
            IPPROTO_AH => (usize::from(ext_len) + 2) * 4,
            _ => (usize::from(ext_len) + 1) * 8,
        };
        if off + len > ip_end {
            break;
        }
        if next == IPPROTO_FRAGMENT {
            if frag & 0xfff9 != 0 {
                frame.flags |= FLAG_FRAGMENT;
                frame.frag_id = u32::from_be(id);
                frame.frag_proto = ext_next;
            }
            if frag >> 3 != 0 {
                frame.flags |= FLAG_LATER_FRAGMENT;
                frame.proto = ext_next;
                return Ok(());
            }
        }
        next = ext_next;
        // Each header is at most 2 KiB, so the offset stays far below 64 KiB.
        off = (off + len) & 0xffff;
    }
    frame.proto = next;
    if !finished && !is_extension(next) {
        finished = true;
    }
    if !finished {
        frame.flags |= FLAG_EXT_UNFINISHED;
        return Ok(());
    }
    frame.l4_offset = off as u32;
    read_ports(src, frame);
    Ok(())
}

#[inline(always)]
fn is_extension(next: u8) -> bool {
    matches!(
        next,
        IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS | IPPROTO_AH | IPPROTO_FRAGMENT
    )
}

/// Fills the ports when the frame is TCP/UDP and its fixed L4 header is
/// inside both the datagram and the linear data.
#[inline(always)]
fn read_ports<B: Bytes>(src: &B, frame: &mut ParsedFrame) {
    let header_len = match frame.proto {
        IPPROTO_TCP => 20,
        IPPROTO_UDP => 8,
        _ => return,
    };
    let l4 = (frame.l4_offset as usize) & 0xffff;
    if l4 + header_len > frame.ip_end as usize || src.span(l4, header_len).is_none() {
        frame.flags |= FLAG_L4_TRUNCATED;
        return;
    }
    let Some(p) = src.span(l4, 4) else {
        frame.flags |= FLAG_L4_TRUNCATED;
        return;
    };
    let (src_port, dst_port) = (src.be16(p, 0), src.be16(p, 2));
    frame.src_port = src_port;
    frame.dst_port = dst_port;
    frame.flags |= FLAG_HAS_PORTS;
}
