//! The client of the bootstrap store (see [`crate::store`] for the protocol).

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::error::StoreError;
use crate::store::{
    tag, write_msg, MAX_KEY, MAX_VALUE, OK, OP_ADD, OP_GET, OP_ON_CLOSE, OP_SET, OP_WAIT, REFUSED,
    TIMEOUT,
};
use crate::store_stream::StoreStream;
use crate::transport::tls_config::TlsContext;

/// A connection to the store.
pub struct StoreClient {
    stream: StoreStream,
    addr: SocketAddr,
}

impl StoreClient {
    /// Connects, retrying until `timeout` (the server may not be up yet).
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<Self, StoreError> {
        Self::connect_tls(addr, timeout, None)
    }

    /// As [`connect`](Self::connect), over mutual TLS when `tls` is set (a
    /// refused handshake is not retried).
    pub fn connect_tls(
        addr: SocketAddr,
        timeout: Duration,
        tls: Option<&Arc<TlsContext>>,
    ) -> Result<Self, StoreError> {
        let deadline = Instant::now() + timeout;
        loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    let _ = tag(&stream);
                    let wait = crate::store_stream::HANDSHAKE_TIMEOUT;
                    let stream = StoreStream::client(stream, tls, &addr.to_string(), wait)
                        .map_err(|e| StoreError::Tls(Box::new(e)))?;
                    return Ok(StoreClient { stream, addr });
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(StoreError::Io {
                        addr: addr.to_string(),
                        context: "connect",
                        source: Arc::new(e),
                    })
                }
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// One connection attempt, no retry: `Err` when nothing listens at `addr`
    /// (a dead process) or it does not answer the handshake within `timeout`.
    pub fn connect_once(addr: SocketAddr, timeout: Duration) -> Result<Self, StoreError> {
        Self::connect_once_tls(addr, timeout, None, Duration::ZERO)
    }

    /// As [`connect_once`](Self::connect_once), over mutual TLS when `tls`
    /// is set; the handshake waits up to `wait` for a server that accepts
    /// but does not serve yet.
    pub fn connect_once_tls(
        addr: SocketAddr,
        timeout: Duration,
        tls: Option<&Arc<TlsContext>>,
        wait: Duration,
    ) -> Result<Self, StoreError> {
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| StoreError::Io {
            addr: addr.to_string(),
            context: "connect",
            source: Arc::new(e),
        })?;
        let _ = stream.set_nodelay(true);
        let _ = tag(&stream);
        let stream = StoreStream::client(stream, tls, &addr.to_string(), wait)
            .map_err(|e| StoreError::Tls(Box::new(e)))?;
        Ok(StoreClient { stream, addr })
    }

    /// The local address of the connection: the interface that reaches the master.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.stream.tcp().local_addr().ok()
    }

    fn call(
        &mut self,
        op: u8,
        key: &str,
        val: &[u8],
        timeout: Duration,
    ) -> Result<(u8, Vec<u8>), StoreError> {
        if key.len() > MAX_KEY || val.len() > MAX_VALUE {
            return Err(StoreError::Protocol(format!(
                "key {key:?} or its value is too long"
            )));
        }
        let io = |context, e| StoreError::Io {
            addr: self.addr.to_string(),
            context,
            source: Arc::new(e),
        };
        let ms = timeout.as_millis().min(u32::MAX as u128) as u32;
        let req: [&[u8]; 6] = [
            &[op],
            &(key.len() as u16).to_le_bytes(),
            key.as_bytes(),
            &(val.len() as u32).to_le_bytes(),
            val,
            &ms.to_le_bytes(),
        ];
        self.stream
            .tcp()
            .set_read_timeout(Some(timeout + Duration::from_secs(10)))
            .map_err(|e| io("set timeout", e))?;
        write_msg(&mut self.stream, &req).map_err(|e| io("send", e))?;
        let mut h = [0u8; 5];
        self.stream
            .read_exact(&mut h)
            .map_err(|e| io("receive", e))?;
        let len = u32::from_le_bytes([h[1], h[2], h[3], h[4]]) as usize;
        if len > MAX_VALUE {
            return Err(StoreError::Protocol(format!("response of {len} bytes")));
        }
        let mut v = vec![0u8; len];
        self.stream
            .read_exact(&mut v)
            .map_err(|e| io("receive", e))?;
        match h[0] {
            OK => Ok((OK, v)),
            TIMEOUT => Err(StoreError::Timeout {
                key: key.into(),
                after: timeout,
            }),
            REFUSED => Err(StoreError::Refused {
                key: key.into(),
                reason: String::from_utf8_lossy(&v).into_owned(),
            }),
            _ => Err(StoreError::Protocol(
                String::from_utf8_lossy(&v).into_owned(),
            )),
        }
    }

    pub fn set(&mut self, key: &str, val: &[u8]) -> Result<(), StoreError> {
        self.call(OP_SET, key, val, Duration::ZERO).map(drop)
    }

    /// The value of `key`, waiting up to `timeout` for it to be set.
    pub fn get(&mut self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        self.call(OP_GET, key, &[], timeout).map(|(_, v)| v)
    }

    /// Waits up to `timeout` for every key to be set.
    pub fn wait(&mut self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        let deadline = Instant::now() + timeout;
        for k in keys {
            self.call(
                OP_WAIT,
                k,
                &[],
                deadline.saturating_duration_since(Instant::now()),
            )?;
        }
        Ok(())
    }

    /// Leaves a will: when this connection ends (the process exits or dies)
    /// before [`clear_on_close`](Self::clear_on_close), the server sets `key`
    /// to `val` unless `key` is set already.
    pub fn set_on_close(&mut self, key: &str, val: &[u8]) -> Result<(), StoreError> {
        if key.is_empty() {
            return Err(StoreError::Protocol("a will needs a key".into()));
        }
        self.call(OP_ON_CLOSE, key, val, Duration::ZERO).map(drop)
    }

    /// Revokes the will left by [`set_on_close`](Self::set_on_close).
    pub fn clear_on_close(&mut self) -> Result<(), StoreError> {
        self.call(OP_ON_CLOSE, "", &[], Duration::ZERO).map(drop)
    }

    /// Atomically adds `delta` to the number stored at `key` (missing = 0); returns the new value.
    pub fn add(&mut self, key: &str, delta: i64) -> Result<i64, StoreError> {
        let (_, v) = self.call(OP_ADD, key, &delta.to_le_bytes(), Duration::ZERO)?;
        <[u8; 8]>::try_from(&v[..])
            .map(i64::from_le_bytes)
            .map_err(|_| StoreError::NotANumber { key: key.into() })
    }
}
