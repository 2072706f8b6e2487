//! Completing checksums that a sender left to "hardware".
//!
//! A frame read from a veth whose peer has TX checksum offload on carries only the
//! pseudo-header sum in its L4 checksum field (CHECKSUM_PARTIAL). With
//! PACKET_VNET_HDR the kernel tells us where the checksummed region starts and
//! where the field is; summing that region (field included) and complementing
//! gives the real checksum, exactly what a NIC would have done.

use causeway_wire::checksum;

/// Virtio-net header that PACKET_VNET_HDR puts before every received frame.
pub const VNET_HDR_LEN: usize = 10;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;

/// What the virtio-net header says about a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameState {
    /// Nothing to do.
    Complete,
    /// Checksum completed in place.
    ChecksumFixed,
    /// A GSO super-frame (segmentation offload still on upstream): cannot be
    /// forwarded as one frame.
    Gso,
    /// The header points outside the frame.
    Malformed,
}

/// Apply the virtio-net header `hdr` to `frame` (the bytes after the header).
pub fn finish_frame(hdr: &[u8; VNET_HDR_LEN], frame: &mut [u8]) -> FrameState {
    let (flags, gso_type) = (hdr[0], hdr[1]);
    if gso_type & 0x7f != VIRTIO_NET_HDR_GSO_NONE {
        return FrameState::Gso;
    }
    if flags & VIRTIO_NET_HDR_F_NEEDS_CSUM == 0 {
        return FrameState::Complete;
    }
    // Host byte order (little-endian on every platform this runs on, and the
    // kernel uses the host's order for PACKET_VNET_HDR of a non-virtio socket).
    let start = u16::from_ne_bytes([hdr[6], hdr[7]]) as usize;
    let offset = u16::from_ne_bytes([hdr[8], hdr[9]]) as usize;
    let field = start + offset;
    if start >= frame.len() || field + 2 > frame.len() {
        return FrameState::Malformed;
    }
    let sum = checksum::checksum(&frame[start..]);
    // UDP transmits a computed zero as all ones (RFC 768); harmless for TCP/ICMP,
    // which never produce 0x0000 from a non-zero region either way.
    let sum = if sum == 0 { 0xffff } else { sum };
    frame[field..field + 2].copy_from_slice(&sum.to_be_bytes());
    FrameState::ChecksumFixed
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_wire::{checksum::IpPair, ethernet, ethertype, ip_proto, ipv4, udp};
    use std::net::Ipv4Addr;

    const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
    /// Ethernet + IPv4 header: where the UDP header starts.
    const L4: usize = 34;

    /// An IPv4/UDP frame with correct checksums.
    fn udp_frame(payload: &[u8]) -> Vec<u8> {
        let l4_len = udp::HEADER_LEN + payload.len();
        let mut f = vec![0u8; L4 + l4_len];
        ethernet::Repr {
            dst: [0; 6],
            src: [0; 6],
            ethertype: ethertype::IPV4,
        }
        .emit(&mut f)
        .expect("room");
        ipv4::Repr {
            frag: ipv4::DONT_FRAG,
            ..ipv4::Repr::new(SRC, DST, ip_proto::UDP)
        }
        .emit(&mut f[14..], l4_len)
        .expect("room");
        udp::Repr {
            src_port: 12345,
            dst_port: 7007,
        }
        .emit(&mut f[L4..], payload.len())
        .expect("room");
        let mut seg = udp::Packet::new_checked(&mut f[L4..]).expect("udp");
        seg.payload_mut().copy_from_slice(payload);
        seg.fill_checksum(&IpPair::V4(SRC, DST));
        f
    }

    #[test]
    fn partial_checksum_is_completed_like_hardware_would() {
        let good = udp_frame(b"hello, causeway!!");
        // What a sender with TX offload hands over: the pseudo-header sum, not complemented.
        let mut partial = good.clone();
        let len = (good.len() - L4) as u32;
        let ph = IpPair::V4(SRC, DST).pseudo_header_sum(ip_proto::UDP, len);
        partial[L4 + 6..L4 + 8].copy_from_slice(&ph.to_be_bytes());
        assert_ne!(partial, good);
        let mut hdr = [0u8; VNET_HDR_LEN];
        hdr[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
        hdr[6..8].copy_from_slice(&(L4 as u16).to_ne_bytes());
        hdr[8..10].copy_from_slice(&6u16.to_ne_bytes());
        assert_eq!(finish_frame(&hdr, &mut partial), FrameState::ChecksumFixed);
        assert_eq!(partial, good);
        let ip = ipv4::Packet::new_checked(&partial[14..]).expect("ip");
        let seg = udp::Packet::new_checked(ip.payload()).expect("udp");
        assert!(seg.verify_checksum(&IpPair::V4(SRC, DST)));
    }

    #[test]
    fn complete_gso_and_malformed_frames() {
        let mut f = udp_frame(b"x");
        let orig = f.clone();
        assert_eq!(
            finish_frame(&[0; VNET_HDR_LEN], &mut f),
            FrameState::Complete
        );
        assert_eq!(f, orig);
        let mut gso = [0u8; VNET_HDR_LEN];
        gso[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4
        assert_eq!(finish_frame(&gso, &mut f), FrameState::Gso);
        let mut bad = [0u8; VNET_HDR_LEN];
        bad[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
        bad[6..8].copy_from_slice(&(f.len() as u16).to_ne_bytes());
        assert_eq!(finish_frame(&bad, &mut f), FrameState::Malformed);
    }
}
