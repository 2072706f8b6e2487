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
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::StoreError;
pub use crate::store_client::StoreClient;
pub use crate::store_limits::StoreLimits;
use crate::store_limits::{Owners, RateLimit};
use crate::store_stream::StoreStream;
use crate::transport::tagging::{self, TrafficKind};
use crate::transport::tls_config::TlsContext;

/// Store connections are control traffic (see [`tagging`]).
pub(crate) fn tag<'a>(s: impl Into<socket2::SockRef<'a>>) -> std::io::Result<()> {
    tagging::tag(s, TrafficKind::Control)
}

pub(crate) const MAX_KEY: usize = 1024;
pub(crate) const MAX_VALUE: usize = 1 << 20;
pub(crate) const OP_SET: u8 = 1;
pub(crate) const OP_GET: u8 = 2;
pub(crate) const OP_ADD: u8 = 3;
pub(crate) const OP_WAIT: u8 = 4;
/// Leave a will (key, value); an empty key revokes it.
pub(crate) const OP_ON_CLOSE: u8 = 5;
pub(crate) const OK: u8 = 0;
pub(crate) const TIMEOUT: u8 = 1;
pub(crate) const FAIL: u8 = 2;
/// Refused by a limit (rate, keys, ownership): the connection goes on.
pub(crate) const REFUSED: u8 = 3;

#[derive(Default)]
struct State {
    map: Mutex<HashMap<String, Vec<u8>>>,
    owners: Mutex<Owners>,
    limits: StoreLimits,
    /// Connections closed at accept because `max_connections` were open.
    turned_away: std::sync::atomic::AtomicUsize,
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

/// How long at most a store's host keeps it up after its rank gave up on
/// set-up, for the others to read the report (they poll every few tens of
/// milliseconds and leave once they have it): see [`StoreServer::linger`].
pub const LINGER: Duration = Duration::from_secs(2);

impl StoreServer {
    /// Binds `addr` (port 0 picks a free port) and serves in background threads.
    pub fn bind(addr: SocketAddr) -> Result<Self, StoreError> {
        Self::bind_tls(addr, None)
    }

    /// As [`bind`](Self::bind); with `tls`, every client must complete a
    /// mutual TLS handshake before its first request is read.
    pub fn bind_tls(addr: SocketAddr, tls: Option<Arc<TlsContext>>) -> Result<Self, StoreError> {
        Self::bind_with(addr, tls, StoreLimits::default())
    }

    /// As [`bind_tls`](Self::bind_tls), with explicit limits.
    pub fn bind_with(
        addr: SocketAddr,
        tls: Option<Arc<TlsContext>>,
        limits: StoreLimits,
    ) -> Result<Self, StoreError> {
        let io = |context, e| StoreError::Io {
            addr: addr.to_string(),
            context,
            source: Arc::new(e),
        };
        let listener = TcpListener::bind(addr).map_err(|e| io("bind", e))?;
        tag(&listener).map_err(|e| io("tag", e))?;
        Self::serve_with(listener, tls, limits)
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
        Self::serve_with(listener, tls, StoreLimits::default())
    }

    fn serve_with(
        listener: TcpListener,
        tls: Option<Arc<TlsContext>>,
        limits: StoreLimits,
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
        let state = Arc::new(State {
            limits,
            ..State::default()
        });
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

    /// Connections closed at accept because the connection limit was reached.
    pub fn turned_away(&self) -> usize {
        self.state.turned_away.load(Ordering::Acquire)
    }

    /// Client connections accepted since the server started.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::Acquire)
    }

    /// Keeps serving (returns) once `world` clients have connected and at
    /// most `remaining` are still connected, or after `limit`: a rank that
    /// gives up on set-up must not take the store away from ranks still
    /// reading their share of the same failure.
    pub fn linger(&self, world: usize, remaining: usize, limit: Duration) {
        let until = std::time::Instant::now() + limit;
        while std::time::Instant::now() < until
            && (self.clients() > remaining || self.accepted() < world)
        {
            thread::sleep(Duration::from_millis(10));
        }
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
            Ok((s, from)) => {
                if state.clients.load(Ordering::Acquire) >= state.limits.max_connections {
                    state.turned_away.fetch_add(1, Ordering::AcqRel);
                    tracing::warn!(%from, max = state.limits.max_connections, "store: connection limit reached, closed");
                    drop(s);
                    continue;
                }
                // Counted here, not in the thread: a flood cannot outrun the bound.
                state.clients.fetch_add(1, Ordering::AcqRel);
                let _ = tag(&s);
                let (state, stop, tls) = (state.clone(), stop.clone(), tls.clone());
                let _ = thread::Builder::new()
                    .name("cw-store-conn".into())
                    .spawn(move || {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_nodelay(true);
                        match StoreStream::server(s, tls.as_ref()) {
                            Ok(s) => serve(s, &state, stop),
                            Err(e) => tracing::warn!(%e, "store: connection refused"),
                        }
                        state.clients.fetch_sub(1, Ordering::AcqRel);
                    });
            }
            Err(_) => thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn serve(mut s: StoreStream, state: &State, stop: Arc<AtomicBool>) {
    state.accepted.fetch_add(1, Ordering::AcqRel);
    let who = s.peer_identity();
    let mut rate = RateLimit::new(&state.limits, Instant::now());
    let mut will: Option<(String, Vec<u8>)> = None;
    while !stop.load(Ordering::Relaxed) {
        let Ok((op, key, val, timeout)) = read_request(&mut s) else {
            break;
        };
        let refused = refusal(state, &mut rate, op, &key, who.as_deref());
        let (status, out) = if let Some(why) = refused {
            (REFUSED, why.into_bytes())
        } else if op == OP_ON_CLOSE {
            will = (!key.is_empty()).then_some((key, val));
            (OK, Vec::new())
        } else {
            handle(state, &stop, op, key, val, timeout)
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
}

/// Why a request is refused, if it is: the connection's rate, the key bound
/// (for a new key), the owner of a rank's keys (with TLS).
fn refusal(
    state: &State,
    rate: &mut RateLimit,
    op: u8,
    key: &str,
    who: Option<&[u8]>,
) -> Option<String> {
    if !rate.allow(Instant::now()) {
        return Some(format!(
            "refused: more than {} requests/s on this connection",
            state.limits.requests_per_sec
        ));
    }
    if !matches!(op, OP_SET | OP_ADD | OP_ON_CLOSE) || key.is_empty() {
        return None;
    }
    if let Ok(map) = state.map.lock() {
        if !map.contains_key(key) && map.len() >= state.limits.max_keys {
            return Some(format!(
                "refused: the store holds {} keys already",
                map.len()
            ));
        }
    }
    let mut owners = state.owners.lock().ok()?;
    owners
        .may_write(key, who)
        .err()
        .map(|e| format!("refused: {e}"))
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

pub(crate) fn write_msg(s: &mut impl Write, parts: &[&[u8]]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    parts.iter().for_each(|p| buf.extend_from_slice(p));
    s.write_all(&buf)?;
    s.flush()
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
