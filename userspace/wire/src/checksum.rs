//! The internet checksum (RFC 1071): the IPv4 header's, and the UDP and TCP
//! checksums over the IPv4 (RFC 768/793) or IPv6 (RFC 8200 §8.1)
//! pseudo-header. The only implementation in Causeway's userspace.

use core::net::{Ipv4Addr, Ipv6Addr};

/// Ones'-complement sum of `data` as big-endian 16-bit words, folded to 16
/// bits and not complemented; an odd last byte is the high byte of a word.
pub fn sum(data: &[u8]) -> u16 {
    fold(add(0, data))
}

/// Ones'-complement sum of partial sums.
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&s| u64::from(s)).sum())
}

/// The checksum of `data`: the complement of its sum. A region whose
/// checksum field already holds the right value checksums to 0.
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

fn add(mut acc: u64, data: &[u8]) -> u64 {
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The source and destination of an IP packet, which the UDP and TCP
/// checksums cover through the pseudo-header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpPair {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

impl IpPair {
    /// Sum of the pseudo-header for upper-layer protocol `proto` and an
    /// upper-layer length of `len` bytes.
    pub fn pseudo_header_sum(&self, proto: u8, len: u32) -> u16 {
        let mut acc = match self {
            IpPair::V4(src, dst) => add(add(0, &src.octets()), &dst.octets()),
            IpPair::V6(src, dst) => add(add(0, &src.octets()), &dst.octets()),
        };
        acc += u64::from(proto);
        acc += u64::from(len >> 16) + u64::from(len & 0xffff);
        fold(acc)
    }

    /// The checksum of `segment` (an upper-layer header with its checksum
    /// field zeroed, or holding a value to verify, and its payload).
    pub fn upper_layer_checksum(&self, proto: u8, segment: &[u8]) -> u16 {
        let len = u32::try_from(segment.len()).unwrap_or(u32::MAX);
        !combine(&[self.pseudo_header_sum(proto, len), sum(segment)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: 0001 f203 f4f5 f6f7 sums to ddf2.
        assert_eq!(
            sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
        assert_eq!(sum(&[0xff]), 0xff00);
        assert_eq!(sum(&[]), 0);
    }

    #[test]
    fn ipv4_header_fixture() {
        // A header with a known checksum (the classic example from
        // Wikipedia's "IPv4 header checksum": b861).
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(checksum(&h), 0);
    }

    #[test]
    fn combining_partial_sums_equals_summing_the_whole() {
        let data: Vec<u8> = (0..=255u8).cycle().take(1001).collect();
        let (a, b) = data.split_at(500);
        assert_eq!(combine(&[sum(a), sum(b)]), sum(&data));
    }

    #[test]
    fn pseudo_headers_of_both_families() {
        let v4 = IpPair::V4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 1, 0, 2));
        let bytes = [10, 0, 0, 1, 10, 1, 0, 2, 0, 17, 0, 12];
        assert_eq!(v4.pseudo_header_sum(17, 12), sum(&bytes));
        let (s, d): (Ipv6Addr, Ipv6Addr) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&s.octets());
        bytes.extend_from_slice(&d.octets());
        bytes.extend_from_slice(&[0, 1, 0, 4, 0, 0, 0, 6]);
        assert_eq!(IpPair::V6(s, d).pseudo_header_sum(6, 0x1_0004), sum(&bytes));
    }
}
