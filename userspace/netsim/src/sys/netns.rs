//! Entering named network namespaces (`/run/netns/NAME`, as made by `ip netns add`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Path of a named network namespace.
pub fn netns_path(name: &str) -> PathBuf {
    PathBuf::from("/run/netns").join(name)
}

/// Move the calling thread (only this thread) into the named network namespace.
/// Sockets it opens afterwards belong to that namespace for their whole life.
pub fn enter(name: &str) -> io::Result<()> {
    let file = File::open(netns_path(name))
        .map_err(|e| io::Error::new(e.kind(), format!("network namespace {name}: {e}")))?;
    // SAFETY: a valid open namespace fd; CLONE_NEWNET only changes this thread's
    // network namespace, which is allowed in a multi-threaded process.
    super::check(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) })
        .map_err(|e| io::Error::new(e.kind(), format!("setns into {name}: {e}")))?;
    Ok(())
}
