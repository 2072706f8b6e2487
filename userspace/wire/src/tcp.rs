//! TCP segments (RFC 9293): the fixed header, options as bytes, and the
//! checksum over either IP version.

use crate::checksum::IpPair;
use crate::{ip_proto, Error, Result};

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const OFF_FLAGS: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
    pub const OPTIONS: usize = 20;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = field::OPTIONS;

/// Flag bits of the flags byte.
pub mod flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
}

view! {
    /// A view of a TCP segment (the buffer ends where the IP payload ends).
    Packet
}

fields! {
    Packet {
        src_port / set_src_port: u16 = field::SRC_PORT;
        dst_port / set_dst_port: u16 = field::DST_PORT;
        seq / set_seq: u32 = field::SEQ;
        ack / set_ack: u32 = field::ACK;
        /// The flags byte ([`flags`]).
        flags / set_flags: u8 = field::FLAGS;
        window / set_window: u16 = field::WINDOW;
        checksum / set_checksum: u16 = field::CHECKSUM;
        urgent / set_urgent: u16 = field::URGENT;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<()> {
        let len = self.data().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.header_len() < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.data()[field::OFF_FLAGS] >> 4) * 4
    }

    pub fn options(&self) -> &[u8] {
        &self.data()[field::OPTIONS..self.header_len()]
    }

    pub fn payload(&self) -> &[u8] {
        &self.data()[self.header_len()..]
    }

    pub fn verify_checksum(&self, addrs: &IpPair) -> bool {
        addrs.upper_layer_checksum(ip_proto::TCP, self.data()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Data offset for a header of `len` bytes (a multiple of 4, 20..=60).
    pub fn set_header_len(&mut self, len: usize) {
        self.data_mut()[field::OFF_FLAGS] = ((len / 4) as u8) << 4;
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.data_mut()[start..]
    }

    /// Computes and writes the checksum over the whole buffer.
    pub fn fill_checksum(&mut self, addrs: &IpPair) {
        self.set_checksum(0);
        let sum = addrs.upper_layer_checksum(ip_proto::TCP, self.data());
        self.set_checksum(sum);
    }
}

/// The fields of an option-less TCP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
}

impl Repr {
    /// The fields of a checked segment; options are `Malformed` here.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        if p.header_len() != HEADER_LEN {
            return Err(Error::Malformed);
        }
        Ok(Self {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq(),
            ack: p.ack(),
            flags: p.flags(),
            window: p.window(),
        })
    }

    /// Writes the 20-byte header with checksum 0 into `buf`; fill the
    /// payload, then [`Packet::fill_checksum`] if the segment needs one.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let mut p = Packet::new_unchecked(buf);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq(self.seq);
        p.set_ack(self.ack);
        p.set_header_len(HEADER_LEN);
        p.set_flags(self.flags);
        p.set_window(self.window);
        p.set_checksum(0);
        p.set_urgent(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SYN from 40000 to 5201, seq 1, window 65535, over fd00::1 → fd00::2.
    const FIXTURE: [u8; 20] = [
        0x9c, 0x40, 0x14, 0x51, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0x05, 0x4c, 0, 0,
    ];

    fn addrs() -> IpPair {
        IpPair::V6("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap())
    }

    fn repr() -> Repr {
        Repr {
            src_port: 40000,
            dst_port: 5201,
            seq: 1,
            ack: 0,
            flags: flags::SYN,
            window: 0xffff,
        }
    }

    #[test]
    fn parse_fixture() {
        let p = Packet::new_checked(&FIXTURE[..]).expect("segment");
        assert_eq!(Repr::parse(&p), Ok(repr()));
        assert!(p.verify_checksum(&addrs()));
        assert!(p.payload().is_empty() && p.options().is_empty());
    }

    #[test]
    fn emit_fixture() {
        let mut buf = [0xeeu8; 20];
        repr().emit(&mut buf).expect("room");
        Packet::new_unchecked(&mut buf[..]).fill_checksum(&addrs());
        assert_eq!(buf, FIXTURE);
    }

    #[test]
    fn data_offsets_that_lie_are_refused() {
        let mut b = FIXTURE;
        b[12] = 0x40;
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Malformed));
        b[12] = 0x60;
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Truncated));
        assert_eq!(
            Packet::new_checked(&FIXTURE[..19]).err(),
            Some(Error::Truncated)
        );
    }
}
