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

/// Sets the first of `names` the kernel accepts; works on listeners too
/// (accepted connections inherit it). Returns whether one was applied. The
/// kernel decides: any process may set one listed in
/// `tcp_allowed_congestion_control`, one with `CAP_NET_ADMIN` any one the
/// kernel has (checking the list here, as before, kept a root process that
/// asked for `CAUSEWAY_TCP_CC=cubic` on BBR without a word where the list
/// held only `reno bbr`).
pub fn prefer_congestion(s: SockRef<'_>, names: &[&str]) -> bool {
    names
        .iter()
        .any(|name| s.set_tcp_congestion(name.as_bytes()).is_ok())
}

/// The network namespace's default congestion control.
pub fn system_congestion() -> Option<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Congestion controls tried for latency connections, in order (Linux always
/// allows reno). BBR first: a loss-based window halves at each random loss and
/// an app-limited connection hardly grows it back, so on a 0.5 % loss path
/// (lossy120) the window stayed near 25 segments and a 64 KiB allreduce's
/// 32 KiB per rank took a second round trip (1.55 RTT; 0.60 with BBR, which
/// keeps its window through random loss). On wan40 both give 0.59 RTT.
pub const LATENCY_CONGESTION: [&str; 3] = ["bbr", "cubic", "reno"];

/// Caps how fast the kernel paces this connection (SO_MAX_PACING_RATE, bytes/s).
/// TCP paces internally when no fq qdisc does, so this works on any interface.
/// Flows that together stay just below a bottleneck keep its queue (and with it
/// the RTT every flow's window must cover) near empty.
pub fn set_max_pacing_rate(s: &TcpStream, bytes_per_s: u64) -> io::Result<()> {
    // The kernel accepts a 32- or 64-bit rate for this option.
    setsockopt(s, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, &bytes_per_s)
}

/// `setsockopt(level, name)` with the value `v`, passed by address with its
/// exact size (the kernel reads only that memory).
#[allow(unsafe_code)]
pub(crate) fn setsockopt<T>(
    s: &TcpStream,
    level: libc::c_int,
    name: libc::c_int,
    v: &T,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the fd is a live socket owned by `s`; `v` points to a
    // properly initialised `T` for the duration of the call and its exact
    // size is passed, so the kernel reads only that memory.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
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
    fn settled(&self) -> bool {
        settled(&self.0)
    }
}

/// `TCP_CLOSE` in `tcpi_state`.
const TCP_STATE_CLOSE: u8 = 7;

/// See [`Closer::settled`]: nothing unsent or unacknowledged, or closed.
pub(crate) fn settled(s: &TcpStream) -> bool {
    tcp_info(s).map_or(true, |i| i.state == TCP_STATE_CLOSE || !i.busy)
}

impl Transport for TcpTransport {
    fn describe(&self) -> String {
        match self.stream.peer_addr() {
            Ok(a) => format!("tcp {a}"),
            Err(_) => "tcp (disconnected)".into(),
        }
    }

    fn split(self: Box<Self>) -> io::Result<(Reader, Writer, Arc<dyn Closer>)> {
        let r = TcpReader::new(self.stream.try_clone()?)?;
        let c = self.stream.try_clone()?;
        Ok((Box::new(r), Box::new(self.stream), Arc::new(TcpCloser(c))))
    }
}

/// The most a read waits for before it is woken (see [`TcpReader`]).
pub const RCVLOWAT_MAX: usize = 256 << 10;

/// The reading half of a TCP connection, woken once per piece of a read
/// rather than once per segment: before each `read` it sets `SO_RCVLOWAT` to
/// the bytes asked for (at most [`RCVLOWAT_MAX`] and an eighth of the receive
/// buffer), so the kernel neither wakes
/// the thread nor returns until that much is queued (or the connection ends,
/// or the receive buffer fills). A frame reader asks for exactly what the
/// frame still lacks, so it is never kept waiting for bytes that are not
/// coming; a read of a 1 MiB payload takes a handful of wake-ups and system
/// calls instead of one per arriving segment (hundreds on a WAN path whose
/// segments arrive paced, one at a time).
struct TcpReader {
    stream: TcpStream,
    /// The low-water mark set on the socket (the kernel's default is 1).
    lowat: usize,
    /// The socket's read timeout as `poll` takes it (-1: none), read once:
    /// nothing changes it once the transport is split.
    timeout_ms: libc::c_int,
}

impl TcpReader {
    fn new(stream: TcpStream) -> io::Result<Self> {
        let timeout_ms = match stream.read_timeout()? {
            Some(d) => libc::c_int::try_from(d.as_millis().max(1)).unwrap_or(libc::c_int::MAX),
            None => -1,
        };
        Ok(TcpReader {
            stream,
            lowat: 1,
            timeout_ms,
        })
    }
}

impl crate::transport::StreamRead for TcpReader {}

impl io::Read for TcpReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut want = buf.len().clamp(1, RCVLOWAT_MAX);
        if want > 1 << 12 {
            // At most an eighth of the receive buffer (whose size counts the
            // kernel's overhead, often as much as the payload): the window
            // stays open until the mark is reached, so the wake-up comes from
            // data, not from the kernel's last-resort checks on a full buffer.
            let room = SockRef::from(&self.stream).recv_buffer_size().unwrap_or(0);
            want = want.min(room / 8).max(1);
        }
        if want != self.lowat {
            // A kernel that refuses it wakes on every segment, as before.
            let _ = set_rcvlowat(&self.stream, want);
            self.lowat = want;
        }
        if buf.is_empty() {
            return Ok(0);
        }
        // Wait in poll(), then take what is queued without blocking: the
        // kernel compares the mark with the bytes *queued*, so a blocking
        // recv that had copied part of its mark and slept for the rest would
        // not be woken by a last piece smaller than the mark.
        loop {
            wait_readable(&self.stream, self.timeout_ms)?;
            match recv_nowait(&self.stream, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                got => return got,
            }
        }
    }
}

/// Blocks until the socket is readable (its `SO_RCVLOWAT` bytes queued, the
/// peer's end, an error, or the kernel's own reasons), within `timeout_ms`
/// (-1: no limit).
#[allow(unsafe_code)]
fn wait_readable(s: &TcpStream, timeout_ms: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `p` is one valid pollfd for the duration of the call and
        // the count passed is 1; the fd is a live socket owned by `s`.
        let rc = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        match rc {
            0 => return Err(io::ErrorKind::TimedOut.into()),
            r if r > 0 => return Ok(()),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// `recv(MSG_DONTWAIT)`: what is queued, up to `buf.len()`, without sleeping.
#[allow(unsafe_code)]
fn recv_nowait(s: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: the fd is a live socket owned by `s`; `buf` is valid for
    // writes of `buf.len()` bytes for the duration of the call.
    let n = unsafe {
        libc::recv(
            s.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Sets `SO_RCVLOWAT`: a blocking read returns, and the reader is woken, once
/// `bytes` are queued (the kernel caps it at half the receive buffer, and
/// wakes the reader anyway when the buffer is under pressure or the
/// connection ends).
fn set_rcvlowat(s: &TcpStream, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt(s, libc::SOL_SOCKET, libc::SO_RCVLOWAT, &v)
}

/// What one `getsockopt(TCP_INFO)` says about a connection (the fields the
/// WAN estimates use; times in µs, rates in bytes/s, the kernel's units).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// Smoothed RTT (`tcpi_rtt`).
    pub rtt_us: u32,
    /// The kernel's windowed minimum RTT (`tcpi_min_rtt`).
    pub min_rtt_us: u32,
    /// Rate of the most recent delivery-rate sample (`tcpi_delivery_rate`).
    pub delivery_rate: u64,
    /// Whether that sample was taken while the sender ran out of data.
    pub app_limited: bool,
    /// Segments delivered so far (`tcpi_delivered`): tells a fresh sample
    /// from one already seen.
    pub delivered: u32,
    /// Payload bytes acknowledged so far (`tcpi_bytes_acked`).
    pub bytes_acked: u64,
    /// Data segments received so far, in order or not (`tcpi_data_segs_in`).
    pub data_segs_in: u32,
    /// Largest segment received (`tcpi_rcv_mss`).
    pub rcv_mss: u32,
    /// The receiver's RTT estimate (`tcpi_rcv_rtt`, 0 when none).
    pub rcv_rtt_us: u32,
    /// Whether the connection has data in flight or queued unsent
    /// (`tcpi_unacked`, `tcpi_notsent_bytes`).
    pub busy: bool,
    /// Whether the connection has data queued that it has not sent yet
    /// (`tcpi_notsent_bytes`): a pacing cap holds it back now.
    pub unsent: bool,
    /// Segments retransmitted so far (`tcpi_total_retrans`).
    pub total_retrans: u32,
    /// Milliseconds since the last ACK arrived (`tcpi_last_ack_recv`).
    pub last_ack_recv_ms: u32,
    /// Maximum segment size (`tcpi_snd_mss`).
    pub snd_mss: u32,
    /// The kernel's current pacing rate and its cap (`tcpi_pacing_rate`,
    /// `tcpi_max_pacing_rate`; the cap is `u64::MAX` when none is set).
    pub pacing_rate: u64,
    pub max_pacing_rate: u64,
    /// The connection's state (`tcpi_state`, the kernel's `TCP_*` values).
    pub state: u8,
    /// Congestion window, segments (`tcpi_snd_cwnd`).
    pub snd_cwnd: u32,
    /// Data segments sent so far, retransmissions included (`tcpi_data_segs_out`).
    pub data_segs_out: u32,
    /// Retransmissions the receiver reported as duplicates (D-SACK,
    /// `tcpi_dsack_dups`): spurious ones, which lost nothing. `None` on a
    /// kernel before 5.4, which does not report it.
    pub dsack_dups: Option<u32>,
}

/// `struct tcp_info` (linux/tcp.h) up to `tcpi_reord_seen`; the kernel
/// copies as much of its own as fits and says how much.
#[repr(C)]
#[derive(Default)]
struct RawTcpInfo {
    /// state, ca_state, retransmits, probes, backoff, options,
    /// snd/rcv_wscale, then `delivery_rate_app_limited` in bit 0 of byte 7.
    bytes: [u8; 8],
    u32s_a: [u32; 24], // rto … total_retrans (offsets 8..104)
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    u32s_b: [u32; 6], // segs_out, segs_in, notsent_bytes, min_rtt, data_segs_in, data_segs_out
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
}

/// Offset of `tcpi_delivered` + 4: a kernel that copies less has no
/// delivery-rate sampling (before 4.18) and gets an error.
const TCP_INFO_NEEDED: usize = 196;
/// Offset of `tcpi_dsack_dups` + 4 (Linux 5.4).
const TCP_INFO_DSACK: usize = 220;

/// Reads `TCP_INFO` of a connection.
#[allow(unsafe_code)]
pub fn tcp_info(s: &TcpStream) -> io::Result<TcpInfo> {
    use std::os::fd::AsRawFd;
    let mut raw = RawTcpInfo::default();
    let mut len = std::mem::size_of::<RawTcpInfo>() as libc::socklen_t;
    // SAFETY: the fd is a live socket owned by `s`; `raw` is a plain-old-data
    // `repr(C)` struct valid for `len` bytes, which the kernel writes at most
    // (it copies min(len, its size) and stores the count in `len`).
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut raw as *mut RawTcpInfo).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < TCP_INFO_NEEDED {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("TCP_INFO of {len} bytes has no delivery-rate fields"),
        ));
    }
    Ok(TcpInfo {
        rtt_us: raw.u32s_a[15],
        min_rtt_us: raw.u32s_b[3],
        delivery_rate: raw.delivery_rate,
        app_limited: raw.bytes[7] & 1 != 0,
        busy: raw.u32s_a[4] > 0 || raw.u32s_b[2] > 0,
        unsent: raw.u32s_b[2] > 0,
        delivered: raw.delivered,
        bytes_acked: raw.bytes_acked,
        data_segs_in: raw.u32s_b[4],
        rcv_mss: raw.u32s_a[3],
        rcv_rtt_us: raw.u32s_a[21],
        total_retrans: raw.u32s_a[23],
        last_ack_recv_ms: raw.u32s_a[12],
        snd_mss: raw.u32s_a[2],
        pacing_rate: raw.pacing_rate,
        max_pacing_rate: raw.max_pacing_rate,
        state: raw.bytes[0],
        snd_cwnd: raw.u32s_a[18],
        data_segs_out: raw.u32s_b[5],
        dsack_dups: (len as usize >= TCP_INFO_DSACK).then_some(raw.dsack_dups),
    })
}

/// Clamps the receive window a connection advertises (`TCP_WINDOW_CLAMP`,
/// bytes; the kernel raises values below half its minimum buffer):
/// the peer never has more than that in flight towards us.
pub fn set_window_clamp(s: &TcpStream, bytes: u32) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt(s, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, &v)
}

/// Caps the bytes a connection keeps queued unsent (TCP_NOTSENT_LOWAT): the
/// writer blocks instead of piling data behind a paced socket.
pub fn set_notsent_lowat(s: &TcpStream, bytes: u32) -> io::Result<()> {
    SockRef::from(s).set_tcp_notsent_lowat(bytes)
}

#[cfg(test)]
mod info_tests {
    use super::*;

    #[test]
    fn the_raw_layout_matches_linux_tcp_info() {
        assert_eq!(std::mem::offset_of!(RawTcpInfo, pacing_rate), 104);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, bytes_acked), 120);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, delivery_rate), 160);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, delivered), 192);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, dsack_dups), 216);
        assert_eq!(std::mem::size_of::<RawTcpInfo>(), 224);
    }

    /// A connected loopback pair: (the dialing end, the accepted end).
    fn loopback_pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (b, _) = l.accept().expect("accept");
        (a, b)
    }

    /// Sends 4 MiB from the dialing end of a loopback pair to the accepted
    /// end, after `setup(sender, receiver)`; returns both ends' `TCP_INFO`.
    fn after_4_mib(setup: impl FnOnce(&TcpStream, &TcpStream)) -> (TcpInfo, TcpInfo) {
        use std::io::{Read, Write};
        let (mut a, mut b) = loopback_pair();
        setup(&a, &b);
        let t = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0;
            while n < 4 << 20 {
                n += b.read(&mut buf).expect("read");
            }
            tcp_info(&b).expect("TCP_INFO of the receiver")
        });
        let chunk = vec![7u8; 1 << 20];
        for _ in 0..4 {
            a.write_all(&chunk).expect("write");
        }
        let received = t.join().expect("reader");
        (tcp_info(&a).expect("TCP_INFO of the sender"), received)
    }

    /// A loopback connection that carried data reports an RTT, a delivery
    /// rate and the pacing cap it was given.
    #[test]
    fn tcp_info_of_a_loopback_connection() {
        let (i, _) = after_4_mib(|a, _| set_max_pacing_rate(a, 1 << 30).expect("pacing cap"));
        assert!(i.bytes_acked > 0 && i.delivered > 0, "{i:?}");
        assert!(i.delivery_rate > 0, "{i:?}");
        assert!(i.rtt_us > 0 && i.min_rtt_us > 0, "{i:?}");
        assert_eq!(i.max_pacing_rate, 1 << 30, "{i:?}");
        assert!(i.snd_mss > 0);
        assert!(i.snd_cwnd >= 4 && i.data_segs_out > 0, "{i:?}");
        // Nothing was retransmitted on loopback (kernels before 5.4: `None`).
        assert!(matches!(i.dsack_dups, None | Some(0)), "{i:?}");
    }

    /// The receiver counts the segments it received, and takes a window
    /// clamp on a live connection (data still flows under it).
    #[test]
    fn a_clamped_receiver_counts_what_it_received() {
        let (_, i) = after_4_mib(|_, b| set_window_clamp(b, 128 << 10).expect("clamp accepted"));
        // A segment is at most 64 KiB, so 4 MiB took at least 64 of them.
        assert!((536..=65_535).contains(&i.rcv_mss), "{i:?}");
        assert!(i.data_segs_in >= 64, "{i:?}");
        let arrived = u64::from(i.data_segs_in) * u64::from(i.rcv_mss);
        assert!(arrived > 0, "{i:?}");
    }

    /// `settled`: false while written bytes wait for the peer's kernel (a
    /// peer that does not read), true once it has acknowledged all of them
    /// and the half-close, and true for a connection the peer reset.
    #[test]
    fn a_connection_is_settled_once_the_peer_acknowledged_everything() {
        use std::io::{Read, Write};
        let pair = loopback_pair;
        let wait_for = |what: &dyn Fn() -> bool| {
            for _ in 0..400 {
                if what() {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            false
        };
        const LEN: usize = 64 << 20;
        let (a, mut b) = pair();
        assert!(settled(&a), "nothing written yet");
        let mut w = a.try_clone().expect("clone");
        let writer = std::thread::spawn(move || w.write_all(&vec![1u8; LEN]));
        // The peer does not read: the buffers fill and the rest waits.
        assert!(wait_for(&|| !settled(&a)), "queued bytes are not settled");
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!settled(&a));
        let mut got = vec![0u8; LEN];
        b.read_exact(&mut got).expect("read");
        writer.join().expect("writer").expect("write");
        a.shutdown(Shutdown::Write).expect("half-close");
        assert!(wait_for(&|| settled(&a)), "acknowledged, FIN included");

        // A peer that goes away with unread data resets the connection:
        // nothing can be delivered any more, so nothing is waited for.
        let (a, b) = pair();
        let mut w = a.try_clone().expect("clone");
        let writer = std::thread::spawn(move || w.write_all(&vec![1u8; LEN]));
        assert!(wait_for(&|| !settled(&a)));
        drop(b);
        assert!(wait_for(&|| settled(&a)), "reset: settled");
        assert!(writer.join().expect("writer").is_err());
    }

    /// The first name the kernel takes is set; names it does not know are
    /// skipped (reno is always allowed, to any user).
    #[test]
    fn the_first_congestion_control_the_kernel_takes_is_set() {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        // The kernel pads the name with NULs.
        let name = |s: &socket2::Socket| {
            let mut n = s.tcp_congestion().expect("getsockopt");
            n.retain(|&b| b != 0);
            n
        };
        assert!(prefer_congestion(
            SockRef::from(&s),
            &["no-such-cc", "reno"]
        ));
        assert_eq!(name(&s), b"reno");
        assert!(!prefer_congestion(SockRef::from(&s), &["no-such-cc"]));
        assert_eq!(name(&s), b"reno", "unchanged");
    }

    /// A large read returns only once `RCVLOWAT_MAX` bytes are queued (the
    /// receive buffer is large enough), even when they trickle in; a small
    /// read after it returns as soon as its few bytes are there (the mark
    /// follows the read, it is never left high).
    #[test]
    fn the_reader_is_woken_for_what_it_asks_for() {
        use std::io::{Read, Write};
        let tuning = TcpTuning {
            socket_buffer: Some(1 << 20),
        };
        let l = listen("127.0.0.1:0".parse().expect("addr"), tuning).expect("listen");
        let mut a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (b, _) = l.accept().expect("accept");
        // A read that would wait for bytes that never come fails, not hangs.
        b.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut r = TcpReader::new(b).expect("reader");
        let total = 2 * RCVLOWAT_MAX;
        let t = std::thread::spawn(move || {
            for _ in 0..total / (16 << 10) {
                a.write_all(&[7u8; 16 << 10]).expect("write");
                std::thread::sleep(Duration::from_micros(500));
            }
            a
        });
        let mut buf = vec![0u8; total];
        let n = r.read(&mut buf).expect("read");
        assert!(n >= RCVLOWAT_MAX, "woken with {n} bytes");
        let mut rest = n;
        while rest < total {
            rest += r.read(&mut buf[rest..]).expect("read");
        }
        assert!(buf.iter().all(|&x| x == 7));
        let mut a = t.join().expect("writer");
        a.write_all(&[9u8; 5]).expect("write");
        let mut small = [0u8; 5];
        assert_eq!(r.read(&mut small).expect("small read"), 5);
        assert_eq!(small, [9u8; 5]);
        // A read whose bytes come in two pieces, the second smaller than the
        // mark, is woken by the second (a blocking recv that had copied the
        // first would wait for a whole mark more).
        let want = RCVLOWAT_MAX + (RCVLOWAT_MAX >> 1);
        a.write_all(&vec![3u8; RCVLOWAT_MAX - 1000]).expect("write");
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            a.write_all(&vec![3u8; (RCVLOWAT_MAX >> 1) + 1000])
                .expect("write");
            a
        });
        let mut got = 0;
        while got < want {
            got += r.read(&mut buf[got..want]).expect("read in two pieces");
        }
        let mut a = t.join().expect("writer");
        // The peer's end wakes a reader waiting for more than will come.
        a.write_all(&[1u8; 100]).expect("write");
        drop(a);
        let mut big = vec![0u8; 1 << 20];
        assert_eq!(r.read(&mut big).expect("read at the end"), 100);
        assert_eq!(r.read(&mut big).expect("end"), 0);
    }
}
