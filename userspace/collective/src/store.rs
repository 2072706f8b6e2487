//! A small TCP key-value store for bootstrap, served by rank 0 on
//! `MASTER_ADDR:MASTER_PORT` (the role of torch's TCPStore).
//!
//! Request: `op u8 | key_len u16 | key | val_len u32 | val | timeout_ms u32`.
//! Response: `status u8 | val_len u32 | val`. Keys ≤ 1 KiB, values ≤ 1 MiB.
//!
//! A client may leave a will ([`StoreClient::set_on_close`]): a key the server
//! sets when that client's connection ends while the will stands, unless the key
//! is set already. The rendezvous uses it to tell every rank that a rank
//! which registered died during set-up.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::StoreError;
use crate::store_stream::StoreStream;
use crate::transport::tagging::{self, TrafficKind};
use crate::transport::tls_config::TlsContext;

/// Store connections are control traffic (see [`tagging`]).
fn tag<'a>(s: impl Into<socket2::SockRef<'a>>) -> std::io::Result<()> {
    tagging::tag(s, TrafficKind::Control)
}

const MAX_KEY: usize = 1024;
const MAX_VALUE: usize = 1 << 20;
const OP_SET: u8 = 1;
const OP_GET: u8 = 2;
const OP_ADD: u8 = 3;
const OP_WAIT: u8 = 4;
/// Leave a will (key, value); an empty key revokes it.
const OP_ON_CLOSE: u8 = 5;
const OK: u8 = 0;
const TIMEOUT: u8 = 1;
const FAIL: u8 = 2;

#[derive(Default)]
struct State {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    /// Connections being served, and accepted in all.
    clients: std::sync::atomic::AtomicUsize,
    accepted: std::sync::atomic::AtomicUsize,
}

/// The store server; stops when dropped.
pub struct StoreServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    state: Arc<State>,
}

impl StoreServer {
    /// Binds `addr` (port 0 picks a free port) and serves in background threads.
    pub fn bind(addr: SocketAddr) -> Result<Self, StoreError> {
        Self::bind_tls(addr, None)
    }

    /// As [`bind`](Self::bind); with `tls`, every client must complete a
    /// mutual TLS handshake before its first request is read.
    pub fn bind_tls(addr: SocketAddr, tls: Option<Arc<TlsContext>>) -> Result<Self, StoreError> {
        let io = |context, e| StoreError::Io {
            addr: addr.to_string(),
            context,
            source: Arc::new(e),
        };
        let listener = TcpListener::bind(addr).map_err(|e| io("bind", e))?;
        tag(&listener).map_err(|e| io("tag", e))?;
        Self::serve_on_tls(listener, tls)
    }

    /// Serves on a listener that is already bound (a communicator's idle mesh
    /// listener, whose address every peer knows: see `membership`).
    pub fn serve_on(listener: TcpListener) -> Result<Self, StoreError> {
        Self::serve_on_tls(listener, None)
    }

    /// As [`serve_on`](Self::serve_on), with mutual TLS when `tls` is set.
    pub fn serve_on_tls(
        listener: TcpListener,
        tls: Option<Arc<TlsContext>>,
    ) -> Result<Self, StoreError> {
        let addr = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let io = |context, e| StoreError::Io {
            addr: addr.to_string(),
            context,
            source: Arc::new(e),
        };
        listener
            .set_nonblocking(true)
            .map_err(|e| io("set_nonblocking", e))?;
        let addr = listener.local_addr().map_err(|e| io("local_addr", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(State::default());
        let (stop2, state2) = (stop.clone(), state.clone());
        thread::Builder::new()
            .name("cw-store".into())
            .spawn(move || accept_loop(listener, state2, stop2, tls))
            .map_err(|e| io("spawn", e))?;
        Ok(StoreServer { addr, stop, state })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Client connections open now.
    pub fn clients(&self) -> usize {
        self.state.clients.load(Ordering::Acquire)
    }

    /// Client connections accepted since the server started.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::Acquire)
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn accept_loop(
    listener: TcpListener,
    state: Arc<State>,
    stop: Arc<AtomicBool>,
    tls: Option<Arc<TlsContext>>,
) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, _)) => {
                let _ = tag(&s);
                let (state, stop, tls) = (state.clone(), stop.clone(), tls.clone());
                let _ = thread::Builder::new()
                    .name("cw-store-conn".into())
                    .spawn(move || {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_nodelay(true);
                        match StoreStream::server(s, tls.as_ref()) {
                            Ok(s) => serve(s, state, stop),
                            Err(e) => tracing::warn!(%e, "store: connection refused"),
                        }
                    });
            }
            Err(_) => thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn serve(mut s: StoreStream, state: Arc<State>, stop: Arc<AtomicBool>) {
    state.clients.fetch_add(1, Ordering::AcqRel);
    state.accepted.fetch_add(1, Ordering::AcqRel);
    let mut will: Option<(String, Vec<u8>)> = None;
    while !stop.load(Ordering::Relaxed) {
        let Ok((op, key, val, timeout)) = read_request(&mut s) else {
            break;
        };
        let (status, out) = if op == OP_ON_CLOSE {
            will = (!key.is_empty()).then_some((key, val));
            (OK, Vec::new())
        } else {
            handle(&state, &stop, op, key, val, timeout)
        };
        if write_msg(
            &mut s,
            &[&[status], &(out.len() as u32).to_le_bytes(), &out],
        )
        .is_err()
        {
            break;
        }
    }
    if let (Some((key, val)), false) = (will, stop.load(Ordering::Relaxed)) {
        if let Ok(mut map) = state.map.lock() {
            map.entry(key).or_insert(val);
            state.changed.notify_all();
        }
    }
    state.clients.fetch_sub(1, Ordering::AcqRel);
}

fn handle(
    state: &State,
    stop: &AtomicBool,
    op: u8,
    key: String,
    val: Vec<u8>,
    timeout: Duration,
) -> (u8, Vec<u8>) {
    let Ok(mut map) = state.map.lock() else {
        return (FAIL, b"store lock poisoned".to_vec());
    };
    match op {
        OP_SET => {
            map.insert(key, val);
            state.changed.notify_all();
            (OK, Vec::new())
        }
        OP_ADD => {
            let Ok(delta) = <[u8; 8]>::try_from(&val[..]).map(i64::from_le_bytes) else {
                return (FAIL, b"add needs an 8-byte delta".to_vec());
            };
            let cur = map
                .get(&key)
                .and_then(|v| std::str::from_utf8(v).ok()?.parse::<i64>().ok());
            if map.contains_key(&key) && cur.is_none() {
                return (FAIL, b"value is not a number".to_vec());
            }
            let new = cur.unwrap_or(0).wrapping_add(delta);
            map.insert(key, new.to_string().into_bytes());
            state.changed.notify_all();
            (OK, new.to_le_bytes().to_vec())
        }
        OP_GET | OP_WAIT => {
            let deadline = Instant::now() + timeout;
            loop {
                if let Some(v) = map.get(&key) {
                    return (OK, if op == OP_GET { v.clone() } else { Vec::new() });
                }
                let now = Instant::now();
                if now >= deadline || stop.load(Ordering::Relaxed) {
                    return (TIMEOUT, Vec::new());
                }
                let wait = (deadline - now).min(Duration::from_millis(100));
                map = match state.changed.wait_timeout(map, wait) {
                    Ok((m, _)) => m,
                    Err(_) => return (FAIL, b"store lock poisoned".to_vec()),
                };
            }
        }
        _ => (FAIL, b"unknown operation".to_vec()),
    }
}

fn read_request(s: &mut impl Read) -> Result<(u8, String, Vec<u8>, Duration), StoreError> {
    let proto = StoreError::Protocol;
    let mut h = [0u8; 3];
    s.read_exact(&mut h).map_err(|e| proto(e.to_string()))?;
    let klen = u16::from_le_bytes([h[1], h[2]]) as usize;
    if klen > MAX_KEY {
        return Err(proto(format!("key of {klen} bytes")));
    }
    let mut key = vec![0u8; klen];
    s.read_exact(&mut key).map_err(|e| proto(e.to_string()))?;
    let key = String::from_utf8(key).map_err(|_| proto("key is not UTF-8".into()))?;
    let mut l = [0u8; 4];
    s.read_exact(&mut l).map_err(|e| proto(e.to_string()))?;
    let vlen = u32::from_le_bytes(l) as usize;
    if vlen > MAX_VALUE {
        return Err(proto(format!("value of {vlen} bytes")));
    }
    let mut val = vec![0u8; vlen];
    s.read_exact(&mut val).map_err(|e| proto(e.to_string()))?;
    s.read_exact(&mut l).map_err(|e| proto(e.to_string()))?;
    Ok((
        h[0],
        key,
        val,
        Duration::from_millis(u32::from_le_bytes(l) as u64),
    ))
}

fn write_msg(s: &mut impl Write, parts: &[&[u8]]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    parts.iter().for_each(|p| buf.extend_from_slice(p));
    s.write_all(&buf)?;
    s.flush()
}

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
                    let stream = StoreStream::client(stream, tls, &addr.to_string())
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
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| StoreError::Io {
            addr: addr.to_string(),
            context: "connect",
            source: Arc::new(e),
        })?;
        let _ = stream.set_nodelay(true);
        let _ = tag(&stream);
        let stream = StoreStream::Plain(stream);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> StoreServer {
        StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("bind")
    }

    #[test]
    fn set_get_add_wait() {
        let s = server();
        let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
        c.set("a", b"1").expect("set");
        assert_eq!(c.get("a", Duration::from_secs(1)).expect("get"), b"1");
        assert_eq!(c.add("n", 5).expect("add"), 5);
        assert_eq!(c.add("n", -2).expect("add"), 3);
        assert!(matches!(c.add("a", 1), Ok(2)));
        c.set("s", b"text").expect("set");
        assert!(matches!(c.add("s", 1), Err(StoreError::Protocol(_))));
        let addr = s.addr();
        let setter = thread::spawn(move || {
            thread::sleep(Duration::from_millis(100));
            let mut c2 = StoreClient::connect(addr, Duration::from_secs(5)).expect("connect");
            c2.set("late", b"x").expect("set");
        });
        c.wait(&["a", "late"], Duration::from_secs(5))
            .expect("wait");
        setter.join().expect("setter");
    }

    #[test]
    fn get_times_out_with_the_key_named() {
        let s = server();
        let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
        let t = Instant::now();
        let err = c
            .get("never", Duration::from_millis(200))
            .expect_err("timeout");
        assert!(
            matches!(&err, StoreError::Timeout { key, .. } if key == "never"),
            "{err}"
        );
        assert!(t.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn a_will_is_set_when_its_connection_ends_unless_revoked_or_preempted() {
        let s = server();
        let mut watcher = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
        let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
        c.set_on_close("gone", b"c").expect("will");
        drop(c);
        assert_eq!(
            watcher.get("gone", Duration::from_secs(5)).expect("will"),
            b"c"
        );
        // Revoked: nothing happens.
        let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
        c.set_on_close("revoked", b"x").expect("will");
        c.clear_on_close().expect("revoke");
        drop(c);
        // The first value stays.
        let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
        c.set_on_close("gone", b"later").expect("will");
        drop(c);
        std::thread::sleep(Duration::from_millis(200));
        assert!(watcher.get("revoked", Duration::from_millis(100)).is_err());
        assert_eq!(watcher.get("gone", Duration::ZERO).expect("get"), b"c");
        assert_eq!(s.clients(), 1, "only the watcher is still connected");
        assert_eq!(s.accepted(), 4);
    }

    #[test]
    fn oversized_requests_are_refused() {
        let s = server();
        let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
        assert!(c.set(&"k".repeat(2000), b"").is_err());
        // A hostile client announcing a 4 GiB value is disconnected, not served.
        let mut raw = TcpStream::connect(s.addr()).expect("connect");
        raw.write_all(&[OP_SET, 1, 0, b'k', 255, 255, 255, 255])
            .expect("write");
        let mut b = [0u8; 1];
        assert!(matches!(raw.read(&mut b), Ok(0) | Err(_)));
    }
}
