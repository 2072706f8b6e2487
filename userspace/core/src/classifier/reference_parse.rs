//! The reference model's frame parser (see `reference.rs` for the rules it
//! mirrors, and `ebpf/src/parse.rs` for the kernel's).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bpf_maps::classifier::MAX_IPV6_EXT_HEADERS;

use super::reference::{Fragment, FrameFields, Partial, Unclassified};

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// Parses a whole frame.
pub fn parse(frame: &[u8]) -> Result<FrameFields, Unclassified> {
    let mut ethertype = be16(frame, 12).ok_or(Unclassified::Truncated)?;
    let mut l3 = 14;
    for depth in 0..2 {
        let is_tag = ethertype == 0x8100 || (depth == 0 && ethertype == 0x88a8);
        if !is_tag {
            break;
        }
        ethertype = be16(frame, l3 + 2).ok_or(Unclassified::Truncated)?;
        l3 += 4;
    }
    match ethertype {
        0x0800 => parse_v4(frame, l3),
        0x86dd => parse_v6(frame, l3),
        0x8100 | 0x88a8 => Err(Unclassified::VlanDepth),
        _ => Err(Unclassified::NotIp),
    }
}

/// The datagram `[l3, l3 + len)`, cut at the frame's end (then `true`).
fn datagram(frame: &[u8], l3: usize, len: usize) -> (&[u8], bool) {
    let end = l3 + len;
    if end > frame.len() {
        (&frame[l3..], true)
    } else {
        (&frame[l3..end], false)
    }
}

fn parse_v4(frame: &[u8], l3: usize) -> Result<FrameFields, Unclassified> {
    let fixed = frame.get(l3..l3 + 20).ok_or(Unclassified::Truncated)?;
    if fixed[0] >> 4 != 4 {
        return Err(Unclassified::BadHeader);
    }
    let header_len = usize::from(fixed[0] & 0xf) * 4;
    if header_len < 20 {
        return Err(Unclassified::BadHeader);
    }
    if frame.len() < l3 + header_len {
        return Err(Unclassified::Truncated);
    }
    let total_len = usize::from(u16::from_be_bytes([fixed[2], fixed[3]]));
    if total_len < header_len {
        return Err(Unclassified::BadHeader);
    }
    let (datagram, overrun) = datagram(frame, l3, total_len);
    let frag = u16::from_be_bytes([fixed[6], fixed[7]]);
    let offset = frag & 0x1fff;
    let proto = fixed[9];
    let fragment = (frag & 0x3fff != 0).then_some(Fragment {
        id: u32::from(u16::from_be_bytes([fixed[4], fixed[5]])),
        proto,
        later: offset != 0,
    });
    let mut fields = FrameFields {
        src: IpAddr::V4(Ipv4Addr::new(fixed[12], fixed[13], fixed[14], fixed[15])),
        dst: IpAddr::V4(Ipv4Addr::new(fixed[16], fixed[17], fixed[18], fixed[19])),
        proto,
        dscp: fixed[1] >> 2,
        ports: None,
        partial: overrun.then_some(Partial::LengthOverrun),
        fragment,
    };
    if offset == 0 {
        transport(&mut fields, &datagram[header_len..]);
    }
    Ok(fields)
}

fn parse_v6(frame: &[u8], l3: usize) -> Result<FrameFields, Unclassified> {
    let fixed = frame.get(l3..l3 + 40).ok_or(Unclassified::Truncated)?;
    if fixed[0] >> 4 != 6 {
        return Err(Unclassified::BadHeader);
    }
    let payload_len = usize::from(u16::from_be_bytes([fixed[4], fixed[5]]));
    let (datagram, overrun) = datagram(frame, l3, 40 + payload_len);
    let mut rest = &datagram[40..];
    let traffic_class = (fixed[0] << 4) | (fixed[1] >> 4);
    let addr = |at: usize| -> IpAddr {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&fixed[at..at + 16]);
        IpAddr::V6(Ipv6Addr::from(octets))
    };
    let mut fields = FrameFields {
        src: addr(8),
        dst: addr(24),
        proto: fixed[6],
        dscp: traffic_class >> 2,
        ports: None,
        partial: overrun.then_some(Partial::LengthOverrun),
        fragment: None,
    };

    let mut next = fixed[6];
    let mut walked = 0;
    loop {
        let is_extension = matches!(next, 0 | 43 | 44 | 51 | 60);
        fields.proto = next;
        if !is_extension {
            transport(&mut fields, rest);
            return Ok(fields);
        }
        // Chain too long, or the next extension header does not fit: the
        // protocol is the last Next Header seen, and there are no ports.
        let size = match next {
            44 => 8,
            51 => (usize::from(*rest.get(1).unwrap_or(&0)) + 2) * 4,
            _ => (usize::from(*rest.get(1).unwrap_or(&0)) + 1) * 8,
        };
        if walked == MAX_IPV6_EXT_HEADERS || rest.len() < 8 || rest.len() < size {
            fields.partial = fields.partial.or(Some(Partial::ExtChain));
            return Ok(fields);
        }
        if next == 44 {
            let frag = u16::from_be_bytes([rest[2], rest[3]]);
            if frag & 0xfff9 != 0 {
                fields.fragment = Some(Fragment {
                    id: u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]),
                    proto: rest[0],
                    later: frag >> 3 != 0,
                });
            }
            if frag >> 3 != 0 {
                // A non-first fragment: the declared protocol, no L4 header.
                fields.proto = rest[0];
                return Ok(fields);
            }
        }
        next = rest[0];
        rest = &rest[size..];
        walked += 1;
    }
}

/// Ports of a TCP/UDP header at the start of `l4`, if its fixed part is
/// complete; a cut one is [`Partial::L4Truncated`].
fn transport(fields: &mut FrameFields, l4: &[u8]) {
    let fixed_len = match fields.proto {
        6 => 20,
        17 => 8,
        _ => return,
    };
    match (l4.len() >= fixed_len, be16(l4, 0), be16(l4, 2)) {
        (true, Some(s), Some(d)) => fields.ports = Some((s, d)),
        _ => fields.partial = fields.partial.or(Some(Partial::L4Truncated)),
    }
}
