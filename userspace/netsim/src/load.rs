//! A light UDP load generator and sink (batched syscalls), so that a benchmark on
//! a small machine measures the emulator rather than the traffic generator.

use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::sys;
use crate::sys::packet::{recv_batch, send_batch};

/// Counts every datagram that reaches its socket, until dropped.
pub struct Sink {
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
    packets: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    /// Count on a new thread. It asks for SCHED_FIFO priority 4 (best effort,
    /// below the emulator's 10) so that on a busy machine it keeps up with what
    /// the link delivers.
    pub fn start(socket: UdpSocket) -> std::io::Result<Self> {
        socket.set_nonblocking(true)?;
        sys::set_rcvbuf_force(socket.as_fd(), 16 << 20)?;
        let stop = Arc::new(AtomicBool::new(false));
        let bytes = Arc::new(AtomicU64::new(0));
        let packets = Arc::new(AtomicU64::new(0));
        let (s, b, p) = (stop.clone(), bytes.clone(), packets.clone());
        let thread = std::thread::Builder::new()
            .name("udp-sink".into())
            .spawn(move || {
                let _ = sys::set_realtime(4);
                let mut bufs: Vec<Box<[u8]>> = (0..64)
                    .map(|_| vec![0u8; 2048].into_boxed_slice())
                    .collect();
                let mut lens = [0usize; 64];
                while !s.load(Ordering::Relaxed) {
                    if !sys::wait_readable(socket.as_fd(), 20_000_000).unwrap_or(false) {
                        continue;
                    }
                    while let Ok(n @ 1..) = recv_batch(socket.as_fd(), &mut bufs, &mut lens) {
                        p.fetch_add(n as u64, Ordering::Relaxed);
                        b.fetch_add(lens[..n].iter().map(|l| *l as u64).sum(), Ordering::Relaxed);
                    }
                }
            })?;
        Ok(Self {
            stop,
            bytes,
            packets,
            thread: Some(thread),
        })
    }

    /// Payload bytes received so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What [`blast`] sent.
#[derive(Debug, Clone, Copy)]
pub struct Blast {
    pub packets: u64,
    pub bytes: u64,
    pub elapsed: Duration,
}

/// Send `len`-byte datagrams on a connected socket at `rate_bps` of payload for
/// `duration` (batches of up to 64 per syscall, paced against the clock).
pub fn blast(
    socket: &UdpSocket,
    rate_bps: u64,
    len: usize,
    duration: Duration,
) -> std::io::Result<Blast> {
    let payload = vec![0xA5u8; len.clamp(1, 65_000)];
    let slices: Vec<&[u8]> = (0..64).map(|_| payload.as_slice()).collect();
    let per_sec = rate_bps as f64 / 8.0 / payload.len() as f64;
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        let elapsed = start.elapsed();
        if elapsed >= duration {
            break;
        }
        let due = (elapsed.as_secs_f64() * per_sec) as u64;
        if due > sent {
            let n = (due - sent).min(64) as usize;
            sent += send_batch(socket.as_fd(), &slices[..n])? as u64;
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    Ok(Blast {
        packets: sent,
        bytes: sent * payload.len() as u64,
        elapsed: start.elapsed(),
    })
}
