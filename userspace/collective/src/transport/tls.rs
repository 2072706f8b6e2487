//! A TCP connection wrapped in mutual TLS 1.3 (rustls, ring provider).
//!
//! The handshake runs to completion before the first application byte (the
//! mesh's hello, the store's first request) is read, so a peer without a
//! certificate from a trusted CA is refused before anything it sends is
//! looked at. After the split, the reader and the writer share the rustls
//! state behind one mutex but never hold it across socket I/O: the writer
//! encrypts into a reused buffer and sends it unlocked, the reader receives
//! unlocked and decrypts under the lock. Records are full 16 KiB TLS
//! records; a write hands rustls up to [`WRITE_SLICE`] bytes at once.
//! A record that fails authentication (tampered ciphertext) ends the
//! connection with [`TlsError::Record`] naming the peer.
//!
//! Until [`TlsTransport::offload`], reads go through a [`Cork`] (never past
//! the current record), so a data link can then be handed to the kernel's
//! record layer ([`super::ktls`], `CAUSEWAY_KTLS`) with nothing of the
//! peer's stream held in rustls. [`TlsTransport::record_layer`] says which
//! one a connection uses.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, Connection, ServerConnection};

use super::ktls::{self, KtlsCloser, KtlsReader};
use super::record_cork::{Cork, Corked};
use super::tls_config::{KtlsMode, TlsContext};
use super::{Closer, Reader, Transport, Writer};
use crate::error::TlsError;
use halves::{Shared, TlsCloser, TlsReader, TlsWriter};

/// Plaintext handed to rustls per call (it encrypts it into 16 KiB records).
pub const WRITE_SLICE: usize = 256 << 10;
/// Ciphertext read from the socket per call.
const READ_BUF: usize = 64 << 10;

/// Who encrypts a connection's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordLayer {
    /// rustls, in this process.
    Userspace,
    /// The kernel (kTLS), after rustls' handshake.
    Kernel,
}

#[derive(Debug)]
enum Layer {
    User(Box<Connection>),
    Kernel(KtlsReader),
}

/// An established TLS connection, before its split.
#[derive(Debug)]
pub struct TlsTransport {
    layer: Layer,
    stream: TcpStream,
    peer: String,
    cork: Cork,
    ktls: KtlsMode,
}

/// The rustls error inside an I/O error from `complete_io`, if there is one.
fn tls_cause(e: &io::Error) -> Option<rustls::Error> {
    e.get_ref()
        .and_then(|i| i.downcast_ref::<rustls::Error>())
        .cloned()
}

fn handshake_error(peer: &str, e: io::Error) -> TlsError {
    TlsError::Handshake {
        peer: peer.into(),
        source: tls_cause(&e).unwrap_or_else(|| rustls::Error::General(e.to_string())),
    }
}

fn finish_handshake(
    ctx: &TlsContext,
    mut conn: Connection,
    mut stream: TcpStream,
    peer: String,
) -> Result<TlsTransport, TlsError> {
    let mut cork = Cork::default();
    while conn.is_handshaking() {
        let mut io = Corked {
            cork: &mut cork,
            sock: &mut stream,
        };
        conn.complete_io(&mut io)
            .map_err(|e| handshake_error(&peer, e))?;
    }
    // Anything still queued (the client's Finished).
    while conn.wants_write() {
        conn.write_tls(&mut stream)
            .map_err(|e| handshake_error(&peer, e))?;
    }
    Ok(TlsTransport {
        layer: Layer::User(Box::new(conn)),
        stream,
        peer,
        cork,
        ktls: ctx.ktls,
    })
}

/// Client side: proves our certificate, checks the peer's chain and `name`.
pub fn connect(
    ctx: &TlsContext,
    stream: TcpStream,
    name: ServerName<'static>,
    peer: String,
) -> Result<TlsTransport, TlsError> {
    let c =
        ClientConnection::new(ctx.client.clone(), name).map_err(|source| TlsError::Handshake {
            peer: peer.clone(),
            source,
        })?;
    finish_handshake(ctx, c.into(), stream, peer)
}

/// Client side of the bootstrap store: checks the chain only.
pub fn connect_store(
    ctx: &TlsContext,
    stream: TcpStream,
    peer: String,
) -> Result<TlsTransport, TlsError> {
    // Pinned (`CAUSEWAY_STORE_ID`): chain and name; otherwise the chain only.
    let (config, name) = match &ctx.store_name {
        Some(name) => (ctx.client.clone(), name.clone()),
        None => (
            ctx.store_client.clone(),
            ServerName::try_from("store.causeway").map_err(|e| TlsError::Label(e.to_string()))?,
        ),
    };
    let c = ClientConnection::new(config, name).map_err(|source| TlsError::Handshake {
        peer: peer.clone(),
        source,
    })?;
    finish_handshake(ctx, c.into(), stream, peer)
}

/// Server side: requires a client certificate chaining to a trusted CA.
pub fn accept(ctx: &TlsContext, stream: TcpStream, peer: String) -> Result<TlsTransport, TlsError> {
    let c = ServerConnection::new(ctx.server.clone()).map_err(|source| TlsError::Handshake {
        peer: peer.clone(),
        source,
    })?;
    finish_handshake(ctx, c.into(), stream, peer)
}

/// Whether the first byte waiting on `s` starts a TLS record (a handshake),
/// without consuming it. `Ok(None)`: the peer closed.
pub fn starts_tls(s: &TcpStream) -> io::Result<Option<bool>> {
    let mut b = [0u8; 1];
    Ok(match s.peek(&mut b)? {
        0 => None,
        _ => Some(b[0] == 0x16),
    })
}

/// Logs the first connection of each record layer in this process.
fn log_once(layer: RecordLayer, why: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static USER: AtomicBool = AtomicBool::new(false);
    static KERNEL: AtomicBool = AtomicBool::new(false);
    let flag = match layer {
        RecordLayer::Userspace => &USER,
        RecordLayer::Kernel => &KERNEL,
    };
    if !flag.swap(true, Ordering::Relaxed) {
        match layer {
            RecordLayer::Kernel => {
                tracing::info!("TLS data links: records encrypted by the kernel (kTLS)")
            }
            RecordLayer::Userspace => {
                tracing::info!("TLS data links: records encrypted by rustls in userspace: {why}")
            }
        }
    }
}

impl TlsTransport {
    /// Who encrypts this connection's records.
    pub fn record_layer(&self) -> RecordLayer {
        match self.layer {
            Layer::User(_) => RecordLayer::Userspace,
            Layer::Kernel(_) => RecordLayer::Kernel,
        }
    }

    /// Hands the record layer to the kernel as `CAUSEWAY_KTLS` says: `off`
    /// keeps rustls; `auto` uses kTLS when the kernel has it (rustls
    /// otherwise, logged once); `on` fails with [`TlsError::Ktls`] naming the
    /// peer when it cannot. Call it once the hello is exchanged, before the
    /// split.
    pub fn offload(&mut self) -> Result<RecordLayer, TlsError> {
        let peer = self.peer.clone();
        let Layer::User(conn) = &mut self.layer else {
            return Ok(RecordLayer::Kernel);
        };
        if self.ktls == KtlsMode::Off {
            log_once(RecordLayer::Userspace, "CAUSEWAY_KTLS=off");
            return Ok(RecordLayer::Userspace);
        }
        let failed = |detail: String| TlsError::Ktls {
            peer: peer.clone(),
            detail,
        };
        let state = conn
            .process_new_packets()
            .map_err(|source| TlsError::Record {
                peer: peer.clone(),
                source,
            })?;
        let why = if !self.cork.at_boundary() || state.plaintext_bytes_to_read() > 0 {
            Some("part of the peer's stream is already held by rustls".to_string())
        } else if conn.wants_write() {
            Some("rustls still has records to send".to_string())
        } else {
            ktls::attach(&self.stream).err().map(|e| {
                format!("the kernel has no TLS upper layer protocol (TCP_ULP \"tls\": {e}; modprobe tls)")
            })
        };
        if let Some(why) = why {
            if self.ktls == KtlsMode::On {
                return Err(failed(format!("CAUSEWAY_KTLS=on, but {why}")));
            }
            log_once(RecordLayer::Userspace, &why);
            return Ok(RecordLayer::Userspace);
        }
        let reader = KtlsReader {
            sock: self.stream.try_clone().map_err(|e| failed(e.to_string()))?,
            peer: peer.clone(),
            closed: false,
        };
        let Layer::User(conn) = std::mem::replace(&mut self.layer, Layer::Kernel(reader)) else {
            return Ok(RecordLayer::Kernel);
        };
        let secrets = conn
            .dangerous_extract_secrets()
            .map_err(|e| failed(format!("extracting the traffic secrets: {e}")))?;
        ktls::install(&self.stream, &secrets)
            .map_err(|e| failed(format!("handing the keys to the kernel: {e}")))?;
        log_once(RecordLayer::Kernel, "");
        Ok(RecordLayer::Kernel)
    }

    /// The peer's certificate (the end entity), once the handshake is done.
    pub fn peer_certificate(&self) -> Option<rustls::pki_types::CertificateDer<'static>> {
        let Layer::User(conn) = &self.layer else {
            return None;
        };
        conn.peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.clone().into_owned())
    }

    /// Checks that the peer's certificate names `domain` and `host`.
    pub fn check_peer(&self, domain: &str, host: &str) -> Result<(), TlsError> {
        let wrong = || TlsError::WrongIdentity {
            peer: self.peer.clone(),
            expected: causeway_core::identity::host_name(domain, host)
                .unwrap_or_else(|_| format!("{host}.{domain}")),
        };
        let cert = self.peer_certificate().ok_or_else(wrong)?;
        match super::tls_config::names(&cert, domain, host)? {
            true => Ok(()),
            false => Err(wrong()),
        }
    }

    /// Renames the peer for errors (once the hello said which rank it is).
    pub fn set_peer(&mut self, peer: String) {
        if let Layer::Kernel(r) = &mut self.layer {
            r.peer = peer.clone();
        }
        self.peer = peer;
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

/// Before the split: a blocking duplex stream (hello, store requests).
impl Read for TlsTransport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let conn = match &mut self.layer {
            Layer::User(c) => c,
            Layer::Kernel(r) => return r.read(buf),
        };
        loop {
            match conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            let mut corked = Corked {
                cork: &mut self.cork,
                sock: &mut self.stream,
            };
            if conn.read_tls(&mut corked)? == 0 {
                return Ok(0);
            }
            if let Err(source) = conn.process_new_packets() {
                let peer = self.peer.clone();
                // The alert telling the peer why, best effort.
                let _ = conn.write_tls(&mut self.stream);
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    TlsError::Record { peer, source },
                ));
            }
        }
    }
}

impl Write for TlsTransport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let conn = match &mut self.layer {
            Layer::User(c) => c,
            Layer::Kernel(_) => return (&self.stream).write(buf),
        };
        let n = conn.writer().write(&buf[..buf.len().min(WRITE_SLICE)])?;
        self.flush()?;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        if let Layer::User(conn) = &mut self.layer {
            while conn.wants_write() {
                conn.write_tls(&mut self.stream)?;
            }
        }
        Ok(())
    }
}

impl Transport for TlsTransport {
    fn describe(&self) -> String {
        match self.layer {
            Layer::User(_) => format!("tls {}", self.peer),
            Layer::Kernel(_) => format!("ktls {}", self.peer),
        }
    }

    fn split(self: Box<Self>) -> io::Result<(Reader, Writer, Arc<dyn Closer>)> {
        let this = *self;
        // As TcpTransport has it: an accepted socket does not inherit it, and
        // with Nagle a frame's second record waits for the first one's ACK
        // (one more WAN round trip for a small message).
        this.stream.set_nodelay(true)?;
        this.stream.set_read_timeout(None)?;
        this.stream.set_write_timeout(None)?;
        let mut conn = match this.layer {
            Layer::User(c) => c,
            Layer::Kernel(r) => {
                let w = this.stream.try_clone()?;
                let c = KtlsCloser(this.stream);
                return Ok((Box::new(r), Box::new(w), Arc::new(c)));
            }
        };
        // rustls' default 64 KiB cap on queued records would cut every
        // write to a quarter of the slice: the writer drains after each one.
        conn.set_buffer_limit(Some(2 * WRITE_SLICE));
        let shared = Arc::new(Shared {
            conn: Mutex::new(*conn),
            peer: this.peer,
        });
        let r = TlsReader {
            shared: shared.clone(),
            sock: this.stream.try_clone()?,
            buf: vec![0; READ_BUF],
            pos: 0,
            end: 0,
        };
        let w = TlsWriter {
            shared: shared.clone(),
            sock: this.stream.try_clone()?,
            out: Vec::with_capacity(WRITE_SLICE + (WRITE_SLICE >> 6)),
        };
        let c = TlsCloser {
            shared,
            sock: this.stream,
        };
        Ok((Box::new(r), Box::new(w), Arc::new(c)))
    }
}

#[path = "tls_halves.rs"]
mod halves;

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "ktls_tests.rs"]
mod ktls_tests;
