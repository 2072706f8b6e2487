//! Everything that talks to the kernel directly (raw syscalls and ioctls).
//! All of the crate's `unsafe` code lives in this module.

pub mod netif;
pub mod netns;
pub mod packet;

use std::io;

/// Turn a libc return value into an `io::Result`.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Make this thread's timed sleeps precise: the default 50 µs timer slack would
/// otherwise be added to every wake-up of the emulator.
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long argument and no pointers.
    check(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) })?;
    Ok(())
}

/// Wait until `fd` is readable or `timeout_ns` has passed (nanosecond precision,
/// unlike `poll`'s milliseconds). Returns true when readable.
pub fn wait_readable(fd: std::os::fd::BorrowedFd<'_>, timeout_ns: u64) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: one valid pollfd, a valid timespec, no signal mask (null).
    let ret = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    match check(ret) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// Send `signal` to process `pid`; errors (already gone) are ignored.
pub fn kill(pid: i32, signal: libc::c_int) {
    // SAFETY: kill(2) takes plain integers.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Whether process `pid` exists.
pub fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

static STOP_REQUESTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP_REQUESTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Install SIGINT/SIGTERM handlers that only set a flag, and return the flag.
pub fn stop_on_signals() -> io::Result<&'static std::sync::atomic::AtomicBool> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: sigaction is plain old data; the handler only stores to an atomic,
        // which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            check(libc::sigaction(sig, &sa, std::ptr::null_mut()))?;
        }
    }
    Ok(&STOP_REQUESTED)
}

/// Run the calling thread under SCHED_FIFO at `priority` (1-99), so ordinary
/// processes cannot delay it; the kernel's RT throttling still leaves 5 % of each
/// CPU to everyone else.
pub fn set_realtime(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 = the calling thread; param is a valid sched_param.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) })?;
    Ok(())
}

/// Set SO_MARK (the fwmark used by policy routing) on a socket. Needs CAP_NET_ADMIN.
pub fn set_socket_mark(fd: std::os::fd::BorrowedFd<'_>, mark: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: mark is a live u32 and its size is passed.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MARK,
            (&mark as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Receive buffer of `bytes`, above net.core.rmem_max (SO_RCVBUFFORCE, needs root).
pub fn set_rcvbuf_force(fd: std::os::fd::BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: v is a live c_int and its size is passed.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Set the IPv4 TOS byte (DSCP << 2 | ECN) of a socket's packets (IP_TOS).
pub fn set_socket_tos(fd: std::os::fd::BorrowedFd<'_>, tos: u8) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let v = libc::c_int::from(tos);
    // SAFETY: v is a live c_int and its size is passed.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_TOS,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}
