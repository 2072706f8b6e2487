//! UDP datagrams (RFC 768) and their checksum over either IP version.

use crate::checksum::IpPair;
use crate::{ip_proto, Error, Result};

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
    pub const PAYLOAD: usize = 8;
}

pub const HEADER_LEN: usize = field::PAYLOAD;

view! {
    /// A view of a UDP datagram.
    Packet
}

fields! {
    Packet {
        src_port / set_src_port: u16 = field::SRC_PORT;
        dst_port / set_dst_port: u16 = field::DST_PORT;
        /// The length field: header and payload.
        len / set_len: u16 = field::LENGTH;
        /// The checksum field; 0 means "none" (allowed over IPv4 only).
        checksum / set_checksum: u16 = field::CHECKSUM;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<()> {
        let len = self.data().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let field = usize::from(self.len());
        if field < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < field {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    pub fn payload(&self) -> &[u8] {
        &self.data()[field::PAYLOAD..usize::from(self.len())]
    }

    fn datagram(&self) -> &[u8] {
        &self.data()[..usize::from(self.len())]
    }

    /// Whether the checksum is right (a zero checksum is "none", right only
    /// over IPv4).
    pub fn verify_checksum(&self, addrs: &IpPair) -> bool {
        if self.checksum() == 0 {
            return matches!(addrs, IpPair::V4(..));
        }
        addrs.upper_layer_checksum(ip_proto::UDP, self.datagram()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.data_mut()[field::PAYLOAD..end]
    }

    /// Computes and writes the checksum; a computed 0 is sent as 0xffff.
    pub fn fill_checksum(&mut self, addrs: &IpPair) {
        self.set_checksum(0);
        let sum = addrs.upper_layer_checksum(ip_proto::UDP, self.datagram());
        self.set_checksum(if sum == 0 { 0xffff } else { sum });
    }
}

/// The ports of a UDP header (length and checksum follow from the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
        Self {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
        }
    }

    /// Writes the header for a payload of `payload_len` bytes with checksum
    /// 0 into `buf` (which has room for the payload); fill the payload,
    /// then [`Packet::fill_checksum`] if the datagram needs one.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        let len = HEADER_LEN + payload_len;
        let len16 = u16::try_from(len).map_err(|_| Error::Malformed)?;
        if buf.len() < len {
            return Err(Error::Truncated);
        }
        let mut p = Packet::new_unchecked(buf);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(len16);
        p.set_checksum(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    /// 12345 → 7007 over 10.0.0.1 → 10.1.0.2, "hi", checksum filled.
    const FIXTURE: [u8; 10] = [0x30, 0x39, 0x1b, 0x5f, 0x00, 0x0a, 0x37, 0xd5, b'h', b'i'];
    const ADDRS: IpPair = IpPair::V4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 1, 0, 2));

    #[test]
    fn parse_fixture() {
        let p = Packet::new_checked(&FIXTURE[..]).expect("datagram");
        assert_eq!(
            Repr::parse(&p),
            Repr {
                src_port: 12345,
                dst_port: 7007
            }
        );
        assert_eq!((p.len(), p.payload()), (10, &b"hi"[..]));
        assert!(p.verify_checksum(&ADDRS));
        let other = IpPair::V4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 1, 0, 3));
        assert!(!p.verify_checksum(&other), "the pseudo-header is covered");
    }

    #[test]
    fn emit_fixture() {
        let mut buf = [0u8; 10];
        Repr {
            src_port: 12345,
            dst_port: 7007,
        }
        .emit(&mut buf, 2)
        .expect("room");
        let mut p = Packet::new_checked(&mut buf[..]).expect("datagram");
        p.payload_mut().copy_from_slice(b"hi");
        p.fill_checksum(&ADDRS);
        assert_eq!(buf, FIXTURE);
    }

    #[test]
    fn zero_checksum_means_none_over_ipv4_only() {
        let mut b = FIXTURE;
        b[6..8].fill(0);
        let p = Packet::new_checked(&b[..]).expect("datagram");
        assert!(p.verify_checksum(&ADDRS));
        let v6 = IpPair::V6("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        assert!(!p.verify_checksum(&v6));
    }

    #[test]
    fn lengths_that_lie_are_refused() {
        let mut b = FIXTURE;
        b[5] = 11;
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Truncated));
        b[5] = 7;
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Malformed));
        assert_eq!(
            Packet::new_checked(&FIXTURE[..7]).err(),
            Some(Error::Truncated)
        );
    }
}
