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
//!   [`ParseError::NotIp`] (ARP, LLDP, a third tag, `0x88a8` inside a tag).
//! * **IPv4**: the 20-byte fixed header must be present, version 4,
//!   `IHL >= 5`, the header with its options inside the linear data, and
//!   `IHL*4 <= total length`, `l3 + total length <= frame length`; otherwise the
//!   frame is [`ParseError::Truncated`] or [`ParseError::BadHeader`]. Options
//!   are skipped, never read.
//! * **IPv6**: the 40-byte header present, version 6, `l3 + 40 + payload
//!   length <= frame length`. Extension headers hop-by-hop (0), routing (43),
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
    /// VLAN tags skipped (0..=2).
    pub vlan_tags: u8,
    /// Host byte order; 0 unless [`FLAG_HAS_PORTS`].
    pub src_port: u16,
    pub dst_port: u16,
    /// Network byte order; an IPv4 address fills the first 4 bytes.
    pub src_addr: [u8; 16],
    pub dst_addr: [u8; 16],
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
}

/// Reads a `T` at `data + off` if it lies entirely before `data_end`.
#[inline(always)]
fn load<T: Copy>(data: usize, data_end: usize, off: usize) -> Option<T> {
    let start = data + off;
    if start + core::mem::size_of::<T>() > data_end {
        return None;
    }
    // SAFETY: `[start, start + size_of::<T>())` lies inside the frame, which
    // the kernel maps readable from `data` to `data_end`; read_unaligned has
    // no alignment requirement.
    Some(unsafe { (start as *const T).read_unaligned() })
}

#[inline(always)]
fn load_be16(data: usize, data_end: usize, off: usize) -> Option<u16> {
    load::<[u8; 2]>(data, data_end, off).map(u16::from_be_bytes)
}

/// Parses the frame at `[data, data_end)`; `frame_len` is the whole frame's
/// length (larger than `data_end - data` for non-linear frames), used only
/// for the IP length sanity checks.
#[inline(always)]
pub fn parse_frame(data: usize, data_end: usize, frame_len: usize) -> Result<ParsedFrame, ParseError> {
    let mut ethertype = load_be16(data, data_end, 12).ok_or(ParseError::Truncated)?;
    let mut l3 = ETH_HLEN;
    let mut vlan_tags = 0u8;
    if ethertype == ETH_P_8021AD || ethertype == ETH_P_8021Q {
        ethertype = load_be16(data, data_end, l3 + 2).ok_or(ParseError::Truncated)?;
        l3 += 4;
        vlan_tags = 1;
        if ethertype == ETH_P_8021Q {
            ethertype = load_be16(data, data_end, l3 + 2).ok_or(ParseError::Truncated)?;
            l3 += 4;
            vlan_tags = 2;
        }
    }
    let mut frame = ParsedFrame {
        l3_offset: l3 as u32,
        l4_offset: 0,
        ip_end: 0,
        ip_version: 0,
        proto: 0,
        dscp: 0,
        flags: 0,
        vlan_tags,
        src_port: 0,
        dst_port: 0,
        src_addr: [0; 16],
        dst_addr: [0; 16],
    };
    match ethertype {
        ETH_P_IPV4 => parse_ipv4(data, data_end, frame_len, &mut frame)?,
        ETH_P_IPV6 => parse_ipv6(data, data_end, frame_len, &mut frame)?,
        _ => return Err(ParseError::NotIp),
    }
    Ok(frame)
}

/// The fixed IPv4 header, as far as the parser reads it.
#[derive(Clone, Copy)]
#[repr(C)]
struct Ipv4Fixed {
    version_ihl: u8,
    tos: u8,
    total_len: [u8; 2],
    id: [u8; 2],
    frag: [u8; 2],
    ttl: u8,
    proto: u8,
    csum: [u8; 2],
    src: [u8; 4],
    dst: [u8; 4],
}

#[inline(always)]
fn parse_ipv4(data: usize, data_end: usize, frame_len: usize, frame: &mut ParsedFrame) -> Result<(), ParseError> {
    // l3 is at most 22 (two tags); masking keeps that visible to the verifier.
    let l3 = (frame.l3_offset as usize) & 0x1f;
    let hdr: Ipv4Fixed = load(data, data_end, l3).ok_or(ParseError::Truncated)?;
    if hdr.version_ihl >> 4 != 4 {
        return Err(ParseError::BadHeader);
    }
    let ihl = usize::from(hdr.version_ihl & 0x0f) * 4;
    if ihl < 20 {
        return Err(ParseError::BadHeader);
    }
    if data + l3 + ihl > data_end {
        return Err(ParseError::Truncated);
    }
    let total_len = usize::from(u16::from_be_bytes(hdr.total_len));
    if total_len < ihl {
        return Err(ParseError::BadHeader);
    }
    if l3 + total_len > frame_len {
        return Err(ParseError::Truncated);
    }
    let frag = u16::from_be_bytes(hdr.frag);
    let more_fragments = frag & 0x2000 != 0;
    let offset = frag & 0x1fff;

    frame.ip_version = 4;
    frame.proto = hdr.proto;
    frame.dscp = hdr.tos >> 2;
    frame.src_addr[..4].copy_from_slice(&hdr.src);
    frame.dst_addr[..4].copy_from_slice(&hdr.dst);
    frame.l4_offset = (l3 + ihl) as u32;
    frame.ip_end = (l3 + total_len) as u32;
    if more_fragments || offset != 0 {
        frame.flags |= FLAG_FRAGMENT;
    }
    if offset != 0 {
        frame.flags |= FLAG_LATER_FRAGMENT;
        return Ok(());
    }
    read_ports(data, data_end, frame);
    Ok(())
}

/// The fixed IPv6 header, as far as the parser reads it.
#[derive(Clone, Copy)]
#[repr(C)]
struct Ipv6Fixed {
    vtc_flow: [u8; 4],
    payload_len: [u8; 2],
    next_header: u8,
    hop_limit: u8,
    src: [u8; 16],
    dst: [u8; 16],
}

#[inline(always)]
fn parse_ipv6(data: usize, data_end: usize, frame_len: usize, frame: &mut ParsedFrame) -> Result<(), ParseError> {
    let l3 = (frame.l3_offset as usize) & 0x1f;
    let hdr: Ipv6Fixed = load(data, data_end, l3).ok_or(ParseError::Truncated)?;
    if hdr.vtc_flow[0] >> 4 != 6 {
        return Err(ParseError::BadHeader);
    }
    let ip_end = l3 + 40 + usize::from(u16::from_be_bytes(hdr.payload_len));
    if ip_end > frame_len {
        return Err(ParseError::Truncated);
    }
    let traffic_class = ((hdr.vtc_flow[0] & 0x0f) << 4) | (hdr.vtc_flow[1] >> 4);
    frame.ip_version = 6;
    frame.dscp = traffic_class >> 2;
    frame.src_addr = hdr.src;
    frame.dst_addr = hdr.dst;
    frame.ip_end = ip_end as u32;

    let mut next = hdr.next_header;
    let mut off = l3 + 40;
    let mut finished = false;
    for _ in 0..MAX_IPV6_EXT_HEADERS {
        let len = match next {
            IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS | IPPROTO_AH | IPPROTO_FRAGMENT => {
                // Every extension header is at least 8 bytes long.
                let Some(ext) = load::<[u8; 8]>(data, data_end, off) else {
                    break;
                };
                let len = match next {
                    IPPROTO_FRAGMENT => 8,
                    IPPROTO_AH => (usize::from(ext[1]) + 2) * 4,
                    _ => (usize::from(ext[1]) + 1) * 8,
                };
                if off + len > ip_end {
                    break;
                }
                if next == IPPROTO_FRAGMENT {
                    let frag = u16::from_be_bytes([ext[2], ext[3]]);
                    if frag & 0xfff9 != 0 {
                        frame.flags |= FLAG_FRAGMENT;
                    }
                    if frag >> 3 != 0 {
                        frame.flags |= FLAG_LATER_FRAGMENT;
                        frame.proto = ext[0];
                        return Ok(());
                    }
                }
                next = ext[0];
                len
            }
            _ => {
                finished = true;
                break;
            }
        };
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
    let Some(ports) = load::<[u8; 4]>(data, data_end, l4) else {
        frame.flags |= FLAG_L4_TRUNCATED;
        return;
    };
    frame.src_port = u16::from_be_bytes([ports[0], ports[1]]);
    frame.dst_port = u16::from_be_bytes([ports[2], ports[3]]);
    frame.flags |= FLAG_HAS_PORTS;
}
