//! 802.1Q VLAN tags, stacked for 802.1ad (QinQ). A tag follows the
//! Ethernet addresses: the TPID (0x8100 C-tag, 0x88a8 S-tag) sits in the
//! type field before it, and the tag holds the TCI and the next type.

use crate::{ethernet, ethertype, Error, Result};

mod field {
    pub const TCI: usize = 0;
    pub const ETHERTYPE: usize = 2;
    pub const PAYLOAD: usize = 4;
}

/// Length of one tag (after its TPID).
pub const TAG_LEN: usize = field::PAYLOAD;

/// Whether `value` in a type field announces a VLAN tag.
pub fn is_tpid(value: u16) -> bool {
    value == ethertype::VLAN || value == ethertype::QINQ
}

view! {
    /// A view of a VLAN tag (TCI, next type) and what follows it.
    Tag
}

fields! {
    Tag {
        /// Tag control information: PCP (3 bits), DEI (1), VID (12).
        tci / set_tci: u16 = field::TCI;
        /// The type of what follows: an EtherType or the TPID of another tag.
        ethertype / set_ethertype: u16 = field::ETHERTYPE;
    }
}

impl<T: AsRef<[u8]>> Tag<T> {
    pub fn check_len(&self) -> Result<()> {
        if self.data().len() < TAG_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    pub fn payload(&self) -> &[u8] {
        &self.data()[field::PAYLOAD..]
    }
}

/// The fields of a tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub tci: u16,
    pub ethertype: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(tag: &Tag<T>) -> Self {
        Self {
            tci: tag.tci(),
            ethertype: tag.ethertype(),
        }
    }

    /// Writes the tag into the first [`TAG_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut t = Tag::new_checked(buf)?;
        t.set_tci(self.tci);
        t.set_ethertype(self.ethertype);
        Ok(())
    }
}

/// Where the network layer of an Ethernet frame starts, past its tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L3 {
    /// The EtherType after the last tag.
    pub ethertype: u16,
    /// Offset of the network header in the frame.
    pub offset: usize,
    /// Tags skipped (0 untagged, 1 802.1Q, 2 QinQ, ...).
    pub tags: usize,
}

/// Skips up to `max_tags` VLAN tags; more tags than that is `Malformed`.
pub fn locate_l3(frame: &[u8], max_tags: usize) -> Result<L3> {
    let eth = ethernet::Frame::new_checked(frame)?;
    let (mut ethertype, mut offset, mut tags) = (eth.ethertype(), ethernet::HEADER_LEN, 0);
    while is_tpid(ethertype) {
        if tags == max_tags {
            return Err(Error::Malformed);
        }
        let tag = Tag::new_checked(frame.get(offset..).ok_or(Error::Truncated)?)?;
        ethertype = tag.ethertype();
        offset += TAG_LEN;
        tags += 1;
    }
    Ok(L3 {
        ethertype,
        offset,
        tags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A QinQ frame: S-tag VID 100, C-tag PCP 5 VID 101, then IPv6.
    const QINQ: [u8; 24] = [
        2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0xa0, 0x65, 0x86,
        0xdd, 0x60, 0x00,
    ];

    #[test]
    fn parse_qinq_fixture() {
        let outer = Tag::new_checked(&QINQ[14..]).expect("tag");
        assert_eq!((outer.vid(), outer.ethertype()), (100, ethertype::VLAN));
        let inner = Tag::new_checked(outer.payload()).expect("tag");
        assert_eq!((inner.pcp(), inner.dei(), inner.vid()), (5, false, 101));
        assert_eq!(inner.ethertype(), ethertype::IPV6);
        let l3 = locate_l3(&QINQ, 2).expect("l3");
        assert_eq!(
            l3,
            L3 {
                ethertype: ethertype::IPV6,
                offset: 22,
                tags: 2
            }
        );
        assert_eq!(locate_l3(&QINQ, 1), Err(Error::Malformed));
        assert_eq!(locate_l3(&QINQ[..19], 2), Err(Error::Truncated));
    }

    #[test]
    fn emit_fixture() {
        let mut buf = QINQ;
        buf[14..22].fill(0);
        Repr {
            tci: 100,
            ethertype: ethertype::VLAN,
        }
        .emit(&mut buf[14..])
        .expect("room");
        Repr {
            tci: 0xa065,
            ethertype: ethertype::IPV6,
        }
        .emit(&mut buf[18..])
        .expect("room");
        assert_eq!(buf, QINQ);
    }
}
