//! The frames Causeway reads and writes in userspace, in the style of
//! smoltcp's `wire`: one module per protocol, each with
//!
//! - a zero-copy view `Packet<T: AsRef<[u8]>>` whose accessors never panic
//!   once [`Packet::new_checked`](udp::Packet::new_checked) has checked the
//!   buffer's length (and the length fields that point into it);
//! - the field offsets written once (`mod field`);
//! - a `Repr` (the header's meaningful fields) with `parse` and `emit`.
//!
//! One internet checksum ([`checksum`]) serves the IPv4 header and the UDP
//! and TCP pseudo-headers of both IP versions.
//!
//! This is the userspace codec used by tests, benchmarks and the WAN
//! emulator. The eBPF programs keep their own verifier-shaped parser
//! (`ebpf/src/parse.rs`) and the controller its reference classifier:
//! differential tests compare independent implementations.
//!
//! ```
//! use causeway_wire::{ethernet, ipv4, udp, ethertype, ip_proto};
//! use core::net::Ipv4Addr;
//!
//! let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
//! let mut buf = [0u8; 14 + 20 + 8 + 4];
//! ethernet::Repr { dst: [2, 0, 0, 0, 0, 2], src: [2, 0, 0, 0, 0, 1], ethertype: ethertype::IPV4 }
//!     .emit(&mut buf[..14]).unwrap();
//! ipv4::Repr::new(src, dst, ip_proto::UDP).emit(&mut buf[14..], 12).unwrap();
//! udp::Repr { src_port: 5000, dst_port: 7000 }.emit(&mut buf[34..], 4).unwrap();
//! let mut seg = udp::Packet::new_checked(&mut buf[34..]).unwrap();
//! seg.payload_mut().copy_from_slice(b"ping");
//! seg.fill_checksum(&causeway_wire::checksum::IpPair::V4(src, dst));
//!
//! let frame = ethernet::Frame::new_checked(&buf[..]).unwrap();
//! let ip = ipv4::Packet::new_checked(frame.payload()).unwrap();
//! assert!(ip.verify_checksum());
//! let seg = udp::Packet::new_checked(ip.payload()).unwrap();
//! assert!(seg.verify_checksum(&causeway_wire::checksum::IpPair::V4(src, dst)));
//! assert_eq!(seg.payload(), b"ping");
//! ```
#![cfg_attr(not(test), no_std)]
#![deny(unsafe_code)]

/// A zero-copy view type over a buffer: the struct, `new_unchecked`,
/// `new_checked` (which calls the module's own `check_len`), `into_inner`
/// and the private `data`/`data_mut` accessors. Field accessors, setters
/// and `check_len` are written beside each protocol.
macro_rules! view {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// A view without any check: accessors may panic on a short buffer.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// A view whose accessors cannot panic: `check_len` passed.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let view = Self::new_unchecked(buffer);
                view.check_len()?;
                Ok(view)
            }

            pub fn into_inner(self) -> T {
                self.buffer
            }

            #[allow(dead_code)]
            fn data(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            #[allow(dead_code)]
            fn data_mut(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}

/// Plain big-endian fields of a view at fixed offsets: each entry
/// `getter / setter: type = offset` makes both accessors (offsets are in
/// bounds once `check_len` passed).
macro_rules! fields {
    ($view:ident { $($(#[$doc:meta])* $get:ident / $set:ident : $ty:ty = $at:expr;)* }) => {
        impl<T: AsRef<[u8]>> $view<T> {
            $(
                $(#[$doc])*
                pub fn $get(&self) -> $ty {
                    <$ty as $crate::bytes::BigEndian>::read(self.data(), $at)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                pub fn $set(&mut self, value: $ty) {
                    $crate::bytes::BigEndian::write(value, self.data_mut(), $at)
                }
            )*
        }
    };
}

pub mod checksum;
pub mod ethernet;
pub mod ipv4;
pub mod ipv6;
mod ipv6ext;
pub mod probe;
pub mod tcp;
pub mod udp;
pub mod vlan;

#[cfg(test)]
mod roundtrip_tests;

/// Why a buffer is not a valid header of its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the header, or than a length field says.
    Truncated,
    /// A field holds a value the format does not allow (a version, a
    /// length shorter than the header itself, a magic number).
    Malformed,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "buffer shorter than the header or its length field",
            Error::Malformed => "header field out of range",
        })
    }
}

impl core::error::Error for Error {}

pub type Result<T> = core::result::Result<T, Error>;

/// EtherType values (IEEE 802.3 type field).
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    /// 802.1Q customer VLAN tag (C-tag).
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86dd;
    /// 802.1ad service VLAN tag (S-tag, the outer tag of QinQ).
    pub const QINQ: u16 = 0x88a8;
    pub const LLDP: u16 = 0x88cc;
}

/// IP protocol / IPv6 next-header numbers (IANA).
pub mod ip_proto {
    pub const HOP_BY_HOP: u8 = 0;
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const ESP: u8 = 50;
    pub const AUTH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const NO_NEXT: u8 = 59;
    pub const DEST_OPTS: u8 = 60;
}

/// Big-endian reads and writes at fixed offsets; callers have checked the
/// length, so the slices are in bounds.
mod bytes {
    pub trait BigEndian: Sized {
        fn read(b: &[u8], at: usize) -> Self;
        fn write(self, b: &mut [u8], at: usize);
    }

    macro_rules! big_endian {
        ($($t:ty),*) => {$(
            impl BigEndian for $t {
                fn read(b: &[u8], at: usize) -> Self {
                    const N: usize = core::mem::size_of::<$t>();
                    let mut v = [0u8; N];
                    v.copy_from_slice(&b[at..at + N]);
                    <$t>::from_be_bytes(v)
                }
                fn write(self, b: &mut [u8], at: usize) {
                    let v = self.to_be_bytes();
                    b[at..at + v.len()].copy_from_slice(&v);
                }
            }
        )*};
    }
    big_endian!(u8, u16, u32, u64);

    pub fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::read(b, at)
    }
    pub fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::read(b, at)
    }
    pub fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::read(b, at)
    }
    pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
        v.write(b, at)
    }
    pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
        v.write(b, at)
    }
    pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
        v.write(b, at)
    }
}
