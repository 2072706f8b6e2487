//! Ethernet II frames (no FCS): destination, source, EtherType, payload.

use crate::{Error, Result};

pub type Mac = [u8; 6];

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
    pub const PAYLOAD: usize = 14;
}

/// Length of the Ethernet header.
pub const HEADER_LEN: usize = field::PAYLOAD;
/// Shortest frame on the wire without FCS; shorter ones are padded.
pub const MIN_FRAME_LEN: usize = 60;

view! {
    /// A view of an Ethernet frame.
    Frame
}

fields! {
    Frame {
        /// The type field: an EtherType, or the TPID of a first VLAN tag.
        ethertype / set_ethertype: u16 = field::ETHERTYPE;
    }
}

impl<T: AsRef<[u8]>> Frame<T> {
    pub fn check_len(&self) -> Result<()> {
        if self.data().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn dst(&self) -> Mac {
        mac(&self.data()[field::DST])
    }

    pub fn src(&self) -> Mac {
        mac(&self.data()[field::SRC])
    }

    pub fn payload(&self) -> &[u8] {
        &self.data()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    pub fn set_dst(&mut self, mac: Mac) {
        self.data_mut()[field::DST].copy_from_slice(&mac);
    }

    pub fn set_src(&mut self, mac: Mac) {
        self.data_mut()[field::SRC].copy_from_slice(&mac);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.data_mut()[field::PAYLOAD..]
    }
}

fn mac(b: &[u8]) -> Mac {
    let mut m = [0u8; 6];
    m.copy_from_slice(b);
    m
}

/// The fields of an Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub dst: Mac,
    pub src: Mac,
    pub ethertype: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Self {
        Self {
            dst: frame.dst(),
            src: frame.src(),
            ethertype: frame.ethertype(),
        }
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut f = Frame::new_checked(buf)?;
        f.set_dst(self.dst);
        f.set_src(self.src);
        f.set_ethertype(self.ethertype);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethertype;

    const FIXTURE: [u8; 16] = [
        0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, 0xaa, 0xbb,
    ];

    #[test]
    fn parse_fixture() {
        let f = Frame::new_checked(&FIXTURE[..]).expect("frame");
        assert_eq!(f.dst(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(f.src(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(f.ethertype(), ethertype::IPV4);
        assert_eq!(f.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn emit_fixture() {
        let mut buf = [0u8; 16];
        buf[14..].copy_from_slice(&[0xaa, 0xbb]);
        Repr::parse(&Frame::new_checked(&FIXTURE[..]).expect("frame"))
            .emit(&mut buf)
            .expect("room");
        assert_eq!(buf, FIXTURE);
    }

    #[test]
    fn short_buffers_are_refused() {
        assert_eq!(
            Frame::new_checked(&FIXTURE[..13]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            Repr::parse(&Frame::new_unchecked(&FIXTURE[..])).emit(&mut [0; 13]),
            Err(Error::Truncated)
        );
    }
}
