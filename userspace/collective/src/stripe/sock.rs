//! What the kernel knows about one TCP connection that `TCP_INFO`
//! (`crate::transport::tcp::tcp_info`) does not say: `TIOCOUTQ`, the bytes
//! not yet acknowledged, and `SIOCOUTQNSD`, the bytes not yet sent.

use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Bytes in the send queue not yet acknowledged by the peer (`TIOCOUTQ`).
#[allow(unsafe_code)]
pub(crate) fn unacked(s: &TcpStream) -> Option<u64> {
    let mut v: libc::c_int = 0;
    // SAFETY: the fd is a live socket owned by `s`; TIOCOUTQ writes one int.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut v) };
    (rc == 0).then(|| u64::try_from(v).unwrap_or(0))
}

/// Bytes in the send queue not yet sent (`SIOCOUTQNSD`).
#[allow(unsafe_code)]
pub(crate) fn unsent(s: &TcpStream) -> Option<u64> {
    let mut v: libc::c_int = 0;
    // SAFETY: the fd is a live socket owned by `s`; SIOCOUTQNSD writes one int.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCOUTQNSD as _, &mut v) };
    (rc == 0).then(|| u64::try_from(v).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::tcp::tcp_info;
    use std::io::{Read, Write};

    #[test]
    fn a_loopback_connection_reports_acks_and_an_empty_queue() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut a, _) = l.accept().unwrap();
        c.write_all(&[7u8; 100_000]).unwrap();
        let mut got = vec![0u8; 100_000];
        a.read_exact(&mut got).unwrap();
        let mut s = tcp_info(&c).expect("TCP_INFO");
        for _ in 0..100 {
            if s.bytes_acked >= 100_000 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            s = tcp_info(&c).expect("TCP_INFO");
        }
        assert!(s.bytes_acked >= 100_000, "{s:?}");
        assert!(s.rtt_us > 0);
        assert!(s.last_ack_recv_ms < 10_000, "{s:?}");
        assert_eq!(unacked(&c), Some(0));
        assert_eq!(unsent(&c), Some(0));
    }
}
