//! IPv6 extension headers (RFC 8200 §4): hop-by-hop, routing and
//! destination options (8-byte units), the fragment header, and AH
//! (RFC 4302, 4-byte units); and the walk over a chain of them to the
//! upper layer. Re-exported from [`crate::ipv6`].

use crate::bytes::{put_u16, put_u32, u16_at, u32_at};
use crate::ipv6::Packet;
use crate::{ip_proto, Error, Result};

/// Whether `next` is an extension header this module can walk over.
pub fn is_extension(next: u8) -> bool {
    matches!(
        next,
        ip_proto::HOP_BY_HOP
            | ip_proto::ROUTING
            | ip_proto::FRAGMENT
            | ip_proto::DEST_OPTS
            | ip_proto::AUTH
    )
}

/// A view of one extension header of kind `kind` (its type comes from the
/// header before it).
#[derive(Debug, Clone)]
pub struct ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
    kind: u8,
}

mod ext_field {
    pub const NXT_HDR: usize = 0;
    pub const LENGTH: usize = 1;
    /// Fragment header: offset (13 bits), reserved (2), M flag (1).
    pub const FRAG_OFF: usize = 2;
    pub const FRAG_IDENT: usize = 4;
}

/// Length of the fragment header.
pub const FRAGMENT_LEN: usize = 8;

impl<T: AsRef<[u8]>> ExtHeader<T> {
    pub const fn new_unchecked(buffer: T, kind: u8) -> Self {
        Self { buffer, kind }
    }

    /// A view whose accessors cannot panic: the buffer holds the whole
    /// header as its length field (or kind, for fragments) says.
    pub fn new_checked(buffer: T, kind: u8) -> Result<Self> {
        if !is_extension(kind) {
            return Err(Error::Malformed);
        }
        let h = Self::new_unchecked(buffer, kind);
        let len = h.buffer.as_ref().len();
        if len < 2 || len < h.header_len() {
            return Err(Error::Truncated);
        }
        Ok(h)
    }

    pub fn kind(&self) -> u8 {
        self.kind
    }

    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[ext_field::NXT_HDR]
    }

    /// The raw length field.
    pub fn len_field(&self) -> u8 {
        self.buffer.as_ref()[ext_field::LENGTH]
    }

    /// Length of the whole header in bytes.
    pub fn header_len(&self) -> usize {
        let n = usize::from(self.len_field());
        match self.kind {
            ip_proto::FRAGMENT => FRAGMENT_LEN,
            ip_proto::AUTH => (n + 2) * 4,
            _ => (n + 1) * 8,
        }
    }

    /// Fragment offset in 8-byte units (fragment headers only, else 0).
    pub fn frag_offset_units(&self) -> u16 {
        if self.kind != ip_proto::FRAGMENT {
            return 0;
        }
        u16_at(self.buffer.as_ref(), ext_field::FRAG_OFF) >> 3
    }

    /// The M flag (fragment headers only).
    pub fn more_frags(&self) -> bool {
        self.kind == ip_proto::FRAGMENT
            && u16_at(self.buffer.as_ref(), ext_field::FRAG_OFF) & 1 != 0
    }

    /// Fragment identification (fragment headers only, else 0).
    pub fn frag_ident(&self) -> u32 {
        if self.kind != ip_proto::FRAGMENT {
            return 0;
        }
        u32_at(self.buffer.as_ref(), ext_field::FRAG_IDENT)
    }

    /// What follows this header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// An extension header to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtRepr {
    /// Hop-by-hop, routing, destination options or AH with a length field
    /// of `len_field`; the body is zeros (Pad1/PadN options, routing type
    /// 0 with no segments, an AH with SPI 0).
    Generic { kind: u8, next: u8, len_field: u8 },
    Fragment {
        next: u8,
        offset_units: u16,
        more: bool,
        ident: u32,
    },
}

impl ExtRepr {
    pub fn kind(&self) -> u8 {
        match self {
            ExtRepr::Generic { kind, .. } => *kind,
            ExtRepr::Fragment { .. } => ip_proto::FRAGMENT,
        }
    }

    pub fn header_len(&self) -> usize {
        match *self {
            ExtRepr::Generic {
                kind, len_field, ..
            } => ExtHeader::new_unchecked([0, len_field], kind).header_len(),
            ExtRepr::Fragment { .. } => FRAGMENT_LEN,
        }
    }

    /// Writes the header into the first [`ExtRepr::header_len`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if !is_extension(self.kind()) {
            return Err(Error::Malformed);
        }
        let len = self.header_len();
        let h = buf.get_mut(..len).ok_or(Error::Truncated)?;
        h.fill(0);
        match *self {
            ExtRepr::Generic {
                next, len_field, ..
            } => {
                h[ext_field::NXT_HDR] = next;
                h[ext_field::LENGTH] = len_field;
            }
            ExtRepr::Fragment {
                next,
                offset_units,
                more,
                ident,
            } => {
                if offset_units > 0x1fff {
                    return Err(Error::Malformed);
                }
                h[ext_field::NXT_HDR] = next;
                put_u16(
                    h,
                    ext_field::FRAG_OFF,
                    (offset_units << 3) | u16::from(more),
                );
                put_u32(h, ext_field::FRAG_IDENT, ident);
            }
        }
        Ok(())
    }
}

/// The upper-layer protocol of a packet and the offset of its header in
/// the IPv6 payload, past at most `max_headers` extension headers.
pub fn upper_layer<T: AsRef<[u8]>>(p: &Packet<T>, max_headers: usize) -> Result<(u8, usize)> {
    let (mut next, mut offset) = (p.next_header(), 0);
    for _ in 0..=max_headers {
        if !is_extension(next) {
            return Ok((next, offset));
        }
        let rest = p.payload().get(offset..).ok_or(Error::Truncated)?;
        let h = ExtHeader::new_checked(rest, next)?;
        next = h.next_header();
        offset += h.header_len();
    }
    Err(Error::Malformed)
}
