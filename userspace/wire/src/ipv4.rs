//! IPv4 headers (RFC 791), options included.

use core::net::Ipv4Addr;

use crate::{checksum, Error, Result};

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
    pub const OPTIONS: usize = 20;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = field::OPTIONS;
/// Longest options area (IHL 15).
pub const MAX_OPTIONS_LEN: usize = 40;
/// "Don't fragment" in the flags+offset field.
pub const DONT_FRAG: u16 = 0x4000;
/// "More fragments" in the flags+offset field.
pub const MORE_FRAGS: u16 = 0x2000;

view! {
    /// A view of an IPv4 packet.
    Packet
}

fields! {
    Packet {
        total_len / set_total_len: u16 = field::LENGTH;
        ident / set_ident: u16 = field::IDENT;
        /// The raw flags and fragment offset field.
        frag_field / set_frag_field: u16 = field::FLG_OFF;
        ttl / set_ttl: u8 = field::TTL;
        protocol / set_protocol: u8 = field::PROTOCOL;
        checksum / set_checksum: u16 = field::CHECKSUM;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<()> {
        let len = self.data().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let (header, total) = (self.header_len(), usize::from(self.total_len()));
        if header < HEADER_LEN || total < header {
            return Err(Error::Malformed);
        }
        if len < total {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn version(&self) -> u8 {
        self.data()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.data()[field::VER_IHL] & 0x0f) * 4
    }

    pub fn dscp(&self) -> u8 {
        self.data()[field::DSCP_ECN] >> 2
    }

    pub fn ecn(&self) -> u8 {
        self.data()[field::DSCP_ECN] & 0b11
    }

    pub fn dont_frag(&self) -> bool {
        self.frag_field() & DONT_FRAG != 0
    }

    pub fn more_frags(&self) -> bool {
        self.frag_field() & MORE_FRAGS != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (self.frag_field() & 0x1fff) << 3
    }

    pub fn src_addr(&self) -> Ipv4Addr {
        addr(&self.data()[field::SRC])
    }

    pub fn dst_addr(&self) -> Ipv4Addr {
        addr(&self.data()[field::DST])
    }

    pub fn options(&self) -> &[u8] {
        &self.data()[field::OPTIONS..self.header_len()]
    }

    /// The payload up to the total length (link-layer padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.data()[self.header_len()..usize::from(self.total_len())]
    }

    /// Whether the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(&self.data()[..self.header_len()]) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Version 4 and a header of `len` bytes (a multiple of 4, 20..=60).
    pub fn set_version_and_header_len(&mut self, len: usize) {
        self.data_mut()[field::VER_IHL] = 0x40 | ((len / 4) as u8 & 0x0f);
    }

    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.data_mut()[field::DSCP_ECN] = (dscp << 2) | (ecn & 0b11);
    }

    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.data_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.data_mut()[field::DST].copy_from_slice(&a.octets());
    }

    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.data_mut()[field::OPTIONS..end]
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.header_len(), usize::from(self.total_len()));
        &mut self.data_mut()[start..end]
    }

    /// Computes and writes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::checksum(&self.data()[..self.header_len()]);
        self.set_checksum(sum);
    }
}

fn addr(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

/// The fields of an IPv4 header that Causeway sets or reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    pub dscp: u8,
    pub ecn: u8,
    pub ttl: u8,
    pub ident: u16,
    /// The raw flags and fragment offset field.
    pub frag: u16,
    /// Bytes of options (a multiple of 4, at most 40), emitted as NOPs
    /// ended by an end-of-options byte.
    pub options_len: usize,
}

impl Repr {
    /// TTL 64, nothing else set.
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8) -> Self {
        Self {
            src,
            dst,
            protocol,
            dscp: 0,
            ecn: 0,
            ttl: 64,
            ident: 0,
            frag: 0,
            options_len: 0,
        }
    }

    /// The header fields of a checked packet; wrong version or checksum is
    /// `Malformed`.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        if p.version() != 4 || !p.verify_checksum() {
            return Err(Error::Malformed);
        }
        Ok(Self {
            src: p.src_addr(),
            dst: p.dst_addr(),
            protocol: p.protocol(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ttl: p.ttl(),
            ident: p.ident(),
            frag: p.frag_field(),
            options_len: p.options().len(),
        })
    }

    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options_len
    }

    /// Writes the header (total length and checksum filled in) for a
    /// payload of `payload_len` bytes into `buf`, which must have room for
    /// both; the payload bytes are left as they are.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        if !self.options_len.is_multiple_of(4)
            || self.options_len > MAX_OPTIONS_LEN
            || self.dscp > 63
        {
            return Err(Error::Malformed);
        }
        let total = self.header_len() + payload_len;
        let total16 = u16::try_from(total).map_err(|_| Error::Malformed)?;
        if buf.len() < total {
            return Err(Error::Truncated);
        }
        let mut p = Packet::new_unchecked(buf);
        p.set_version_and_header_len(self.header_len());
        p.set_dscp_ecn(self.dscp, self.ecn);
        p.set_total_len(total16);
        p.set_ident(self.ident);
        p.set_frag_field(self.frag);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src);
        p.set_dst_addr(self.dst);
        let opts = p.options_mut();
        if let Some((end, nops)) = opts.split_last_mut() {
            nops.fill(1); // NOP
            *end = 0; // end of options
        }
        p.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip_proto;

    /// 10.1.0.1 → 10.1.0.2, UDP, DF, id 1, TTL 64, 8 bytes of payload.
    const FIXTURE: [u8; 28] = [
        0x45, 0x00, 0x00, 0x1c, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11, 0x26, 0xcc, 10, 1, 0, 1, 10, 1,
        0, 2, 1, 2, 3, 4, 5, 6, 7, 8,
    ];

    fn repr() -> Repr {
        Repr {
            ident: 1,
            frag: DONT_FRAG,
            ..Repr::new(
                Ipv4Addr::new(10, 1, 0, 1),
                Ipv4Addr::new(10, 1, 0, 2),
                ip_proto::UDP,
            )
        }
    }

    #[test]
    fn parse_fixture() {
        let p = Packet::new_checked(&FIXTURE[..]).expect("packet");
        assert_eq!((p.version(), p.header_len(), p.total_len()), (4, 20, 28));
        assert!(p.dont_frag() && !p.more_frags());
        assert_eq!((p.frag_offset(), p.ttl(), p.protocol()), (0, 64, 17));
        assert!(p.verify_checksum());
        assert_eq!(p.payload(), &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Repr::parse(&p), Ok(repr()));
    }

    #[test]
    fn emit_fixture() {
        let mut buf = FIXTURE;
        buf[..20].fill(0);
        repr().emit(&mut buf, 8).expect("room");
        assert_eq!(buf, FIXTURE);
    }

    #[test]
    fn options_are_nops_then_end() {
        let mut buf = [0u8; 32];
        Repr {
            options_len: 12,
            ..repr()
        }
        .emit(&mut buf, 0)
        .expect("room");
        let p = Packet::new_checked(&buf[..]).expect("packet");
        assert_eq!(p.header_len(), 32);
        assert_eq!(p.options(), &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]);
        assert!(p.verify_checksum());
    }

    #[test]
    fn lengths_that_lie_are_refused() {
        let mut b = FIXTURE;
        b[3] = 29; // total length past the buffer
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Truncated));
        b[3] = 19; // total length inside the header
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Malformed));
        let mut b = FIXTURE;
        b[0] = 0x44; // IHL 4
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Malformed));
        b[0] = 0x48; // IHL 8: 32 > 28
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Malformed));
        assert_eq!(
            Packet::new_checked(&FIXTURE[..19]).err(),
            Some(Error::Truncated)
        );
        let mut b = FIXTURE;
        b[11] ^= 1;
        let p = Packet::new_checked(&b[..]).expect("lengths fine");
        assert_eq!(Repr::parse(&p), Err(Error::Malformed), "bad checksum");
    }
}
