//! Builds raw Ethernet frames for the classifier tests and benchmark.

use std::net::{Ipv4Addr, Ipv6Addr};

pub const ETH_IPV4: u16 = 0x0800;
pub const ETH_IPV6: u16 = 0x86dd;
pub const ETH_ARP: u16 = 0x0806;
pub const ETH_LLDP: u16 = 0x88cc;
pub const TPID_8021Q: u16 = 0x8100;
pub const TPID_8021AD: u16 = 0x88a8;

/// Ethernet header; each entry of `tags` is a TPID followed by a TCI.
pub fn eth(tags: &[u16], ethertype: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02];
    for (i, tpid) in tags.iter().enumerate() {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&(100 + i as u16).to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// Fields of an IPv4 header; `frag` is the raw flags+offset field.
#[derive(Clone, Copy, Debug)]
pub struct V4 {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub proto: u8,
    pub dscp: u8,
    pub frag: u16,
    /// Bytes of options (a multiple of 4, at most 40).
    pub options: usize,
}

impl V4 {
    pub fn new(src: [u8; 4], dst: [u8; 4], proto: u8) -> Self {
        Self {
            src: src.into(),
            dst: dst.into(),
            proto,
            dscp: 0,
            frag: 0,
            options: 0,
        }
    }
}

/// IPv4 header (total length and checksum filled in) followed by `payload`.
pub fn ipv4(h: V4, payload: &[u8]) -> Vec<u8> {
    let ihl = 5 + h.options / 4;
    let total = (ihl * 4 + payload.len()) as u16;
    let mut p = vec![0x40 | ihl as u8, h.dscp << 2];
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&[0x12, 0x34]);
    p.extend_from_slice(&h.frag.to_be_bytes());
    p.extend_from_slice(&[64, h.proto, 0, 0]);
    p.extend_from_slice(&h.src.octets());
    p.extend_from_slice(&h.dst.octets());
    for i in 0..h.options {
        p.push(if i + 1 == h.options { 0 } else { 1 }); // NOPs, then end of options
    }
    let sum = checksum(&p[..ihl * 4]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Fields of an IPv6 header.
#[derive(Clone, Copy, Debug)]
pub struct V6 {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next: u8,
    pub dscp: u8,
}

impl V6 {
    pub fn new(src: &str, dst: &str, next: u8) -> Self {
        Self {
            src: src.parse().expect("IPv6 source"),
            dst: dst.parse().expect("IPv6 destination"),
            next,
            dscp: 0,
        }
    }
}

/// IPv6 header (payload length filled in) followed by `payload`.
pub fn ipv6(h: V6, payload: &[u8]) -> Vec<u8> {
    let tclass = h.dscp << 2;
    let mut p = vec![0x60 | (tclass >> 4), (tclass << 4) | 0x0a, 0xbc, 0xde];
    p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    p.extend_from_slice(&[h.next, 64]);
    p.extend_from_slice(&h.src.octets());
    p.extend_from_slice(&h.dst.octets());
    p.extend_from_slice(payload);
    p
}

/// An IPv6 extension header of `kind` whose length field is `len_field`:
/// hop-by-hop (0), routing (43), destination options (60) are
/// `(len_field + 1) * 8` bytes long, AH (51) `(len_field + 2) * 4` bytes.
pub fn ext(kind: u8, next: u8, len_field: u8) -> Vec<u8> {
    let size = match kind {
        51 => (usize::from(len_field) + 2) * 4,
        _ => (usize::from(len_field) + 1) * 8,
    };
    let mut h = vec![next, len_field];
    h.resize(size, 0);
    if kind == 43 {
        h[2] = 4; // routing type (segment routing), segments left 0
    }
    h
}

/// IPv6 fragment header.
pub fn frag6(next: u8, offset_units: u16, more: bool) -> Vec<u8> {
    let field = (offset_units << 3) | u16::from(more);
    let mut h = vec![next, 0];
    h.extend_from_slice(&field.to_be_bytes());
    h.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    h
}

/// UDP header (length filled in) followed by `payload_len` bytes.
pub fn udp(sport: u16, dport: u16, payload_len: usize) -> Vec<u8> {
    let mut u = sport.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload_len) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend((0..payload_len).map(|i| i as u8));
    u
}

/// TCP header (20 bytes, SYN) followed by `payload_len` bytes.
pub fn tcp(sport: u16, dport: u16, payload_len: usize) -> Vec<u8> {
    let mut t = sport.to_be_bytes().to_vec();
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend((0..payload_len).map(|i| i as u8));
    t
}

/// Concatenates parts into one frame.
pub fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Pads a frame with zeros to at least `len` bytes (Ethernet minimum: 60).
pub fn pad(mut frame: Vec<u8>, len: usize) -> Vec<u8> {
    if frame.len() < len {
        frame.resize(len, 0);
    }
    frame
}

/// An ARP request, padded to the Ethernet minimum.
pub fn arp() -> Vec<u8> {
    let mut f = eth(&[], ETH_ARP);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&[
        0x02, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
    ]);
    pad(f, 60)
}
