//! IPv6 headers (RFC 8200) and their extension headers: hop-by-hop,
//! routing and destination options (8-byte units), the fragment header,
//! and AH (RFC 4302, 4-byte units).

use core::net::Ipv6Addr;

use crate::bytes::{put_u32, u32_at};
use crate::{Error, Result};

mod field {
    use core::ops::Range;
    pub const VER_TC_FLOW: usize = 0;
    pub const LENGTH: usize = 4;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
    pub const PAYLOAD: usize = 40;
}

pub const HEADER_LEN: usize = field::PAYLOAD;

pub use crate::ipv6ext::{is_extension, upper_layer, ExtHeader, ExtRepr, FRAGMENT_LEN};

view! {
    /// A view of an IPv6 packet.
    Packet
}

fields! {
    Packet {
        payload_len / set_payload_len: u16 = field::LENGTH;
        next_header / set_next_header: u8 = field::NXT_HDR;
        hop_limit / set_hop_limit: u8 = field::HOP_LIMIT;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<()> {
        let len = self.data().len();
        if len < HEADER_LEN || len < HEADER_LEN + usize::from(self.payload_len()) {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    fn word0(&self) -> u32 {
        u32_at(self.data(), field::VER_TC_FLOW)
    }

    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }

    /// The traffic class: DSCP (upper 6 bits) and ECN.
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0b11
    }

    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }

    pub fn src_addr(&self) -> Ipv6Addr {
        addr(&self.data()[field::SRC])
    }

    pub fn dst_addr(&self) -> Ipv6Addr {
        addr(&self.data()[field::DST])
    }

    /// Extension headers and upper layer, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &self.data()[field::PAYLOAD..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Version 6, `traffic_class` and the low 20 bits of `flow_label`.
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let word = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        put_u32(self.data_mut(), field::VER_TC_FLOW, word);
    }

    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.data_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.data_mut()[field::DST].copy_from_slice(&a.octets());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &mut self.data_mut()[field::PAYLOAD..end]
    }
}

fn addr(b: &[u8]) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(b);
    Ipv6Addr::from(o)
}

/// The fields of an IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

impl Repr {
    /// Hop limit 64, traffic class and flow label 0.
    pub fn new(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8) -> Self {
        Self {
            src,
            dst,
            next_header,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    /// The header fields of a checked packet; a wrong version is `Malformed`.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        if p.version() != 6 {
            return Err(Error::Malformed);
        }
        Ok(Self {
            src: p.src_addr(),
            dst: p.dst_addr(),
            next_header: p.next_header(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }

    /// Writes the header (payload length filled in) into `buf`, which must
    /// have room for the payload too; the payload bytes are left alone.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        let len = u16::try_from(payload_len).map_err(|_| Error::Malformed)?;
        if self.flow_label > 0x000f_ffff {
            return Err(Error::Malformed);
        }
        if buf.len() < HEADER_LEN + payload_len {
            return Err(Error::Truncated);
        }
        let mut p = Packet::new_unchecked(buf);
        p.set_version_tc_flow(self.traffic_class, self.flow_label);
        p.set_payload_len(len);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src);
        p.set_dst_addr(self.dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip_proto;

    /// fd00::1 → fd00::2, traffic class 0xb8, flow 0xabcde, hop-by-hop
    /// (8 bytes), fragment header (offset 0, M, id 0xdeadbeef), then UDP.
    const FIXTURE: [u8; 56] = [
        0x6b, 0x8a, 0xbc, 0xde, 0x00, 0x10, 0x00, 0x40, // ver tc flow, len 16, hbh, 64
        0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, // src
        0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, // dst
        44, 0, 0, 0, 0, 0, 0, 0, // hop-by-hop → fragment
        17, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef, // fragment → UDP
    ];

    fn repr() -> Repr {
        Repr {
            traffic_class: 0xb8,
            flow_label: 0xabcde,
            ..Repr::new("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap(), 0)
        }
    }

    #[test]
    fn parse_fixture() {
        let p = Packet::new_checked(&FIXTURE[..]).expect("packet");
        assert_eq!(
            (p.version(), p.dscp(), p.ecn(), p.flow_label()),
            (6, 46, 0, 0xabcde)
        );
        assert_eq!(Repr::parse(&p), Ok(repr()));
        let hbh = ExtHeader::new_checked(p.payload(), p.next_header()).expect("hbh");
        assert_eq!(
            (hbh.header_len(), hbh.next_header()),
            (8, ip_proto::FRAGMENT)
        );
        let frag = ExtHeader::new_checked(hbh.payload(), ip_proto::FRAGMENT).expect("frag");
        assert_eq!((frag.frag_offset_units(), frag.more_frags()), (0, true));
        assert_eq!(frag.frag_ident(), 0xdead_beef);
        assert_eq!(upper_layer(&p, 8), Ok((ip_proto::UDP, 16)));
        assert_eq!(upper_layer(&p, 1), Err(Error::Malformed));
    }

    #[test]
    fn emit_fixture() {
        let mut buf = [0u8; 56];
        repr().emit(&mut buf, 16).expect("room");
        ExtRepr::Generic {
            kind: 0,
            next: 44,
            len_field: 0,
        }
        .emit(&mut buf[40..])
        .expect("room");
        ExtRepr::Fragment {
            next: 17,
            offset_units: 0,
            more: true,
            ident: 0xdead_beef,
        }
        .emit(&mut buf[48..])
        .expect("room");
        assert_eq!(buf, FIXTURE);
    }

    #[test]
    fn lengths_that_lie_are_refused() {
        let mut b = FIXTURE;
        b[5] = 17;
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Truncated));
        assert_eq!(
            Packet::new_checked(&FIXTURE[..39]).err(),
            Some(Error::Truncated)
        );
        // A routing header whose length runs past the packet.
        assert_eq!(
            ExtHeader::new_checked(&[17u8, 1, 0, 0, 0, 0, 0, 0][..], ip_proto::ROUTING).err(),
            Some(Error::Truncated)
        );
        // AH counts 4-byte units plus 2.
        let ah = [17u8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            ExtHeader::new_checked(&ah[..], ip_proto::AUTH).map(|h| h.header_len()),
            Ok(12)
        );
        assert_eq!(
            ExtHeader::new_checked(&ah[..], ip_proto::UDP).err(),
            Some(Error::Malformed)
        );
    }
}
