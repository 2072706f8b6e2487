//! The probe socket: UDP with SO_TIMESTAMPING software stamps (receive
//! stamps as control messages, transmit stamps from the error queue) and,
//! for IPv4, a zero UDP checksum (`SO_NO_CHECK`) so that the eBPF programs
//! may write kernel stamps into the datagram. All unsafe code of the clock
//! module is here.

use std::{
    io,
    mem::{size_of, MaybeUninit},
    net::{SocketAddr, UdpSocket as StdUdpSocket},
    os::fd::{AsRawFd, RawFd},
    sync::atomic::{AtomicU32, Ordering},
};

use tokio::{io::Interest, net::UdpSocket};

use super::source::{tai_minus_realtime_ns, SyncClock};

/// `SO_TIMESTAMPING` (the "old" 64-bit-time_t variant on 64-bit Linux,
/// asm-generic/socket.h); the control message type is the same value.
const SO_TIMESTAMPING: libc::c_int = 37;
/// `SO_NO_CHECK` (asm-generic/socket.h): send IPv4 UDP with checksum 0.
const SO_NO_CHECK: libc::c_int = 11;
/// `SCM_TSTAMP_SND` (linux/errqueue.h): the stamp was taken at transmit.
const SCM_TSTAMP_SND: u32 = 0;

const STAMP_FLAGS: libc::c_uint = libc::SOF_TIMESTAMPING_TX_SOFTWARE
    | libc::SOF_TIMESTAMPING_RX_SOFTWARE
    | libc::SOF_TIMESTAMPING_SOFTWARE
    | libc::SOF_TIMESTAMPING_OPT_ID
    | libc::SOF_TIMESTAMPING_OPT_TSONLY;

/// One received datagram.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    pub len: usize,
    pub from: SocketAddr,
    /// Host clock right after `recvmsg` returned.
    pub user: u64,
    /// SO_TIMESTAMPING software receive stamp on the host clock.
    pub software: Option<u64>,
}

/// A UDP socket that reports send and receive stamps on the host clock.
pub struct StampedSocket {
    sock: UdpSocket,
    clock: SyncClock,
    tai_offset_ns: i64,
    software: bool,
    zero_checksum: bool,
    ipv6: bool,
    /// Datagrams sent; with SOF_TIMESTAMPING_OPT_ID the kernel numbers the
    /// transmit stamps the same way, from 0.
    sent: AtomicU32,
}

impl StampedSocket {
    /// Binds `addr`, enables software stamps (if the kernel allows) and,
    /// with `zero_checksum` and IPv4, zero UDP checksums. Must run inside a
    /// tokio runtime.
    pub fn bind(
        addr: SocketAddr,
        clock: SyncClock,
        zero_checksum: bool,
    ) -> io::Result<StampedSocket> {
        let std = StdUdpSocket::bind(addr)?;
        std.set_nonblocking(true)?;
        let fd = std.as_raw_fd();
        let software =
            setsockopt_int(fd, libc::SOL_SOCKET, SO_TIMESTAMPING, STAMP_FLAGS as i32).is_ok();
        let zero_checksum = zero_checksum
            && addr.is_ipv4()
            && setsockopt_int(fd, libc::SOL_SOCKET, SO_NO_CHECK, 1).is_ok();
        Ok(StampedSocket {
            sock: UdpSocket::from_std(std)?,
            clock,
            tai_offset_ns: tai_minus_realtime_ns(),
            software,
            zero_checksum,
            ipv6: addr.is_ipv6(),
            sent: AtomicU32::new(0),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// SO_TIMESTAMPING is on.
    pub fn software_stamps(&self) -> bool {
        self.software
    }

    /// IPv4 datagrams leave with checksum 0 (kernel stamping possible).
    pub fn zero_checksum(&self) -> bool {
        self.zero_checksum
    }

    pub fn clock(&self) -> SyncClock {
        self.clock
    }

    /// Sends `buf` to `to`; returns the transmit-stamp id of the datagram.
    pub async fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<u32> {
        // A dual-stack (IPv6) socket reaches IPv4 peers at their mapped address.
        let to = match to {
            SocketAddr::V4(v4) if self.ipv6 => {
                SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port())
            }
            other => other,
        };
        let n = self.sock.send_to(buf, to).await?;
        if n != buf.len() {
            return Err(io::Error::other(format!(
                "short send: {n} of {} bytes",
                buf.len()
            )));
        }
        Ok(self.sent.fetch_add(1, Ordering::Relaxed))
    }

    /// Waits for one datagram.
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<Received> {
        let fd = self.sock.as_raw_fd();
        self.sock
            .async_io(Interest::READABLE, || {
                let (len, from, realtime) = recvmsg(fd, buf, 0)?;
                let user = self.clock.now();
                Ok(Received {
                    len,
                    from: from
                        .ok_or_else(|| io::Error::other("datagram without a source address"))?,
                    user,
                    software: realtime.map(|ns| self.to_host(ns)),
                })
            })
            .await
    }

    /// Transmit stamps waiting in the error queue, as (id, host clock).
    pub fn drain_tx_stamps(&self) -> Vec<(u32, u64)> {
        let fd = self.sock.as_raw_fd();
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            match recv_err(fd, &mut buf) {
                Ok(Some((id, realtime))) => out.push((id, self.to_host(realtime))),
                Ok(None) => {}
                Err(_) => break,
            }
        }
        out
    }

    fn to_host(&self, realtime_ns: u64) -> u64 {
        self.clock
            .apply(realtime_ns.wrapping_add_signed(self.tai_offset_ns))
    }
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` outlives the call and its size is passed; `fd` is an
    // open socket owned by the caller.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Control-message buffer, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; 256]);

/// `recvmsg` with `flags`; returns the length, the source address and the
/// SCM_TIMESTAMPING software stamp (CLOCK_REALTIME ns), if any.
fn recvmsg(
    fd: RawFd,
    buf: &mut [u8],
    flags: libc::c_int,
) -> io::Result<(usize, Option<SocketAddr>, Option<u64>)> {
    let mut addr = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut cmsg = CmsgBuf([0; 256]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below stays valid for
    // the duration of the call, with its true length.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = addr.as_mut_ptr().cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.0.as_mut_ptr().cast();
    msg.msg_controllen = cmsg.0.len();
    // SAFETY: `msg` describes buffers owned by this frame (see above).
    let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: the kernel filled `msg_controllen` bytes of `cmsg`; the CMSG_*
    // macros walk only inside them, and each payload is read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SO_TIMESTAMPING {
                let ts = (libc::CMSG_DATA(c) as *const libc::timespec).read_unaligned();
                if ts.tv_sec != 0 || ts.tv_nsec != 0 {
                    stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let from = if msg.msg_namelen > 0 {
        // SAFETY: the kernel wrote a sockaddr of `msg_namelen` bytes.
        sockaddr_to_std(unsafe { addr.assume_init_ref() })
    } else {
        None
    };
    Ok((n as usize, from, stamp))
}

/// One error-queue message: `Some((id, realtime ns))` for a transmit stamp,
/// `None` for anything else; `Err` when the queue is empty.
fn recv_err(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<(u32, u64)>> {
    let mut cmsg = CmsgBuf([0; 256]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as in `recvmsg`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.0.as_mut_ptr().cast();
    msg.msg_controllen = cmsg.0.len();
    // SAFETY: `msg` describes buffers owned by this frame.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stamp = None;
    let mut id = None;
    // SAFETY: as in `recvmsg`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let (level, ty) = ((*c).cmsg_level, (*c).cmsg_type);
            if level == libc::SOL_SOCKET && ty == SO_TIMESTAMPING {
                let ts = (libc::CMSG_DATA(c) as *const libc::timespec).read_unaligned();
                stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            } else if (level == libc::SOL_IP && ty == libc::IP_RECVERR)
                || (level == libc::SOL_IPV6 && ty == libc::IPV6_RECVERR)
            {
                let e = (libc::CMSG_DATA(c) as *const libc::sock_extended_err).read_unaligned();
                if e.ee_errno == libc::ENOMSG as u32
                    && e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                    && e.ee_info == SCM_TSTAMP_SND
                {
                    id = Some(e.ee_data);
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(id.zip(stamp))
}

fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(a.sin6_port))))
        }
        _ => None,
    }
}
