//! Byte-stream transports between two ranks, behind one trait: TCP (several
//! parallel connections per peer) and shared memory (same host).
//!
//! A transport is split into an owned reader and writer (each driven by its own
//! thread) plus a [`Closer`] that aborts both from anywhere.

use std::io::{Read, Write};
use std::sync::Arc;

// setsockopt(SOL_TLS), recvmsg/sendmsg with record-type control messages.
#[allow(unsafe_code)]
pub mod ktls;
pub mod rdma;
pub mod record_cork;
pub mod shm;
pub mod tagging;
pub mod tcp;
pub mod tls;
pub mod tls_config;

/// Ends a transport from any thread.
pub trait Closer: Send + Sync {
    /// Aborts both directions: blocked reads return end-of-stream or an error, writes fail.
    fn close(&self);
    /// Half-close: no more writes; the peer reads end-of-stream after the data
    /// already sent, and our reads go on (so nothing unread makes the kernel reset it).
    fn finish(&self);
    /// True once the peer's kernel has acknowledged everything written (and
    /// the half-close), or the connection is gone. A process that exits
    /// before then loses what is still queued: a frame from the peer that
    /// arrives at a closed socket makes the kernel reset the connection and
    /// drop its unsent data. Transports whose completed writes are already at
    /// the peer (shared memory, RDMA) are always settled.
    fn settled(&self) -> bool {
        true
    }
}

pub type Reader = Box<dyn Read + Send>;
pub type Writer = Box<dyn Write + Send>;

/// A duplex byte stream to one peer.
pub trait Transport: Send {
    /// A short description for errors and logs (`tcp 10.0.0.2:4000`, `shm /dev/shm/…`).
    fn describe(&self) -> String;
    /// Splits into independently owned halves.
    fn split(self: Box<Self>) -> std::io::Result<(Reader, Writer, Arc<dyn Closer>)>;
}
