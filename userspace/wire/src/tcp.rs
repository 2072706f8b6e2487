//! TCP segments (RFC 9293): the fixed header, options as bytes, and the
//! checksum over either IP version.

use crate::bytes::{put_u16, put_u32, u16_at, u32_at};
use crate::checksum::IpPair;
use crate::{ip_proto, Error, Result};

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const OFF_FLAGS: usize = 12;
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

/// A view of a TCP segment (the buffer ends where the IP payload ends).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// A view whose accessors cannot panic: the data offset is at least
    /// the fixed header and inside the buffer.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
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

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn data(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn src_port(&self) -> u16 {
        u16_at(self.data(), field::SRC_PORT)
    }

    pub fn dst_port(&self) -> u16 {
        u16_at(self.data(), field::DST_PORT)
    }

    pub fn seq(&self) -> u32 {
        u32_at(self.data(), field::SEQ)
    }

    pub fn ack(&self) -> u32 {
        u32_at(self.data(), field::ACK)
    }

    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.data()[field::OFF_FLAGS] >> 4) * 4
    }

    /// The flags byte ([`flags`]).
    pub fn flags(&self) -> u8 {
        self.data()[field::OFF_FLAGS + 1]
    }

    pub fn window(&self) -> u16 {
        u16_at(self.data(), field::WINDOW)
    }

    pub fn checksum(&self) -> u16 {
        u16_at(self.data(), field::CHECKSUM)
    }

    pub fn urgent(&self) -> u16 {
        u16_at(self.data(), field::URGENT)
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
    fn data_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    pub fn set_src_port(&mut self, port: u16) {
        put_u16(self.data_mut(), field::SRC_PORT, port);
    }

    pub fn set_dst_port(&mut self, port: u16) {
        put_u16(self.data_mut(), field::DST_PORT, port);
    }

    pub fn set_seq(&mut self, v: u32) {
        put_u32(self.data_mut(), field::SEQ, v);
    }

    pub fn set_ack(&mut self, v: u32) {
        put_u32(self.data_mut(), field::ACK, v);
    }

    /// Data offset for a header of `len` bytes (a multiple of 4, 20..=60).
    pub fn set_header_len(&mut self, len: usize) {
        self.data_mut()[field::OFF_FLAGS] = ((len / 4) as u8) << 4;
    }

    pub fn set_flags(&mut self, f: u8) {
        self.data_mut()[field::OFF_FLAGS + 1] = f;
    }

    pub fn set_window(&mut self, w: u16) {
        put_u16(self.data_mut(), field::WINDOW, w);
    }

    pub fn set_checksum(&mut self, v: u16) {
        put_u16(self.data_mut(), field::CHECKSUM, v);
    }

    pub fn set_urgent(&mut self, v: u16) {
        put_u16(self.data_mut(), field::URGENT, v);
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
