//! The two halves of a split userspace TLS connection (see [`super`]): the
//! reader and the writer share the rustls state behind one mutex but never
//! hold it across socket I/O.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};

use rustls::Connection;

use super::super::Closer;
use super::WRITE_SLICE;
use crate::error::TlsError;

pub(super) struct Shared {
    pub(super) conn: Mutex<Connection>,
    pub(super) peer: String,
}

impl Shared {
    fn lock(&self) -> io::Result<MutexGuard<'_, Connection>> {
        self.conn
            .lock()
            .map_err(|_| io::Error::other(format!("TLS state of {} poisoned", self.peer)))
    }
}

pub(super) struct TlsReader {
    pub(super) shared: Arc<Shared>,
    pub(super) sock: TcpStream,
    pub(super) buf: Vec<u8>,
    /// Ciphertext received but not yet handed to rustls: `buf[pos..end]`.
    pub(super) pos: usize,
    pub(super) end: usize,
}

impl TlsReader {
    fn record_error(&self, source: rustls::Error) -> io::Error {
        let peer = self.shared.peer.clone();
        io::Error::new(
            io::ErrorKind::InvalidData,
            TlsError::Record { peer, source },
        )
    }
}

impl crate::transport::StreamRead for TlsReader {}

impl Read for TlsReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut c = self.shared.lock()?;
                loop {
                    // Plaintext first: rustls refuses more ciphertext while
                    // its plaintext buffer is full.
                    match c.reader().read(out) {
                        Ok(n) => return Ok(n),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                    if self.pos == self.end {
                        break;
                    }
                    let mut rd = &self.buf[self.pos..self.end];
                    self.pos += c.read_tls(&mut rd)?;
                    if let Err(e) = c.process_new_packets() {
                        return Err(self.record_error(e));
                    }
                }
            }
            let n = self.sock.read(&mut self.buf)?;
            if n == 0 {
                return Ok(0);
            }
            (self.pos, self.end) = (0, n);
        }
    }
}

pub(super) struct TlsWriter {
    pub(super) shared: Arc<Shared>,
    pub(super) sock: TcpStream,
    /// Ciphertext to send; its capacity is kept between writes.
    pub(super) out: Vec<u8>,
}

/// Moves every record rustls has ready into `out`.
fn drain(c: &mut Connection, out: &mut Vec<u8>) -> io::Result<()> {
    while c.wants_write() {
        c.write_tls(out)?;
    }
    Ok(())
}

impl Write for TlsWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = {
            let mut c = self.shared.lock()?;
            let n = c.writer().write(&buf[..buf.len().min(WRITE_SLICE)])?;
            drain(&mut c, &mut self.out)?;
            n
        };
        let sent = self.sock.write_all(&self.out);
        self.out.clear();
        sent.map(|()| n)
    }
    fn flush(&mut self) -> io::Result<()> {
        {
            let mut c = self.shared.lock()?;
            drain(&mut c, &mut self.out)?;
        }
        let sent = self.sock.write_all(&self.out);
        self.out.clear();
        sent
    }
}

pub(super) struct TlsCloser {
    pub(super) shared: Arc<Shared>,
    pub(super) sock: TcpStream,
}

impl Closer for TlsCloser {
    fn close(&self) {
        let _ = self.sock.shutdown(Shutdown::Both);
    }
    fn finish(&self) {
        let mut out = Vec::new();
        if let Ok(mut c) = self.shared.lock() {
            c.send_close_notify();
            while c.wants_write() && c.write_tls(&mut out).is_ok() {}
        }
        let _ = (&self.sock).write_all(&out);
        let _ = self.sock.shutdown(Shutdown::Write);
    }
    fn settled(&self) -> bool {
        super::super::tcp::settled(&self.sock)
    }
}
