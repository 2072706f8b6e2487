//! A UDP echo responder and an RTT prober (no `ping` binary, no raw ICMP needed).
//!
//! Create the sockets inside the namespaces (e.g. with [`crate::Testbed::in_host`]);
//! a socket stays in its namespace whichever thread uses it afterwards.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Echoes every datagram back to its sender until dropped.
pub struct EchoServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl EchoServer {
    /// Echo on `socket` from a new thread. The thread asks for SCHED_FIFO (best
    /// effort) so that measured RTTs show the network, not the CPU scheduler.
    pub fn start(socket: UdpSocket) -> std::io::Result<Self> {
        socket.set_read_timeout(Some(Duration::from_millis(20)))?;
        let addr = socket.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("udp-echo".into())
            .spawn(move || {
                let _ = crate::sys::set_realtime(5);
                let mut buf = [0u8; 2048];
                while !flag.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = socket.recv_from(&mut buf) {
                        let _ = socket.send_to(&buf[..n], from);
                    }
                }
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
            addr,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Round-trip samples of one probe run.
#[derive(Debug, Clone, Serialize)]
pub struct RttSamples {
    /// RTTs of the answered probes, sorted ascending.
    pub rtts: Vec<Duration>,
    pub sent: usize,
}

impl RttSamples {
    pub fn lost(&self) -> usize {
        self.sent - self.rtts.len()
    }
    fn quantile(&self, q: f64) -> Option<Duration> {
        if self.rtts.is_empty() {
            return None;
        }
        let i = ((self.rtts.len() - 1) as f64 * q).round() as usize;
        Some(self.rtts[i])
    }
    pub fn min(&self) -> Option<Duration> {
        self.rtts.first().copied()
    }
    pub fn median(&self) -> Option<Duration> {
        self.quantile(0.5)
    }
    pub fn p99(&self) -> Option<Duration> {
        self.quantile(0.99)
    }
    pub fn max(&self) -> Option<Duration> {
        self.rtts.last().copied()
    }
}

/// Send `count` probes of `size` bytes to `dst`, one every `interval`, each
/// waiting at most `timeout` for its echo. Late echoes of earlier probes are ignored.
pub fn probe_rtt(
    socket: &UdpSocket,
    dst: SocketAddr,
    count: usize,
    size: usize,
    interval: Duration,
    timeout: Duration,
) -> std::io::Result<RttSamples> {
    let size = size.clamp(8, 1400);
    let mut out = RttSamples {
        rtts: Vec::with_capacity(count),
        sent: 0,
    };
    let mut buf = vec![0u8; 2048];
    let mut msg = vec![0u8; size];
    for seq in 0..count as u64 {
        msg[..8].copy_from_slice(&seq.to_be_bytes());
        let sent_at = Instant::now();
        socket.send_to(&msg, dst)?;
        out.sent += 1;
        loop {
            let left = timeout.saturating_sub(sent_at.elapsed());
            if left.is_zero() {
                break;
            }
            socket.set_read_timeout(Some(left))?;
            match socket.recv_from(&mut buf) {
                Ok((n, from)) if from == dst && n >= 8 && buf[..8] == seq.to_be_bytes() => {
                    out.rtts.push(sent_at.elapsed());
                    break;
                }
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break
                }
                Err(e) => return Err(e),
            }
        }
        let spent = sent_at.elapsed();
        if spent < interval {
            std::thread::sleep(interval - spent);
        }
    }
    out.rtts.sort();
    Ok(out)
}

/// Mark a socket's packets with `mark` (e.g. a [`crate::Path::mark`] in a gateway
/// namespace, to send them over that WAN path).
pub fn set_mark(socket: &UdpSocket, mark: u32) -> std::io::Result<()> {
    crate::sys::set_socket_mark(std::os::fd::AsFd::as_fd(socket), mark)
}

/// Set the TOS byte of a socket's packets (e.g. a [`crate::Path::tos`] on a host,
/// to send them over that WAN path).
pub fn set_tos(socket: &UdpSocket, tos: u8) -> std::io::Result<()> {
    crate::sys::set_socket_tos(std::os::fd::AsFd::as_fd(socket), tos)
}
