//! Byte-stream transports between two ranks, behind one trait: TCP (several
//! parallel connections per peer) and shared memory (same host).
//!
//! A transport is split into an owned reader and writer (each driven by its own
//! thread) plus a [`Closer`] that aborts both from anywhere.

use std::io::{Read, Write};
use std::sync::Arc;

use crate::pool::PooledBuf;

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

/// The read half of a transport: a byte stream, which may also hand out the
/// next bytes where they already lie in memory.
pub trait StreamRead: Read + Send {
    /// The next `len` bytes of the stream without copying them, when this
    /// transport received them into memory of its own (an RDMA receive ring);
    /// the memory is the transport's again when the buffer is dropped.
    /// `Ok(None)`: read them with [`Read::read`] (this transport cannot, or
    /// not for this length, or the stream ended first).
    fn take_in_place(&mut self, len: usize) -> std::io::Result<Option<PooledBuf>> {
        let _ = len;
        Ok(None)
    }
}

pub type Reader = Box<dyn StreamRead>;
pub type Writer = Box<dyn Write + Send>;

/// A duplex byte stream to one peer.
pub trait Transport: Send {
    /// A short description for errors and logs (`tcp 10.0.0.2:4000`, `shm /dev/shm/…`).
    fn describe(&self) -> String;
    /// Splits into independently owned halves.
    fn split(self: Box<Self>) -> std::io::Result<(Reader, Writer, Arc<dyn Closer>)>;
}
