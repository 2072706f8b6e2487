//! TCP transport: TCP_NODELAY, optional large socket buffers for long fat pipes.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, Type};

use super::{Closer, Reader, Transport, Writer};

/// Socket tuning shared by listeners and outgoing connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpTuning {
    /// SO_SNDBUF/SO_RCVBUF in bytes; `None` leaves the kernel's autotuning alone.
    pub socket_buffer: Option<usize>,
}

impl TcpTuning {
    /// Large buffers only where the kernel honours them: setting SO_RCVBUF turns
    /// Linux autotuning off, so below `net.core.rmem_max` it would only hurt.
    pub fn for_long_fat_pipes(wanted: usize) -> Self {
        let max = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
        };
        let ok = matches!((max("/proc/sys/net/core/rmem_max"), max("/proc/sys/net/core/wmem_max")),
            (Some(r), Some(w)) if r >= wanted && w >= wanted);
        TcpTuning {
            socket_buffer: ok.then_some(wanted),
        }
    }

    fn apply(&self, s: SockRef<'_>) -> io::Result<()> {
        if let Some(n) = self.socket_buffer {
            s.set_send_buffer_size(n)?;
            s.set_recv_buffer_size(n)?;
        }
        Ok(())
    }
}

/// A listener whose accepted sockets inherit the tuning (buffers must be sized
/// before the handshake for the window scale to match).
pub fn listen(addr: SocketAddr, tuning: TcpTuning) -> io::Result<TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    tuning.apply(SockRef::from(&s))?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    Ok(s.into())
}

/// Dials `addr`; `congestion` (first one allowed, if any) is set before the
/// handshake, so the connection never runs the system default's start-up (BBR
/// would leave it paced for good).
pub fn connect(
    addr: SocketAddr,
    tuning: TcpTuning,
    timeout: Duration,
    congestion: &[&str],
) -> io::Result<TcpStream> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    tuning.apply(SockRef::from(&s))?;
    prefer_congestion(SockRef::from(&s), congestion);
    s.connect_timeout(&addr.into(), timeout)?;
    let s: TcpStream = s.into();
    s.set_nodelay(true)?;
    Ok(s)
}

/// Picks a congestion control for one connection (e.g. `bbr`, which paces and
/// keeps queues short on long fat pipes) if the kernel allows it for this user.
/// Returns whether it was applied.
pub fn set_congestion(s: &TcpStream, name: &str) -> bool {
    prefer_congestion(SockRef::from(s), &[name])
}

/// Sets the first of `names` the kernel allows; works on listeners too (accepted
/// connections inherit it). Returns whether one was applied.
pub fn prefer_congestion(s: SockRef<'_>, names: &[&str]) -> bool {
    let allowed = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
        .unwrap_or_default();
    names.iter().any(|name| {
        allowed.split_whitespace().any(|a| a == *name)
            && s.set_tcp_congestion(name.as_bytes()).is_ok()
    })
}

/// The network namespace's default congestion control.
pub fn system_congestion() -> Option<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Congestion controls tried for latency connections, in order: loss-based and
/// not paced, so a small transfer leaves in one window (Linux always allows reno).
pub const LATENCY_CONGESTION: [&str; 2] = ["cubic", "reno"];

/// Caps how fast the kernel paces this connection (SO_MAX_PACING_RATE, bytes/s).
/// TCP paces internally when no fq qdisc does, so this works on any interface.
/// Flows that together stay just below a bottleneck keep its queue (and with it
/// the RTT every flow's window must cover) near empty.
#[allow(unsafe_code)]
pub fn set_max_pacing_rate(s: &TcpStream, bytes_per_s: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let v: u64 = bytes_per_s;
    // SAFETY: the fd is a live socket owned by `s`; the option value is a valid
    // u64 for the duration of the call and its size is passed exactly (the
    // kernel accepts a 32- or 64-bit rate for this option).
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&v as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub struct TcpTransport {
    stream: TcpStream,
}

impl TcpTransport {
    pub fn new(stream: TcpStream) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(None)?;
        stream.set_write_timeout(None)?;
        Ok(TcpTransport { stream })
    }
}

struct TcpCloser(TcpStream);

impl Closer for TcpCloser {
    fn close(&self) {
        let _ = self.0.shutdown(Shutdown::Both);
    }
    fn finish(&self) {
        let _ = self.0.shutdown(Shutdown::Write);
    }
}

impl Transport for TcpTransport {
    fn describe(&self) -> String {
        match self.stream.peer_addr() {
            Ok(a) => format!("tcp {a}"),
            Err(_) => "tcp (disconnected)".into(),
        }
    }

    fn split(self: Box<Self>) -> io::Result<(Reader, Writer, Arc<dyn Closer>)> {
        let r = self.stream.try_clone()?;
        let c = self.stream.try_clone()?;
        Ok((Box::new(r), Box::new(self.stream), Arc::new(TcpCloser(c))))
    }
}
