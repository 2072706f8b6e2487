//! What the kernel knows about one TCP connection: `TCP_INFO` (RTT, delivery
//! rate, time since the last ACK) and `TIOCOUTQ` (bytes not yet acknowledged).

use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// The fields of `struct tcp_info` the stripe uses.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct TcpSample {
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    /// Milliseconds since the last ACK arrived.
    pub last_ack_recv_ms: u32,
    /// The kernel's latest delivery-rate sample, bytes/s (0 before 4.18).
    pub delivery_rate: u64,
    /// That sample was limited by the application, not the path.
    pub app_limited: bool,
    /// Bytes acknowledged since the connection started.
    pub bytes_acked: u64,
}

// Offsets in the kernel's `struct tcp_info` (include/uapi/linux/tcp.h), stable ABI.
const OFF_APP_LIMITED: usize = 7;
const OFF_LAST_ACK_RECV: usize = 56;
const OFF_RTT: usize = 68;
const OFF_BYTES_ACKED: usize = 120;
const OFF_DELIVERY_RATE: usize = 160;

/// Parses the bytes `getsockopt(TCP_INFO)` returned (`len` of them valid).
pub(crate) fn parse(b: &[u8]) -> Option<TcpSample> {
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_ne_bytes(s.try_into().unwrap_or_default()))
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|s| u64::from_ne_bytes(s.try_into().unwrap_or_default()))
    };
    Some(TcpSample {
        rtt_us: u32_at(OFF_RTT)?,
        last_ack_recv_ms: u32_at(OFF_LAST_ACK_RECV)?,
        delivery_rate: u64_at(OFF_DELIVERY_RATE).unwrap_or(0),
        app_limited: b.get(OFF_APP_LIMITED).is_some_and(|f| f & 1 != 0),
        bytes_acked: u64_at(OFF_BYTES_ACKED).unwrap_or(0),
    })
}

/// `TCP_INFO` of `s`, `None` if the kernel refuses (not a TCP socket).
#[allow(unsafe_code)]
pub(crate) fn tcp_info(s: &TcpStream) -> Option<TcpSample> {
    let mut buf = [0u8; 256];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: the fd is a live socket owned by `s`; the kernel writes at most
    // `len` bytes into `buf` and stores how many in `len`.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    parse(&buf[..(len as usize).min(buf.len())])
}

/// Bytes in the send queue not yet acknowledged by the peer (`TIOCOUTQ`).
#[allow(unsafe_code)]
pub(crate) fn unacked(s: &TcpStream) -> Option<u64> {
    let mut v: libc::c_int = 0;
    // SAFETY: the fd is a live socket owned by `s`; TIOCOUTQ writes one int.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut v) };
    (rc == 0).then(|| u64::try_from(v).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn parses_the_fields_at_their_abi_offsets() {
        let mut b = vec![0u8; 232];
        b[OFF_APP_LIMITED] = 1;
        b[OFF_RTT..OFF_RTT + 4].copy_from_slice(&40_000u32.to_ne_bytes());
        b[OFF_LAST_ACK_RECV..OFF_LAST_ACK_RECV + 4].copy_from_slice(&7u32.to_ne_bytes());
        b[OFF_DELIVERY_RATE..OFF_DELIVERY_RATE + 8].copy_from_slice(&25_000_000u64.to_ne_bytes());
        b[OFF_BYTES_ACKED..OFF_BYTES_ACKED + 8].copy_from_slice(&99u64.to_ne_bytes());
        let s = parse(&b).unwrap();
        assert_eq!(s.rtt_us, 40_000);
        assert_eq!(s.last_ack_recv_ms, 7);
        assert_eq!(s.delivery_rate, 25_000_000);
        assert!(s.app_limited);
        assert_eq!(s.bytes_acked, 99);
        // An old kernel's shorter struct: no delivery rate, still the RTT.
        let old = parse(&b[..104]).unwrap();
        assert_eq!((old.rtt_us, old.delivery_rate), (40_000, 0));
        assert!(parse(&b[..60]).is_none());
    }

    #[test]
    fn a_loopback_connection_reports_acks_and_an_empty_queue() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut a, _) = l.accept().unwrap();
        c.write_all(&[7u8; 100_000]).unwrap();
        let mut got = vec![0u8; 100_000];
        a.read_exact(&mut got).unwrap();
        let mut s = tcp_info(&c).unwrap();
        for _ in 0..100 {
            if s.bytes_acked >= 100_000 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            s = tcp_info(&c).unwrap();
        }
        assert!(s.bytes_acked >= 100_000, "{s:?}");
        assert!(s.rtt_us > 0);
        assert_eq!(unacked(&c), Some(0));
    }
}
