//! The bootstrap store's connections, plaintext or mutual TLS: with TLS on
//! (any `CAUSEWAY_TLS` but `off`), a client without a certificate from a
//! trusted CA is refused in the handshake, before the server reads any
//! request. The client checks the server's chain (not its name: which host
//! serves the store is learned only through it).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use crate::error::TlsError;
use crate::transport::tls::{self, TlsTransport};
use crate::transport::tls_config::TlsContext;

/// One store connection.
#[derive(Debug)]
pub(crate) enum StoreStream {
    Plain(TcpStream),
    Tls(Box<TlsTransport>),
}

/// How long a TLS handshake with the store may take.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl StoreStream {
    /// The client side of a connection to `addr`; the handshake may wait
    /// `wait` for the server (at least [`HANDSHAKE_TIMEOUT`]).
    pub fn client(
        s: TcpStream,
        tls: Option<&Arc<TlsContext>>,
        addr: &str,
        wait: Duration,
    ) -> Result<Self, TlsError> {
        let Some(ctx) = tls else {
            return Ok(StoreStream::Plain(s));
        };
        let _ = s.set_read_timeout(Some(wait.max(HANDSHAKE_TIMEOUT)));
        let t = tls::connect_store(ctx, s, format!("store at {addr}"))?;
        Ok(StoreStream::Tls(Box::new(t)))
    }

    /// The server side of an accepted connection.
    pub fn server(s: TcpStream, tls: Option<&Arc<TlsContext>>) -> Result<Self, TlsError> {
        let Some(ctx) = tls else {
            return Ok(StoreStream::Plain(s));
        };
        let peer = match s.peer_addr() {
            Ok(a) => format!("store client {a}"),
            Err(_) => "store client".into(),
        };
        let _ = s.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
        let t = tls::accept(ctx, s, peer)?;
        let _ = t.stream().set_read_timeout(None);
        Ok(StoreStream::Tls(Box::new(t)))
    }

    /// The client's certificate (DER), with TLS: who owns the keys it claims.
    pub fn peer_identity(&self) -> Option<Vec<u8>> {
        match self {
            StoreStream::Plain(_) => None,
            StoreStream::Tls(t) => t.peer_certificate().map(|c| c.as_ref().to_vec()),
        }
    }

    pub fn tcp(&self) -> &TcpStream {
        match self {
            StoreStream::Plain(s) => s,
            StoreStream::Tls(t) => t.stream(),
        }
    }
}

impl Read for StoreStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            StoreStream::Plain(s) => s.read(buf),
            StoreStream::Tls(t) => t.read(buf),
        }
    }
}

impl Write for StoreStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            StoreStream::Plain(s) => s.write(buf),
            StoreStream::Tls(t) => t.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            StoreStream::Plain(s) => s.flush(),
            StoreStream::Tls(t) => t.flush(),
        }
    }
}
