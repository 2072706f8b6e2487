//! The clock probe wire format (layout in `bpf_maps::clock`): a strict
//! encoder/decoder. Anything that is not exactly a version-1 probe of the
//! right length with consistent fields is refused with the reason.

use bpf_maps::clock::{
    stamp_offset, FLAGS_KNOWN_V1, FLAG_AUTH, FLAG_KERNEL_T1, FLAG_TWO_STEP, PROBE_AUTH_LEN,
    PROBE_KIND_FOLLOW_UP, PROBE_KIND_REQUEST, PROBE_KIND_RESPONSE, PROBE_LEN, PROBE_MAGIC,
    PROBE_OFF_AUTH, PROBE_OFF_FLAGS, PROBE_OFF_KIND, PROBE_OFF_MAGIC, PROBE_OFF_NONCE,
    PROBE_OFF_SENDER, PROBE_OFF_SEQ, PROBE_OFF_VERSION, PROBE_VERSION, STAMP_SETS,
    STAMP_SET_KERNEL, STAMP_SET_SOFTWARE, STAMP_SET_USER, STAMP_SLOTS,
};

/// What a probe is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Request,
    Response,
    /// The responder's SO_TIMESTAMPING transmit stamp t3, sent after the response.
    FollowUp,
}

impl Kind {
    fn wire(self) -> u8 {
        match self {
            Kind::Request => PROBE_KIND_REQUEST,
            Kind::Response => PROBE_KIND_RESPONSE,
            Kind::FollowUp => PROBE_KIND_FOLLOW_UP,
        }
    }
}

/// t1..t4 (index 0..3) of every stamp set; 0 means "not taken".
pub type StampSets = [[u64; STAMP_SLOTS]; STAMP_SETS];

/// One decoded probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub kind: Kind,
    pub flags: u16,
    pub seq: u32,
    pub sender: u32,
    pub nonce: u64,
    pub stamps: StampSets,
}

/// Why bytes are not a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("probe is {0} bytes, shorter than {PROBE_LEN}")]
    Truncated(usize),
    #[error("probe is {0} bytes, longer than {PROBE_LEN}")]
    TooLong(usize),
    #[error("bad magic {0:#010x}")]
    BadMagic(u32),
    #[error("unsupported probe version {0}")]
    Version(u8),
    #[error("unknown probe kind {0}")]
    Kind(u8),
    #[error("unknown flags {0:#06x}")]
    Flags(u16),
    #[error("auth field is not zero but FLAG_AUTH is clear")]
    AuthNotZero,
    #[error("kernel flag set for slot t{0} but the slot is empty")]
    KernelFlagWithoutStamp(usize),
    #[error("a {kind:?} must not carry stamp set {set} slot t{slot}")]
    UnexpectedStamp { kind: Kind, set: usize, slot: usize },
}

impl Probe {
    /// A probe with no stamps.
    pub fn new(kind: Kind, seq: u32, sender: u32, nonce: u64) -> Self {
        Probe {
            kind,
            flags: 0,
            seq,
            sender,
            nonce,
            stamps: [[0; STAMP_SLOTS]; STAMP_SETS],
        }
    }

    /// Slot `slot` (0 = t1) of the kernel set, if the kernel wrote it.
    pub fn kernel_stamp(&self, slot: usize) -> Option<u64> {
        (self.flags & (FLAG_KERNEL_T1 << slot) != 0).then_some(self.stamps[STAMP_SET_KERNEL][slot])
    }

    pub fn two_step(&self) -> bool {
        self.flags & FLAG_TWO_STEP != 0
    }

    pub fn encode(&self) -> [u8; PROBE_LEN] {
        let mut b = [0u8; PROBE_LEN];
        b[PROBE_OFF_MAGIC..PROBE_OFF_MAGIC + 4].copy_from_slice(&PROBE_MAGIC.to_be_bytes());
        b[PROBE_OFF_VERSION] = PROBE_VERSION;
        b[PROBE_OFF_KIND] = self.kind.wire();
        b[PROBE_OFF_FLAGS..PROBE_OFF_FLAGS + 2].copy_from_slice(&self.flags.to_be_bytes());
        b[PROBE_OFF_SEQ..PROBE_OFF_SEQ + 4].copy_from_slice(&self.seq.to_be_bytes());
        b[PROBE_OFF_SENDER..PROBE_OFF_SENDER + 4].copy_from_slice(&self.sender.to_be_bytes());
        b[PROBE_OFF_NONCE..PROBE_OFF_NONCE + 8].copy_from_slice(&self.nonce.to_be_bytes());
        for (set, slots) in self.stamps.iter().enumerate() {
            for (slot, v) in slots.iter().enumerate() {
                let o = stamp_offset(set, slot);
                b[o..o + 8].copy_from_slice(&v.to_be_bytes());
            }
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Probe, DecodeError> {
        if b.len() < PROBE_LEN {
            return Err(DecodeError::Truncated(b.len()));
        }
        if b.len() > PROBE_LEN {
            return Err(DecodeError::TooLong(b.len()));
        }
        let u16_at = |o: usize| u16::from_be_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_be_bytes(a)
        };
        let magic = u32_at(PROBE_OFF_MAGIC);
        if magic != PROBE_MAGIC {
            return Err(DecodeError::BadMagic(magic));
        }
        if b[PROBE_OFF_VERSION] != PROBE_VERSION {
            return Err(DecodeError::Version(b[PROBE_OFF_VERSION]));
        }
        let kind = match b[PROBE_OFF_KIND] {
            PROBE_KIND_REQUEST => Kind::Request,
            PROBE_KIND_RESPONSE => Kind::Response,
            PROBE_KIND_FOLLOW_UP => Kind::FollowUp,
            k => return Err(DecodeError::Kind(k)),
        };
        let flags = u16_at(PROBE_OFF_FLAGS);
        if flags & !FLAGS_KNOWN_V1 != 0 {
            return Err(DecodeError::Flags(flags & !FLAGS_KNOWN_V1));
        }
        // The tag itself is checked by `auth` (it needs the peer's key).
        if flags & FLAG_AUTH == 0
            && b[PROBE_OFF_AUTH..PROBE_OFF_AUTH + PROBE_AUTH_LEN]
                .iter()
                .any(|&x| x != 0)
        {
            return Err(DecodeError::AuthNotZero);
        }
        let mut stamps = [[0u64; STAMP_SLOTS]; STAMP_SETS];
        for (set, slots) in stamps.iter_mut().enumerate() {
            for (slot, v) in slots.iter_mut().enumerate() {
                *v = u64_at(stamp_offset(set, slot));
            }
        }
        let probe = Probe {
            kind,
            flags,
            seq: u32_at(PROBE_OFF_SEQ),
            sender: u32_at(PROBE_OFF_SENDER),
            nonce: u64_at(PROBE_OFF_NONCE),
            stamps,
        };
        probe.check_slots()?;
        Ok(probe)
    }

    /// Which slots each kind may carry: a request t1 (and the receiving
    /// kernel's t2), a response t1..t3 (and the receiving kernel's t4), a
    /// follow-up only the SO_TIMESTAMPING t3. Kernel flags need a stamp.
    fn check_slots(&self) -> Result<(), DecodeError> {
        for slot in 0..STAMP_SLOTS {
            if self.flags & (FLAG_KERNEL_T1 << slot) != 0
                && self.stamps[STAMP_SET_KERNEL][slot] == 0
            {
                return Err(DecodeError::KernelFlagWithoutStamp(slot + 1));
            }
        }
        for set in 0..STAMP_SETS {
            for slot in 0..STAMP_SLOTS {
                let allowed = match (self.kind, set) {
                    (Kind::Request, STAMP_SET_KERNEL) => slot <= 1,
                    (Kind::Request, _) => slot == 0,
                    (Kind::Response, STAMP_SET_KERNEL) => true,
                    (Kind::Response, _) => slot <= 2,
                    (Kind::FollowUp, s) => s == STAMP_SET_SOFTWARE && slot == 2,
                };
                if !allowed && self.stamps[set][slot] != 0 {
                    return Err(DecodeError::UnexpectedStamp {
                        kind: self.kind,
                        set,
                        slot: slot + 1,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The user stamp set, named for readability at call sites.
pub const USER: usize = STAMP_SET_USER;
/// The SO_TIMESTAMPING stamp set.
pub const SOFTWARE: usize = STAMP_SET_SOFTWARE;
/// The kernel (eBPF) stamp set.
pub const KERNEL: usize = STAMP_SET_KERNEL;

#[cfg(test)]
mod tests {
    use super::*;

    fn response() -> Probe {
        let mut p = Probe::new(Kind::Response, 7, 42, 0xDEAD_BEEF_0102_0304);
        p.stamps[USER] = [10, 20, 30, 0];
        p.stamps[KERNEL] = [11, 19, 31, 45];
        p.flags = 0x000f | FLAG_TWO_STEP;
        p
    }

    #[test]
    fn round_trips() {
        let p = response();
        assert_eq!(Probe::decode(&p.encode()), Ok(p));
        assert_eq!(p.kernel_stamp(3), Some(45));
        assert!(p.two_step());
        let mut f = Probe::new(Kind::FollowUp, 7, 42, 1);
        f.stamps[SOFTWARE][2] = 99;
        assert_eq!(Probe::decode(&f.encode()), Ok(f));
    }

    #[test]
    fn truncated_and_overlong_are_refused() {
        let b = response().encode();
        for len in [0, 1, 23, 24, PROBE_LEN - 1] {
            assert_eq!(Probe::decode(&b[..len]), Err(DecodeError::Truncated(len)));
        }
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(
            Probe::decode(&long),
            Err(DecodeError::TooLong(PROBE_LEN + 1))
        );
    }

    #[test]
    fn malformed_headers_are_refused() {
        let good = response().encode();
        let cases: [(usize, u8, DecodeError); 5] = [
            (0, b'X', DecodeError::BadMagic(0x5857_434B)),
            (PROBE_OFF_VERSION, 2, DecodeError::Version(2)),
            (PROBE_OFF_KIND, 9, DecodeError::Kind(9)),
            (PROBE_OFF_FLAGS, 0x80, DecodeError::Flags(0x8000)),
            (PROBE_OFF_AUTH + 3, 1, DecodeError::AuthNotZero),
        ];
        for (off, byte, err) in cases {
            let mut b = good;
            b[off] = byte;
            assert_eq!(Probe::decode(&b), Err(err), "byte {off} = {byte}");
        }
        // With FLAG_AUTH the field is a tag: the codec leaves it to `auth`.
        let mut b = good;
        b[PROBE_OFF_FLAGS + 1] |= FLAG_AUTH as u8;
        b[PROBE_OFF_AUTH + 3] = 1;
        assert!(Probe::decode(&b).is_ok());
    }

    #[test]
    fn inconsistent_slots_are_refused() {
        let mut p = response();
        p.stamps[KERNEL][1] = 0;
        assert_eq!(
            Probe::decode(&p.encode()),
            Err(DecodeError::KernelFlagWithoutStamp(2))
        );
        let mut p = Probe::new(Kind::Request, 1, 1, 1);
        p.stamps[USER][2] = 5;
        assert!(matches!(
            Probe::decode(&p.encode()),
            Err(DecodeError::UnexpectedStamp {
                set: USER,
                slot: 3,
                ..
            })
        ));
        let mut p = response();
        p.stamps[USER][3] = 5;
        assert!(Probe::decode(&p.encode()).is_err());
        let mut f = Probe::new(Kind::FollowUp, 1, 1, 1);
        f.stamps[KERNEL][2] = 5;
        assert!(Probe::decode(&f.encode()).is_err());
    }

    #[test]
    fn every_single_byte_corruption_is_refused_or_decodes_consistently() {
        // Flipping any bit either yields a clean error or a probe whose
        // re-encoding is exactly the corrupted bytes: the decoder never
        // invents or drops information (the auth field, a tag checked by
        // `auth`, aside).
        let good = response().encode();
        for i in 0..PROBE_LEN {
            for bit in 0..8 {
                let mut b = good;
                b[i] ^= 1 << bit;
                if let Ok(p) = Probe::decode(&b) {
                    assert_eq!(p.encode(), b, "byte {i} bit {bit}");
                }
            }
        }
    }
}
