//! Interface queries and offload control through ioctls, in the calling thread's
//! network namespace (no `ethtool` binary needed).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::check;

fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the fd is owned right away.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fd was just returned by socket(2) and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ifreq_for(name: &str) -> io::Result<libc::ifreq> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {name:?}"),
        ));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    Ok(ifr)
}

/// Index of interface `name` in this thread's network namespace.
pub fn ifindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
    // SAFETY: c is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("interface {name}: {e}")));
    }
    Ok(idx)
}

/// MTU of interface `name`.
pub fn mtu(name: &str) -> io::Result<u32> {
    let sock = ioctl_socket()?;
    let mut ifr = ifreq_for(name)?;
    // SAFETY: SIOCGIFMTU reads ifr_name and writes ifru_mtu of a valid ifreq.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut ifr) })
        .map_err(|e| io::Error::new(e.kind(), format!("SIOCGIFMTU {name}: {e}")))?;
    // SAFETY: the kernel filled the mtu member of the union.
    Ok(unsafe { ifr.ifr_ifru.ifru_mtu } as u32)
}

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

// Legacy ethtool commands (include/uapi/linux/ethtool.h); still served by
// net/ethtool/ioctl.c through ethtool_{get,set}_one_feature.
const ETHTOOL_GTXCSUM: u32 = 0x16;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_GSG: u32 = 0x18;
const ETHTOOL_SSG: u32 = 0x19;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;

fn ethtool(name: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let sock = ioctl_socket()?;
    let mut ifr = ifreq_for(name)?;
    let mut val = EthtoolValue { cmd, data };
    ifr.ifr_ifru.ifru_data = (&mut val as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL with ifru_data pointing at a live ethtool_value that the
    // kernel reads (set commands) or writes (get commands); `val` outlives the call.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) })
        .map_err(|e| io::Error::new(e.kind(), format!("SIOCETHTOOL {cmd:#x} on {name}: {e}")))?;
    Ok(val.data)
}

/// Offload features that matter to an emulator reading frames with AF_PACKET.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offloads {
    pub tx_checksum: bool,
    pub scatter_gather: bool,
    pub tso: bool,
    pub gso: bool,
    pub gro: bool,
}

/// Read the offload features of `name`.
pub fn offloads(name: &str) -> io::Result<Offloads> {
    Ok(Offloads {
        tx_checksum: ethtool(name, ETHTOOL_GTXCSUM, 0)? != 0,
        scatter_gather: ethtool(name, ETHTOOL_GSG, 0)? != 0,
        tso: ethtool(name, ETHTOOL_GTSO, 0)? != 0,
        gso: ethtool(name, ETHTOOL_GGSO, 0)? != 0,
        gro: ethtool(name, ETHTOOL_GGRO, 0)? != 0,
    })
}

/// Turn off TSO, GSO, GRO, scatter-gather and TX checksum offload on `name`, so
/// that frames crossing it are real, checksummed frames no larger than the MTU
/// (segmentation and checksums then happen in software before the frame is sent).
pub fn disable_offloads(name: &str) -> io::Result<()> {
    for cmd in [
        ETHTOOL_STSO,
        ETHTOOL_SGSO,
        ETHTOOL_SGRO,
        ETHTOOL_SSG,
        ETHTOOL_STXCSUM,
    ] {
        ethtool(name, cmd, 0)?;
    }
    Ok(())
}
