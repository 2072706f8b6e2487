//! Completing checksums that a sender left to "hardware".
//!
//! A frame read from a veth whose peer has TX checksum offload on carries only the
//! pseudo-header sum in its L4 checksum field (CHECKSUM_PARTIAL). With
//! PACKET_VNET_HDR the kernel tells us where the checksummed region starts and
//! where the field is; summing that region (field included) and complementing
//! gives the real checksum, exactly what a NIC would have done.

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

/// Ones'-complement sum of `data` (RFC 1071), not yet complemented.
pub fn ones_complement_sum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
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
    let sum = !ones_complement_sum(&frame[start..]);
    // UDP transmits a computed zero as all ones (RFC 768); harmless for TCP/ICMP,
    // which never produce 0x0000 from a non-zero region either way.
    let sum = if sum == 0 { 0xffff } else { sum };
    frame[field..field + 2].copy_from_slice(&sum.to_be_bytes());
    FrameState::ChecksumFixed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4/UDP frame with a correct checksum, built by hand.
    fn udp_frame(payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let total = 20 + 8 + payload.len();
        let mut ip = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0x40,
            0,
            64,
            17,
            0,
            0,
            10,
            0,
            0,
            1,
            10,
            1,
            0,
            2,
        ];
        let c = !ones_complement_sum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend(ip);
        let len = (8 + payload.len()) as u16;
        let mut udp = vec![0x30, 0x39, 0x1b, 0x5f];
        udp.extend(len.to_be_bytes());
        udp.extend([0, 0]);
        udp.extend(payload);
        // Pseudo header: src, dst, zero, proto, length.
        let mut pseudo = vec![10, 0, 0, 1, 10, 1, 0, 2, 0, 17];
        pseudo.extend(len.to_be_bytes());
        pseudo.extend(&udp);
        let c = !ones_complement_sum(&pseudo);
        udp[6..8].copy_from_slice(&c.to_be_bytes());
        f.extend(udp);
        f
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3 example: 0x0001 f203 f4f5 f6f7 → sum 0xddf2.
        assert_eq!(
            ones_complement_sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        assert_eq!(ones_complement_sum(&[0xff]), 0xff00);
    }

    #[test]
    fn partial_checksum_is_completed_like_hardware_would() {
        let good = udp_frame(b"hello, causeway!!");
        // What a sender with TX offload hands over: the pseudo-header sum, not complemented.
        let mut partial = good.clone();
        let len = (good.len() - 34) as u16;
        let mut pseudo = vec![10, 0, 0, 1, 10, 1, 0, 2, 0, 17];
        pseudo.extend(len.to_be_bytes());
        let ph = ones_complement_sum(&pseudo);
        partial[40..42].copy_from_slice(&ph.to_be_bytes());
        assert_ne!(partial, good);
        let mut hdr = [0u8; VNET_HDR_LEN];
        hdr[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
        hdr[6..8].copy_from_slice(&34u16.to_ne_bytes());
        hdr[8..10].copy_from_slice(&6u16.to_ne_bytes());
        assert_eq!(finish_frame(&hdr, &mut partial), FrameState::ChecksumFixed);
        assert_eq!(partial, good);
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
