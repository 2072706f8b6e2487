//! The one packet parser of Causeway's eBPF programs, shared by XDP ingress
//! and TC egress. It works on raw `(data, data_end)` addresses so that any
//! context (`xdp_md`, `__sk_buff`) can feed it, and every read is preceded by
//! an explicit bounds check against `data_end` that the verifier can follow.
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

/// Address of `data + off` if `[data + off, data + off + len)` lies before
/// `data_end`: the bounds check the verifier sees before the reads below.
#[inline(always)]
fn bounded(data: usize, data_end: usize, off: usize, len: usize) -> Option<usize> {
    let start = data + off;
    if start + len > data_end {
        return None;
    }
    Some(start)
}

/// Byte `k` of a range checked by [`bounded`].
///
/// # Safety
/// `p` comes from `bounded(.., len)` with `k < len`.
#[inline(always)]
unsafe fn byte(p: usize, k: usize) -> u8 {
    // SAFETY: in bounds per the caller; the kernel maps the frame readable.
    unsafe { *((p + k) as *const u8) }
}

/// Big-endian u16 at `k` of a checked range.
///
/// # Safety
/// As [`byte`], with `k + 2 <= len`.
#[inline(always)]
unsafe fn be16_at(p: usize, k: usize) -> u16 {
    // SAFETY: forwarded to the caller.
    unsafe { u16::from_be_bytes([byte(p, k), byte(p, k + 1)]) }
}

/// Four bytes at `k` of a checked range, as they are in memory.
///
/// # Safety
/// As [`byte`], with `k + 4 <= len`.
#[inline(always)]
unsafe fn word_at(p: usize, k: usize) -> u32 {
    // SAFETY: in bounds per the caller; read_unaligned has no alignment need.
    unsafe { ((p + k) as *const u32).read_unaligned() }
}

#[inline(always)]
fn load_be16(data: usize, data_end: usize, off: usize) -> Option<u16> {
    let p = bounded(data, data_end, off, 2)?;
    // SAFETY: two bytes checked.
    Some(unsafe { be16_at(p, 0) })
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
    let mut ethertype = load_be16(data, data_end, 12).ok_or(ParseError::Truncated)?;
    let mut l3 = ETH_HLEN;
    if ethertype == ETH_P_8021AD || ethertype == ETH_P_8021Q {
        ethertype = load_be16(data, data_end, l3 + 2).ok_or(ParseError::Truncated)?;
        l3 += 4;
        if ethertype == ETH_P_8021Q {
            ethertype = load_be16(data, data_end, l3 + 2).ok_or(ParseError::Truncated)?;
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
        ETH_P_IPV4 => parse_ipv4(data, data_end, frame_len, &mut frame)?,
        ETH_P_IPV6 => parse_ipv6(data, data_end, frame_len, &mut frame)?,
        _ => return Err(ParseError::NotIp),
    }
    Ok(frame)
}

/// The common frames in one pass: Ethernet, at most one 802.1Q tag, then
/// IPv4 without options and unfragmented, or IPv6 without extension
/// headers, carrying TCP or UDP, the whole datagram inside the linear data.
/// One bounds check covers the IP header and the ports; every other frame
/// is `None`, and the caller parses it with [`parse_frame`].
///
/// For every frame it accepts the result is exactly what
/// `parse_frame(data, data_end, data_end - data)` returns (the differential
/// tests compare both paths with the reference model): the conditions
/// checked here are the ones under which [`parse_frame`] takes no other
/// branch (IHL 5, no fragment bits, a length that fits both the L4 header
/// and the frame, no extension header).
#[inline(always)]
pub fn parse_common(data: usize, data_end: usize) -> Option<ParsedFrame> {
    let eth = bounded(data, data_end, 0, ETH_HLEN + 4)?;
    // SAFETY: 18 bytes checked.
    let mut ethertype = unsafe { be16_at(eth, 12) };
    let mut l3 = ETH_HLEN;
    if ethertype == ETH_P_8021Q {
        // SAFETY: as above (bytes 16..18).
        ethertype = unsafe { be16_at(eth, 16) };
        l3 += 4;
    }
    let linear = data_end - data;
    if ethertype == ETH_P_IPV4 {
        // The 20-byte header and the 4 bytes of ports; TCP's longer header
        // is inside the datagram (checked below), itself inside the frame.
        let p = bounded(data, data_end, l3, 24)?;
        // SAFETY: every read is inside the 24 bytes just checked.
        let (version_ihl, tos, total_len, frag, proto, src, dst, src_port, dst_port) = unsafe {
            (
                byte(p, 0),
                byte(p, 1),
                be16_at(p, 2),
                be16_at(p, 6),
                byte(p, 9),
                word_at(p, 12),
                word_at(p, 16),
                be16_at(p, 20),
                be16_at(p, 22),
            )
        };
        let header_len = match proto {
            IPPROTO_UDP => 8,
            IPPROTO_TCP => 20,
            _ => return None,
        };
        let total_len = usize::from(total_len);
        if version_ihl != 0x45
            || frag & 0x3fff != 0
            || total_len < 20 + header_len
            || l3 + total_len > linear
        {
            return None;
        }
        return Some(ParsedFrame {
            l3_offset: l3 as u32,
            l4_offset: (l3 + 20) as u32,
            ip_end: (l3 + total_len) as u32,
            ip_version: 4,
            proto,
            dscp: tos >> 2,
            flags: FLAG_HAS_PORTS,
            src_port,
            dst_port,
            frag_id: 0,
            frag_proto: 0,
            src_addr: [src, 0, 0, 0],
            dst_addr: [dst, 0, 0, 0],
        });
    }
    if ethertype != ETH_P_IPV6 {
        return None;
    }
    let p = bounded(data, data_end, l3, 44)?;
    // SAFETY: every read is inside the 44 bytes just checked.
    let (b0, b1, payload_len, next, src_port, dst_port) = unsafe {
        (
            byte(p, 0),
            byte(p, 1),
            be16_at(p, 4),
            byte(p, 6),
            be16_at(p, 40),
            be16_at(p, 42),
        )
    };
    let header_len = match next {
        IPPROTO_UDP => 8,
        IPPROTO_TCP => 20,
        _ => return None,
    };
    let payload_len = usize::from(payload_len);
    if b0 >> 4 != 6 || payload_len < header_len || l3 + 40 + payload_len > linear {
        return None;
    }
    // SAFETY: as above (bytes 8..40).
    let (src_addr, dst_addr) = unsafe {
        (
            [
                word_at(p, 8),
                word_at(p, 12),
                word_at(p, 16),
                word_at(p, 20),
            ],
            [
                word_at(p, 24),
                word_at(p, 28),
                word_at(p, 32),
                word_at(p, 36),
            ],
        )
    };
    let traffic_class = ((b0 & 0x0f) << 4) | (b1 >> 4);
    Some(ParsedFrame {
        l3_offset: l3 as u32,
        l4_offset: (l3 + 40) as u32,
        ip_end: (l3 + 40 + payload_len) as u32,
        ip_version: 6,
        proto: next,
        dscp: traffic_class >> 2,
        flags: FLAG_HAS_PORTS,
        src_port,
        dst_port,
        frag_id: 0,
        frag_proto: 0,
        src_addr,
        dst_addr,
    })
}

#[inline(always)]
fn parse_ipv4(
    data: usize,
    data_end: usize,
    frame_len: usize,
    frame: &mut ParsedFrame,
) -> Result<(), ParseError> {
    // l3 is at most 22 (two tags); masking keeps that visible to the verifier.
    let l3 = (frame.l3_offset as usize) & 0x1f;
    let p = bounded(data, data_end, l3, 20).ok_or(ParseError::Truncated)?;
    // SAFETY: every read is inside the 20 bytes just checked.
    let (version_ihl, tos, total_len, id, frag, proto, src, dst) = unsafe {
        (
            byte(p, 0),
            byte(p, 1),
            be16_at(p, 2),
            be16_at(p, 4),
            be16_at(p, 6),
            byte(p, 9),
            word_at(p, 12),
            word_at(p, 16),
        )
    };
    if version_ihl >> 4 != 4 {
        return Err(ParseError::BadHeader);
    }
    let ihl = usize::from(version_ihl & 0x0f) * 4;
    if ihl < 20 {
        return Err(ParseError::BadHeader);
    }
    if data + l3 + ihl > data_end {
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
    frame.src_addr[0] = src;
    frame.dst_addr[0] = dst;
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
    read_ports(data, data_end, frame);
    Ok(())
}

#[inline(always)]
fn parse_ipv6(
    data: usize,
    data_end: usize,
    frame_len: usize,
    frame: &mut ParsedFrame,
) -> Result<(), ParseError> {
    let l3 = (frame.l3_offset as usize) & 0x1f;
    let p = bounded(data, data_end, l3, 40).ok_or(ParseError::Truncated)?;
    // SAFETY: every read is inside the 40 bytes just checked.
    let (b0, b1, payload_len, first_next) =
        unsafe { (byte(p, 0), byte(p, 1), be16_at(p, 4), byte(p, 6)) };
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
    // SAFETY: as above (bytes 8..40).
    unsafe {
        frame.src_addr = [
            word_at(p, 8),
            word_at(p, 12),
            word_at(p, 16),
            word_at(p, 20),
        ];
        frame.dst_addr = [
            word_at(p, 24),
            word_at(p, 28),
            word_at(p, 32),
            word_at(p, 36),
        ];
    }
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
        let Some(ext) = bounded(data, data_end, off, 8) else {
            break;
        };
        // SAFETY: inside the 8 bytes just checked.
        let (ext_next, ext_len, frag, id) =
            unsafe { (byte(ext, 0), byte(ext, 1), be16_at(ext, 2), word_at(ext, 4)) };
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
    read_ports(data, data_end, frame);
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
fn read_ports(data: usize, data_end: usize, frame: &mut ParsedFrame) {
    let header_len = match frame.proto {
        IPPROTO_TCP => 20,
        IPPROTO_UDP => 8,
        _ => return,
    };
    let l4 = (frame.l4_offset as usize) & 0xffff;
    if l4 + header_len > frame.ip_end as usize || data + l4 + header_len > data_end {
        frame.flags |= FLAG_L4_TRUNCATED;
        return;
    }
    let Some(p) = bounded(data, data_end, l4, 4) else {
        frame.flags |= FLAG_L4_TRUNCATED;
        return;
    };
    // SAFETY: inside the 4 bytes just checked.
    let (src_port, dst_port) = unsafe { (be16_at(p, 0), be16_at(p, 2)) };
    frame.src_port = src_port;
    frame.dst_port = dst_port;
    frame.flags |= FLAG_HAS_PORTS;
}
