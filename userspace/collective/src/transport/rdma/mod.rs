//! RDMA transport (cargo feature `rdma`): one reliable-connected queue pair
//! per peer, behind the same byte-stream [`Transport`](super::Transport) as
//! TCP and shared memory, so every collective runs over it.
//!
//! - **Set-up** ([`Plan`], used by `mesh`): each rank finds the device whose
//!   RoCE v2 GID is the IPv4-mapped form of its own address (GID index read
//!   from `/sys/class/infiniband`, never assumed), says "usable or why not" in
//!   its rendezvous entry, then publishes in the bootstrap store one [`ConnInfo`] (QPN, GID, PSN, MTU,
//!   receive ring address and rkey) per RDMA peer; the QPs go to RTS before the
//!   pair's TCP control connection (kept for liveness, as next to shared memory).
//! - **Data**: the sender RDMA-WRITEs WITH IMM (immediate = byte count) from
//!   its buffer straight into the peer's registered receive ring; the buffer
//!   pool's allocations are registered once and found again by address
//!   ([`stable`]); anything else is copied into a registered staging ring
//!   (counted: [`counters`]). No `ibv_reg_mr` per transfer. A write returns
//!   once posted: its pool allocation is held in [`stable`] (not reused or
//!   freed) until the write completes, so successive writes overlap.
//! - **Receiving in place**: the ring is mapped twice back to back, so a
//!   frame's payload is handed to the engine as the ring's own bytes
//!   (`StreamRead::take_in_place`), wrapped or not; its bytes come back when
//!   the frame is dropped, in any order (`returns`).
//! - **Flow control**: the receiver gives ring space back with zero-byte
//!   SEND WITH IMM credits (the prefix of the ring that came back in full);
//!   the sender never writes more than it was given.
//! - **Completions**: one progress thread per connection polls the CQ, spins
//!   briefly when idle, then sleeps on the completion channel.
//! - **Errors** ([`RdmaError`]): typed, and they end only that connection.

pub mod error;
pub mod stable;

#[cfg(feature = "rdma")]
mod conn;
#[cfg(feature = "rdma")]
mod returns;
#[cfg(feature = "rdma")]
mod verbs;

use std::net::Ipv4Addr;
use std::path::Path;

pub use error::RdmaError;

#[cfg(feature = "rdma")]
pub use conn::{counters, open_device, states, Counters, Pending, RdmaDevice, RdmaTransport};

/// Whether this build has the RDMA transport.
pub const BUILT: bool = cfg!(feature = "rdma");

/// Which transport links inside a domain use (`CAUSEWAY_TRANSPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportChoice {
    /// RDMA where both ends have a usable device, TCP otherwise (logged).
    #[default]
    Auto,
    Tcp,
    /// RDMA inside domains or a set-up error.
    Rdma,
}

impl TransportChoice {
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Self::Auto),
            "tcp" => Some(Self::Tcp),
            "rdma" => Some(Self::Rdma),
            _ => None,
        }
    }
}

/// Where `from` publishes its endpoint for `to`.
pub fn info_key(session: u64, from: usize, to: usize) -> String {
    format!("rdma/{session:016x}/{from}/{to}")
}

/// The connection facts one end of a queue pair gives the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo {
    pub qpn: u32,
    pub psn: u32,
    pub gid: [u8; 16],
    pub gid_index: u8,
    /// `ibv_mtu` value (1 = 256 B … 5 = 4096 B).
    pub mtu: u32,
    /// The receive ring the peer writes into.
    pub ring_addr: u64,
    pub ring_len: u32,
    pub rkey: u32,
}

const INFO_MAGIC: &[u8; 4] = b"CWRD";
const INFO_LEN: usize = 4 + 4 + 4 + 16 + 1 + 4 + 8 + 4 + 4;

impl ConnInfo {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(INFO_LEN);
        v.extend_from_slice(INFO_MAGIC);
        v.extend_from_slice(&self.qpn.to_le_bytes());
        v.extend_from_slice(&self.psn.to_le_bytes());
        v.extend_from_slice(&self.gid);
        v.push(self.gid_index);
        v.extend_from_slice(&self.mtu.to_le_bytes());
        v.extend_from_slice(&self.ring_addr.to_le_bytes());
        v.extend_from_slice(&self.ring_len.to_le_bytes());
        v.extend_from_slice(&self.rkey.to_le_bytes());
        v
    }

    pub fn decode(b: &[u8]) -> Result<Self, String> {
        if b.len() != INFO_LEN || &b[..4] != INFO_MAGIC {
            return Err(format!("{} bytes, not a connection record", b.len()));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[12..28]);
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[33..41]);
        let info = ConnInfo {
            qpn: u32_at(4),
            psn: u32_at(8),
            gid,
            gid_index: b[28],
            mtu: u32_at(29),
            ring_addr: u64::from_le_bytes(addr),
            ring_len: u32_at(41),
            rkey: u32_at(45),
        };
        if !(1..=5).contains(&info.mtu) {
            return Err(format!("MTU code {} out of range", info.mtu));
        }
        if info.ring_len < 4096 || info.psn >= 1 << 24 {
            return Err("ring or PSN out of range".into());
        }
        Ok(info)
    }
}

/// The immediate value of a message: kind in the top two bits, a count below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Imm {
    /// `n` bytes were written at the ring's next position.
    Data(u32),
    /// The receiver freed `n` more bytes of its ring.
    Credit(u32),
    /// No more data (half-close).
    Fin,
    /// The connection's first message each way (set-up handshake).
    Hello,
}

const IMM_COUNT: u32 = (1 << 30) - 1;

impl Imm {
    pub fn encode(self) -> u32 {
        match self {
            Imm::Data(n) => n & IMM_COUNT,
            Imm::Credit(n) => (2 << 30) | (n & IMM_COUNT),
            Imm::Fin => 3 << 30,
            Imm::Hello => 1 << 30,
        }
    }

    pub fn decode(v: u32) -> Option<Self> {
        match v >> 30 {
            0 => Some(Imm::Data(v & IMM_COUNT)),
            1 if v & IMM_COUNT == 0 => Some(Imm::Hello),
            2 => Some(Imm::Credit(v & IMM_COUNT)),
            3 => Some(Imm::Fin),
            _ => None,
        }
    }
}

/// The RoCE v2 GID of an IPv4 address: `::ffff:a.b.c.d`.
pub fn ipv4_mapped_gid(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// Parses a GID as sysfs prints it (`0000:0000:0000:0000:0000:ffff:0a00:0001`).
pub fn parse_gid(s: &str) -> Option<[u8; 16]> {
    let groups: Vec<u16> = s
        .trim()
        .split(':')
        .map(|g| u16::from_str_radix(g, 16).ok())
        .collect::<Option<_>>()?;
    if groups.len() != 8 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, g) in groups.iter().enumerate() {
        out[2 * i..2 * i + 2].copy_from_slice(&g.to_be_bytes());
    }
    Some(out)
}

/// Where a rank's address lives: device name and GID index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidLocation {
    pub device: String,
    pub gid_index: u8,
    pub gid: [u8; 16],
}

/// Finds the device and RoCE v2 GID index of `ip` under `root`
/// (`/sys/class/infiniband`).
pub fn find_gid(root: &Path, ip: Ipv4Addr) -> Result<GidLocation, RdmaError> {
    let want = ipv4_mapped_gid(ip);
    let devices = std::fs::read_dir(root)
        .map_err(|e| RdmaError::NoDevice(format!("{}: {e}", root.display())))?;
    let mut seen = Vec::new();
    for d in devices.flatten() {
        let name = d.file_name().to_string_lossy().into_owned();
        seen.push(name.clone());
        let port = d.path().join("ports/1");
        for index in 0..=255u8 {
            let Ok(text) = std::fs::read_to_string(port.join(format!("gids/{index}"))) else {
                break;
            };
            if parse_gid(&text) != Some(want) {
                continue;
            }
            let kind = std::fs::read_to_string(port.join(format!("gid_attrs/types/{index}")))
                .unwrap_or_default();
            if kind.trim() == "RoCE v2" {
                return Ok(GidLocation {
                    device: name,
                    gid_index: index,
                    gid: want,
                });
            }
        }
    }
    Err(RdmaError::NoDevice(if seen.is_empty() {
        format!("no RDMA devices in {}", root.display())
    } else {
        format!(
            "no RoCE v2 GID for {ip} on {} (is an rxe/RoCE device bound to the interface with that address?)",
            seen.join(", ")
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ConnInfo {
        ConnInfo {
            qpn: 17,
            psn: 0x12345,
            gid: ipv4_mapped_gid(Ipv4Addr::new(10, 0, 0, 1)),
            gid_index: 1,
            mtu: 3,
            ring_addr: 0x7f00_1234_5000,
            ring_len: 4 << 20,
            rkey: 0xabcd,
        }
    }

    #[test]
    fn connection_info_round_trips_and_rejects_garbage() {
        let i = info();
        assert_eq!(ConnInfo::decode(&i.encode()), Ok(i));
        assert!(ConnInfo::decode(b"CWRD").is_err());
        let mut bad = i.encode();
        bad[29] = 9; // MTU code
        assert!(ConnInfo::decode(&bad).is_err());
        let mut bad = i.encode();
        bad[0] = b'X';
        assert!(ConnInfo::decode(&bad).is_err());
    }

    #[test]
    fn immediates_keep_their_kind_and_count() {
        for m in [
            Imm::Data(0),
            Imm::Data(1 << 20),
            Imm::Credit(4096),
            Imm::Fin,
            Imm::Hello,
        ] {
            assert_eq!(Imm::decode(m.encode()), Some(m));
        }
        assert_eq!(Imm::decode((1 << 30) | 5), None);
    }

    #[test]
    fn the_gid_of_an_address_is_found_by_type_not_by_index() {
        let root = std::env::temp_dir().join(format!("cw-rdma-sysfs-{}", std::process::id()));
        let port = root.join("rxe1/ports/1");
        std::fs::create_dir_all(port.join("gids")).expect("mkdir");
        std::fs::create_dir_all(port.join("gid_attrs/types")).expect("mkdir");
        let v4 = "0000:0000:0000:0000:0000:ffff:0a00:0002";
        // Index 0: the link-local one; 1: the address as RoCE v1; 2: as v2.
        for (i, gid, kind) in [
            (0, "fe80:0000:0000:0000:0000:00ff:fe00:0001", "RoCE v2"),
            (1, v4, "IB/RoCE v1"),
            (2, v4, "RoCE v2"),
        ] {
            std::fs::write(port.join(format!("gids/{i}")), format!("{gid}\n")).expect("gid");
            std::fs::write(
                port.join(format!("gid_attrs/types/{i}")),
                format!("{kind}\n"),
            )
            .expect("type");
        }
        let got = find_gid(&root, Ipv4Addr::new(10, 0, 0, 2)).expect("found");
        assert_eq!((got.device.as_str(), got.gid_index), ("rxe1", 2));
        let e = find_gid(&root, Ipv4Addr::new(10, 0, 0, 9)).expect_err("absent");
        assert!(e.to_string().contains("rxe1"), "{e}");
        assert!(find_gid(&root.join("none"), Ipv4Addr::LOCALHOST).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn transport_choices_parse() {
        assert_eq!(TransportChoice::parse(" RDMA"), Some(TransportChoice::Rdma));
        assert_eq!(TransportChoice::parse("tcp"), Some(TransportChoice::Tcp));
        assert_eq!(TransportChoice::parse("auto"), Some(TransportChoice::Auto));
        assert_eq!(TransportChoice::parse("ib"), None);
    }
}
