//! AF_PACKET raw sockets bound to one interface, with batched receive and send
//! (`recvmmsg`/`sendmmsg`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::check;

const ETH_P_ALL: u16 = 0x0003;
const SOL_PACKET: libc::c_int = 263;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// A raw packet socket bound to one interface.
pub struct PacketSocket {
    fd: OwnedFd,
}

fn setsockopt_int(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: value is a live c_int and its size is passed.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

impl PacketSocket {
    fn open(ifindex: u32, protocol: u16) -> io::Result<OwnedFd> {
        let proto_be = protocol.to_be();
        // SAFETY: plain socket(2); the fd is owned right away.
        let raw = check(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto_be),
            )
        })?;
        // SAFETY: raw was just returned by socket(2) and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain old data; all-zero is valid.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = proto_be;
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: addr is a valid sockaddr_ll and its exact size is passed.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(fd)
    }

    /// A receiving socket: every frame that arrives on the interface, but not the
    /// frames sent out of it (PACKET_IGNORE_OUTGOING), so an emulator never re-reads
    /// what it forwarded. Each frame is preceded by a virtio-net header
    /// (PACKET_VNET_HDR, [`crate::csum::VNET_HDR_LEN`] bytes) that says whether its
    /// checksum still has to be completed.
    pub fn receiver(ifindex: u32, rcvbuf: usize) -> io::Result<Self> {
        let fd = Self::open(ifindex, ETH_P_ALL)?;
        setsockopt_int(&fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
        setsockopt_int(&fd, SOL_PACKET, PACKET_VNET_HDR, 1)?;
        setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
        setsockopt_int(
            &fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            rcvbuf as libc::c_int,
        )?;
        Ok(Self { fd })
    }

    /// A sending socket (protocol 0: it receives nothing), bypassing the qdisc layer.
    pub fn sender(ifindex: u32, sndbuf: usize) -> io::Result<Self> {
        let fd = Self::open(ifindex, 0)?;
        setsockopt_int(&fd, SOL_PACKET, PACKET_QDISC_BYPASS, 1)?;
        setsockopt_int(
            &fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            sndbuf as libc::c_int,
        )?;
        Ok(Self { fd })
    }

    /// Receive up to `bufs.len()` frames without blocking, with the kernel's
    /// receive time of each (CLOCK_REALTIME ns in `stamps`, 0 if absent). For each
    /// frame `lens[i]` is its real length, which is larger than `bufs[i].len()` if
    /// it was truncated. Returns the number of frames (0 when none is waiting).
    pub fn recv_batch(
        &self,
        bufs: &mut [Box<[u8]>],
        lens: &mut [usize],
        stamps: &mut [u64],
    ) -> io::Result<usize> {
        recv_batch_stamped(self.fd.as_fd(), bufs, lens, Some(stamps))
    }

    /// Send frames without blocking; returns how many were sent (a prefix of
    /// `frames`; 0 when the device queue is full and the caller should retry).
    pub fn send_batch(&self, frames: &[&[u8]]) -> io::Result<usize> {
        send_batch(self.fd.as_fd(), frames)
    }
}

/// `recvmmsg` of up to 64 datagrams/frames without blocking, on any socket.
/// `lens[i]` is each one's real length (MSG_TRUNC), larger than `bufs[i].len()` if
/// it was truncated. Returns the count (0 when none is waiting).
pub fn recv_batch(
    fd: BorrowedFd<'_>,
    bufs: &mut [Box<[u8]>],
    lens: &mut [usize],
) -> io::Result<usize> {
    recv_batch_stamped(fd, bufs, lens, None)
}

/// Size of one message's control buffer: room for one `cmsghdr` + `timespec`.
const CMSG_BUF: usize = 64;

/// Like [`recv_batch`]; with `stamps`, also the kernel's receive time of each
/// frame (SO_TIMESTAMPNS, CLOCK_REALTIME nanoseconds; 0 when absent). The socket
/// must have SO_TIMESTAMPNS enabled ([`PacketSocket::receiver`] does).
pub fn recv_batch_stamped(
    fd: BorrowedFd<'_>,
    bufs: &mut [Box<[u8]>],
    lens: &mut [usize],
    mut stamps: Option<&mut [u64]>,
) -> io::Result<usize> {
    let mut n = bufs.len().min(lens.len()).min(64);
    if let Some(st) = stamps.as_deref() {
        n = n.min(st.len());
    }
    let mut iovs: [libc::iovec; 64] = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 64];
    let mut ctrl = [[0u64; CMSG_BUF / 8]; 64]; // u64 for cmsghdr alignment
                                               // SAFETY: mmsghdr is plain old data; all-zero is valid.
    let mut msgs: [libc::mmsghdr; 64] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        iovs[i] = libc::iovec {
            iov_base: bufs[i].as_mut_ptr().cast(),
            iov_len: bufs[i].len(),
        };
        msgs[i].msg_hdr.msg_iov = &mut iovs[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        if stamps.is_some() {
            msgs[i].msg_hdr.msg_control = ctrl[i].as_mut_ptr().cast();
            msgs[i].msg_hdr.msg_controllen = CMSG_BUF;
        }
    }
    // SAFETY: msgs[..n] point at iovecs that describe live, writable buffers
    // and at control buffers of CMSG_BUF bytes, all outliving the call;
    // MSG_TRUNC makes msg_len the real length.
    let ret = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            std::ptr::null_mut(),
        )
    };
    let got = match check(ret) {
        Ok(got) => got as usize,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
        Err(e) => return Err(e),
    };
    for i in 0..got {
        lens[i] = msgs[i].msg_len as usize;
        if let Some(st) = stamps.as_deref_mut() {
            st[i] = timestamp_ns(&msgs[i].msg_hdr);
        }
    }
    Ok(got)
}

/// The SCM_TIMESTAMPNS value of a received message, 0 if it has none.
fn timestamp_ns(hdr: &libc::msghdr) -> u64 {
    // SAFETY: hdr was filled by recvmmsg; CMSG_FIRSTHDR/NXTHDR only walk inside
    // msg_control[..msg_controllen], and CMSG_DATA of an SCM_TIMESTAMPNS message
    // holds a timespec (read unaligned to be safe).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                return ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    0
}

/// `sendmmsg` of up to 64 buffers without blocking on a bound or connected
/// socket; returns how many were sent (0 when the queue is full: retry).
pub fn send_batch(fd: BorrowedFd<'_>, frames: &[&[u8]]) -> io::Result<usize> {
    let n = frames.len().min(64);
    if n == 0 {
        return Ok(0);
    }
    let mut iovs: [libc::iovec; 64] = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 64];
    // SAFETY: mmsghdr is plain old data; all-zero is valid.
    let mut msgs: [libc::mmsghdr; 64] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        iovs[i] = libc::iovec {
            iov_base: frames[i].as_ptr() as *mut _,
            iov_len: frames[i].len(),
        };
        msgs[i].msg_hdr.msg_iov = &mut iovs[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: msgs[..n] point at iovecs over live buffers that the kernel only
    // reads; the socket is bound/connected, so no destination address is needed.
    let ret = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    match check(ret) {
        Ok(sent) => Ok(sent as usize),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) => Ok(0),
        Err(e) => Err(e),
    }
}

impl PacketSocket {
    /// Frames the kernel dropped because the receive buffer was full, since the
    /// last call (PACKET_STATISTICS resets on read).
    pub fn take_drops(&self) -> io::Result<u64> {
        #[repr(C)]
        struct TpacketStats {
            packets: u32,
            drops: u32,
        }
        let mut st = TpacketStats {
            packets: 0,
            drops: 0,
        };
        let mut len = std::mem::size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: st is a live tpacket_stats and len holds its size.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                (&mut st as *mut TpacketStats).cast(),
                &mut len,
            )
        })?;
        Ok(u64::from(st.drops))
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
