//! A pure reference model of the XDP ingress classifier: parser and rule
//! matcher over a whole frame in a byte slice, written independently of the
//! kernel code (`ebpf/src/parse.rs`, `ebpf/src/classify.rs`) from the same
//! documented rules, so that a differential test can compare the two.
//!
//! Parser rules (see `ebpf/src/parse.rs` for the full text):
//! Ethernet, then at most two VLAN tags (outer `0x88a8` or `0x8100`, inner
//! `0x8100`), then IPv4 or IPv6 — anything else is unclassified. IP headers
//! must be complete, sane and inside the frame (else unclassified). Ports come
//! only from TCP/UDP headers fully inside the datagram, never from non-first
//! fragments. IPv6 extension headers (0, 43, 44, 51, 60) are walked at most
//! `MAX_IPV6_EXT_HEADERS` deep; when the walk cannot finish, the protocol is
//! the last Next Header value seen and there are no ports.
//!
//! Matching: rules in priority order, the first whose every present field
//! accepts the frame wins; a rule with a port range never matches a frame
//! without ports; no match → `DEFAULT_CLASS`, pass.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bpf_maps::classifier::{DEFAULT_CLASS, MAX_IPV6_EXT_HEADERS};

use super::rule::{RuleSet, Verdict};

/// Why a frame is not classified (it passes, counted as unclassified).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unclassified {
    Truncated,
    NotIp,
    BadHeader,
}

/// The fields rules look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameFields {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub dscp: u8,
    /// (source, destination), when the frame carries a complete TCP/UDP header.
    pub ports: Option<(u16, u16)>,
}

/// What the classifier does with one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Unclassified(Unclassified),
    Classified {
        class: u8,
        verdict: Verdict,
        /// Index of the winning rule in priority order.
        rule: Option<usize>,
    },
}

/// Parses and classifies `frame` with `rules`.
pub fn evaluate(rules: &RuleSet, frame: &[u8]) -> Outcome {
    match parse(frame) {
        Err(why) => Outcome::Unclassified(why),
        Ok(fields) => match first_match(rules, &fields) {
            Some(i) => {
                let r = &rules.rules()[i];
                Outcome::Classified {
                    class: r.class,
                    verdict: r.verdict,
                    rule: Some(i),
                }
            }
            None => Outcome::Classified {
                class: DEFAULT_CLASS as u8,
                verdict: Verdict::Pass,
                rule: None,
            },
        },
    }
}

/// Index (in priority order) of the first rule that accepts `fields`.
pub fn first_match(rules: &RuleSet, fields: &FrameFields) -> Option<usize> {
    rules.rules().iter().position(|r| {
        let prefixes = r.src.is_none_or(|p| p.contains(fields.src))
            && r.dst.is_none_or(|p| p.contains(fields.dst));
        let proto =
            r.proto.is_none_or(|p| p == fields.proto) && r.dscp.is_none_or(|d| d == fields.dscp);
        let ports = match fields.ports {
            Some((s, d)) => {
                r.src_ports.is_none_or(|p| p.contains(s))
                    && r.dst_ports.is_none_or(|p| p.contains(d))
            }
            None => r.src_ports.is_none() && r.dst_ports.is_none(),
        };
        prefixes && proto && ports
    })
}

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
        _ => Err(Unclassified::NotIp),
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
    let datagram = frame
        .get(l3..l3 + total_len)
        .ok_or(Unclassified::Truncated)?;
    let fragment_offset = u16::from_be_bytes([fixed[6], fixed[7]]) & 0x1fff;
    let proto = fixed[9];
    let ports = if fragment_offset == 0 {
        transport_ports(proto, &datagram[header_len..])
    } else {
        None
    };
    Ok(FrameFields {
        src: IpAddr::V4(Ipv4Addr::new(fixed[12], fixed[13], fixed[14], fixed[15])),
        dst: IpAddr::V4(Ipv4Addr::new(fixed[16], fixed[17], fixed[18], fixed[19])),
        proto,
        dscp: fixed[1] >> 2,
        ports,
    })
}

fn parse_v6(frame: &[u8], l3: usize) -> Result<FrameFields, Unclassified> {
    let fixed = frame.get(l3..l3 + 40).ok_or(Unclassified::Truncated)?;
    if fixed[0] >> 4 != 6 {
        return Err(Unclassified::BadHeader);
    }
    let payload_len = usize::from(u16::from_be_bytes([fixed[4], fixed[5]]));
    let mut rest = frame
        .get(l3 + 40..l3 + 40 + payload_len)
        .ok_or(Unclassified::Truncated)?;
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
    };

    let mut next = fixed[6];
    let mut walked = 0;
    loop {
        let is_extension = matches!(next, 0 | 43 | 44 | 51 | 60);
        if !is_extension {
            fields.proto = next;
            fields.ports = transport_ports(next, rest);
            return Ok(fields);
        }
        // Chain too long, or the next extension header does not fit: the
        // protocol is the last Next Header seen, and there are no ports.
        fields.proto = next;
        if walked == MAX_IPV6_EXT_HEADERS || rest.len() < 8 {
            return Ok(fields);
        }
        let size = match next {
            44 => 8,
            51 => (usize::from(rest[1]) + 2) * 4,
            _ => (usize::from(rest[1]) + 1) * 8,
        };
        if rest.len() < size {
            return Ok(fields);
        }
        if next == 44 && u16::from_be_bytes([rest[2], rest[3]]) >> 3 != 0 {
            // A non-first fragment: the declared protocol, no L4 header.
            fields.proto = rest[0];
            return Ok(fields);
        }
        next = rest[0];
        rest = &rest[size..];
        walked += 1;
    }
}

/// Ports of a TCP/UDP header at the start of `l4`, if its fixed part is complete.
fn transport_ports(proto: u8, l4: &[u8]) -> Option<(u16, u16)> {
    let fixed_len = match proto {
        6 => 20,
        17 => 8,
        _ => return None,
    };
    if l4.len() < fixed_len {
        return None;
    }
    Some((be16(l4, 0)?, be16(l4, 2)?))
}

#[cfg(test)]
#[path = "reference_tests.rs"]
mod tests;
