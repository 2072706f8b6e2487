//! Serves the ranks' [`RankMetrics`](crate::metrics::RankMetrics) as
//! `GET /metrics` over plain HTTP/1.1 (one request per connection,
//! `Connection: close`; anything else is 404 or 405), on one std thread per
//! bound address: no async runtime in the library.
//!
//! One process serves every communicator that asked for the same address
//! from one listener (threads-as-ranks, and a shrunk or grown communicator
//! beside its retired predecessor); each rank's series carry its `rank` and
//! `epoch` labels. The listener closes when the last of them is dropped.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use causeway_core::scrape_http::{self, Request, MAX_HEAD, READ_TIMEOUT};

use crate::metrics::{encode_text, RankMetrics};

type Ranks = Arc<Mutex<Vec<Weak<RankMetrics>>>>;

/// A listener serving the ranks registered with it.
struct Server {
    requested: SocketAddr,
    bound: SocketAddr,
    ranks: Ranks,
    stop: Arc<AtomicBool>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the blocking accept.
        let mut wake = self.bound;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
    }
}

static SERVERS: Mutex<Vec<Weak<Server>>> = Mutex::new(Vec::new());

/// A rank's registration: keeps the listener open while held.
pub(crate) struct Serving {
    server: Arc<Server>,
    /// Keeps the rank's series listed.
    metrics: Arc<RankMetrics>,
}

impl Serving {
    /// Where the metrics are served.
    pub fn addr(&self) -> SocketAddr {
        self.server.bound
    }
    pub fn metrics(&self) -> &RankMetrics {
        &self.metrics
    }
}

/// Serves `metrics` at `addr` (a listener this process already has for
/// `addr` is shared; port 0 binds any free port).
pub(crate) fn serve(addr: SocketAddr, metrics: Arc<RankMetrics>) -> std::io::Result<Serving> {
    let mut servers = SERVERS
        .lock()
        .map_err(|_| std::io::Error::other("poisoned"))?;
    servers.retain(|s| s.strong_count() > 0);
    let existing = servers
        .iter()
        .filter_map(Weak::upgrade)
        .find(|s| s.requested == addr);
    let server = match existing {
        Some(s) => s,
        None => {
            let listener = TcpListener::bind(addr)?;
            let bound = listener.local_addr()?;
            let ranks: Ranks = Arc::default();
            let stop = Arc::new(AtomicBool::new(false));
            let (r, st) = (ranks.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("cw-metrics-{}", bound.port()))
                .spawn(move || accept_loop(listener, r, st))?;
            tracing::info!(%bound, "serving collective metrics");
            let s = Arc::new(Server {
                requested: addr,
                bound,
                ranks,
                stop,
            });
            servers.push(Arc::downgrade(&s));
            s
        }
    };
    if let Ok(mut r) = server.ranks.lock() {
        r.retain(|m| m.strong_count() > 0);
        r.push(Arc::downgrade(&metrics));
    }
    Ok(Serving { server, metrics })
}

fn accept_loop(listener: TcpListener, ranks: Ranks, stop: Arc<AtomicBool>) {
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        match conn {
            Ok(c) => {
                if let Err(e) = answer(c, &ranks) {
                    tracing::debug!(error = %e, "metrics request failed");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics: accept failed");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn answer(mut conn: TcpStream, ranks: &Ranks) -> std::io::Result<()> {
    conn.set_read_timeout(Some(READ_TIMEOUT))?;
    conn.set_write_timeout(Some(READ_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !scrape_http::head_complete(&head) {
        let n = conn.read(&mut buf)?;
        if n == 0 || head.len() + n > MAX_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let request = scrape_http::route(&head);
    let body = match request {
        Request::Metrics => {
            let live: Vec<Arc<RankMetrics>> = ranks
                .lock()
                .map(|r| r.iter().filter_map(Weak::upgrade).collect())
                .unwrap_or_default();
            encode_text(&live)
        }
        Request::NotFound | Request::NotAllowed => String::new(),
    };
    let response = scrape_http::response(request, &body);
    conn.write_all(response.as_bytes())?;
    conn.shutdown(Shutdown::Write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::OpKind;

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).expect("connect");
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        out
    }

    #[test]
    fn ranks_asking_for_one_address_share_a_listener_until_the_last_leaves() {
        // A port of our own: other tests may use 127.0.0.1:0 concurrently.
        let addr: SocketAddr = "127.0.0.2:0".parse().expect("addr");
        let a = Arc::new(RankMetrics::new(0, 0));
        let b = Arc::new(RankMetrics::new(1, 0));
        a.op_done(OpKind::Barrier, 2, Duration::from_micros(50));
        let sa = serve(addr, a).expect("serve");
        let sb = serve(addr, b).expect("serve");
        assert_eq!(sa.addr(), sb.addr());
        let bound = sa.addr();
        let text = get(bound, "/metrics");
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains(scrape_http::CONTENT_TYPE), "{text}");
        assert!(text.contains("causeway_op_duration_seconds_count{rank=\"0\",epoch=\"0\",op=\"barrier\",size_bucket=\"0-4KiB\"} 1"), "{text}");
        assert!(
            text.contains("link=\"wan\"} 0") && text.contains("rank=\"1\""),
            "{text}"
        );
        assert!(get(bound, "/").starts_with("HTTP/1.1 404"));
        drop(sa);
        let text = get(bound, "/metrics");
        assert!(!text.contains("rank=\"0\""), "{text}");
        drop(sb);
        // The listener is closed (the accept thread saw the stop flag).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while TcpStream::connect(bound).is_ok() {
            assert!(std::time::Instant::now() < deadline, "still listening");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
