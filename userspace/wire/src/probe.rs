//! The clock probe: the UDP payload that the eBPF programs stamp. Its
//! layout (offsets, magic, stamp sets and slots) is defined once, in
//! `bpf_maps::clock`; this is the zero-copy view over it.

use bpf_maps::clock as layout;

use crate::bytes::{put_u64, u64_at};
use crate::{Error, Result};

mod field {
    use super::layout;
    use core::ops::Range;
    pub const MAGIC: usize = layout::PROBE_OFF_MAGIC;
    pub const VERSION: usize = layout::PROBE_OFF_VERSION;
    pub const KIND: usize = layout::PROBE_OFF_KIND;
    pub const FLAGS: usize = layout::PROBE_OFF_FLAGS;
    pub const SEQ: usize = layout::PROBE_OFF_SEQ;
    pub const SENDER: usize = layout::PROBE_OFF_SENDER;
    pub const NONCE: usize = layout::PROBE_OFF_NONCE;
    pub const AUTH: Range<usize> =
        layout::PROBE_OFF_AUTH..layout::PROBE_OFF_AUTH + layout::PROBE_AUTH_LEN;
}

/// Length of a probe.
pub const PROBE_LEN: usize = layout::PROBE_LEN;

view! {
    /// A view of a clock probe. `new_checked` checks the length only; the
    /// magic and version are for [`Packet::check_magic`] (a stamping program
    /// skips a frame whose magic is wrong, it does not fail it).
    Packet
}

fields! {
    Packet {
        magic / set_magic: u32 = field::MAGIC;
        version / set_version: u8 = field::VERSION;
        /// `PROBE_KIND_*`.
        kind / set_kind: u8 = field::KIND;
        /// `FLAG_*`.
        flags / set_flags: u16 = field::FLAGS;
        seq / set_seq: u32 = field::SEQ;
        sender / set_sender: u32 = field::SENDER;
        nonce / set_nonce: u64 = field::NONCE;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<()> {
        if self.data().len() < PROBE_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// `Malformed` unless the magic and version are this layout's.
    pub fn check_magic(&self) -> Result<()> {
        if self.magic() != layout::PROBE_MAGIC || self.version() != layout::PROBE_VERSION {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// Stamp `slot` (0 = t1 .. 3 = t4) of `set` (`STAMP_SET_*`), ns; `None`
    /// for a set or slot outside the layout.
    pub fn stamp(&self, set: usize, slot: usize) -> Option<u64> {
        (set < layout::STAMP_SETS && slot < layout::STAMP_SLOTS)
            .then(|| u64_at(self.data(), layout::stamp_offset(set, slot)))
    }

    pub fn auth(&self) -> &[u8] {
        &self.data()[field::AUTH]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_magic_and_version(&mut self) {
        self.set_magic(layout::PROBE_MAGIC);
        self.set_version(layout::PROBE_VERSION);
    }

    /// Writes stamp `slot` of `set`; `Malformed` outside the layout.
    pub fn set_stamp(&mut self, set: usize, slot: usize, ns: u64) -> Result<()> {
        if set >= layout::STAMP_SETS || slot >= layout::STAMP_SLOTS {
            return Err(Error::Malformed);
        }
        put_u64(self.data_mut(), layout::stamp_offset(set, slot), ns);
        Ok(())
    }

    pub fn auth_mut(&mut self) -> &mut [u8] {
        &mut self.data_mut()[field::AUTH]
    }
}

/// All fields of a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub kind: u8,
    pub flags: u16,
    pub seq: u32,
    pub sender: u32,
    pub nonce: u64,
    /// `[set][slot]`, ns.
    pub stamps: [[u64; layout::STAMP_SLOTS]; layout::STAMP_SETS],
}

impl Repr {
    /// A probe with no stamps and no flags.
    pub fn new(kind: u8, seq: u32, sender: u32, nonce: u64) -> Self {
        Self {
            kind,
            flags: 0,
            seq,
            sender,
            nonce,
            stamps: [[0; layout::STAMP_SLOTS]; layout::STAMP_SETS],
        }
    }

    /// The fields of a checked probe whose magic and version are right.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_magic()?;
        let mut stamps = [[0; layout::STAMP_SLOTS]; layout::STAMP_SETS];
        for (set, row) in stamps.iter_mut().enumerate() {
            for (slot, v) in row.iter_mut().enumerate() {
                *v = p.stamp(set, slot).unwrap_or(0);
            }
        }
        Ok(Self {
            kind: p.kind(),
            flags: p.flags(),
            seq: p.seq(),
            sender: p.sender(),
            nonce: p.nonce(),
            stamps,
        })
    }

    /// Writes the whole probe (auth tag zero) into the first [`PROBE_LEN`]
    /// bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = Packet::new_checked(buf)?;
        p.set_magic_and_version();
        p.set_kind(self.kind);
        p.set_flags(self.flags);
        p.set_seq(self.seq);
        p.set_sender(self.sender);
        p.set_nonce(self.nonce);
        for (set, row) in self.stamps.iter().enumerate() {
            for (slot, &v) in row.iter().enumerate() {
                p.set_stamp(set, slot, v)?;
            }
        }
        p.auth_mut().fill(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use layout::{PROBE_KIND_REQUEST, STAMP_SET_KERNEL, STAMP_SET_USER};

    /// A request, seq 9, sender 1, nonce 0x1122334455667788, user t1 = 123.
    fn fixture() -> [u8; PROBE_LEN] {
        let mut b = [0u8; PROBE_LEN];
        b[..16].copy_from_slice(&[b'C', b'W', b'C', b'K', 1, 1, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1]);
        b[16..24].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
        b[88..96].copy_from_slice(&123u64.to_be_bytes()); // set 2, slot 0
        b
    }

    fn repr() -> Repr {
        let mut r = Repr::new(PROBE_KIND_REQUEST, 9, 1, 0x1122_3344_5566_7788);
        r.stamps[STAMP_SET_USER][0] = 123;
        r
    }

    #[test]
    fn parse_fixture() {
        let f = fixture();
        let p = Packet::new_checked(&f[..]).expect("probe");
        assert_eq!(Repr::parse(&p), Ok(repr()));
        assert_eq!(p.stamp(STAMP_SET_USER, 0), Some(123));
        assert_eq!(p.stamp(STAMP_SET_KERNEL, 4), None);
        assert_eq!(p.stamp(3, 0), None);
    }

    #[test]
    fn emit_fixture() {
        let mut b = [0xffu8; PROBE_LEN];
        repr().emit(&mut b).expect("room");
        assert_eq!(b, fixture());
    }

    #[test]
    fn short_or_foreign_payloads_are_refused() {
        let f = fixture();
        assert_eq!(
            Packet::new_checked(&f[..PROBE_LEN - 1]).err(),
            Some(Error::Truncated)
        );
        let mut bad = f;
        bad[0] ^= 0xff;
        let p = Packet::new_checked(&bad[..]).expect("length is fine");
        assert_eq!(Repr::parse(&p), Err(Error::Malformed));
        let mut b = f;
        assert_eq!(
            Packet::new_unchecked(&mut b[..]).set_stamp(0, 4, 1),
            Err(Error::Malformed)
        );
    }
}
