//! Serves `GET /metrics` over plain HTTP/1.1 (one request per connection,
//! `Connection: close`): each scrape reads the maps afresh
//! ([`super::observe`]) and answers in the OpenMetrics text format
//! ([`super::metrics`]). Anything else is 404 (unknown path) or 405.

use std::{net::SocketAddr, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};

use super::{metrics, observe, report::AgentReport};
use crate::datapath::{Layout, NetnsScope};

/// What a scrape reads.
#[derive(Clone)]
pub struct Source {
    pub layout: Layout,
    pub scope: NetnsScope,
    pub ifaces: Vec<String>,
    pub report: watch::Receiver<AgentReport>,
}

/// A request head larger than this is refused.
const MAX_HEAD: usize = 8 * 1024;
/// A client that sends no complete request head within this is dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds `addr` (before the agent reports itself running, so a bad address
/// fails the start).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Answers scrapes until `stop` turns true.
pub async fn serve(listener: TcpListener, source: Source, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((conn, _)) => {
                    let source = source.clone();
                    tokio::spawn(async move {
                        if let Err(e) = answer(conn, source).await {
                            tracing::debug!(error = %e, "metrics request failed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

/// The request line's method and path, once the head is complete.
fn request_line(head: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(head).ok()?;
    let mut words = text.lines().next()?.split_whitespace();
    Some((words.next()?, words.next()?))
}

async fn answer(mut conn: TcpStream, source: Source) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let complete = tokio::time::timeout(READ_TIMEOUT, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).await?;
            if n == 0 || head.len() + n > MAX_HEAD {
                return Ok::<bool, std::io::Error>(false);
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok(true)
    })
    .await;
    if !matches!(complete, Ok(Ok(true))) {
        return Ok(());
    }
    let (status, content_type, body) = match request_line(&head) {
        Some(("GET", path)) if path == "/metrics" || path.starts_with("/metrics?") => {
            let report = source.report.borrow().clone();
            let (layout, scope, ifaces) = (source.layout, source.scope, source.ifaces);
            let text = tokio::task::spawn_blocking(move || {
                metrics::encode_observation(&observe::observe(
                    &layout,
                    &scope,
                    &ifaces,
                    Some(&report),
                ))
            })
            .await
            .map_err(std::io::Error::other)?;
            ("200 OK", metrics::CONTENT_TYPE, text)
        }
        Some(("GET", _)) => ("404 Not Found", "text/plain", "try /metrics\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(response.as_bytes()).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_line_names_method_and_path() {
        let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(request_line(head), Some(("GET", "/metrics")));
        assert_eq!(request_line(b"\xff\xfe"), None);
        assert_eq!(request_line(b"GET\r\n\r\n"), None);
    }
}
