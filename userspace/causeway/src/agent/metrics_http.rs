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

use causeway_core::scrape_http::{self, Request, MAX_HEAD, READ_TIMEOUT};

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

async fn answer(mut conn: TcpStream, source: Source) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let complete = tokio::time::timeout(READ_TIMEOUT, async {
        while !scrape_http::head_complete(&head) {
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
    let request = scrape_http::route(&head);
    let body = match request {
        Request::Metrics => {
            let report = source.report.borrow().clone();
            let (layout, scope, ifaces) = (source.layout, source.scope, source.ifaces);
            tokio::task::spawn_blocking(move || {
                metrics::encode_observation(&observe::observe(
                    &layout,
                    &scope,
                    &ifaces,
                    Some(&report),
                ))
            })
            .await
            .map_err(std::io::Error::other)?
        }
        Request::NotFound | Request::NotAllowed => String::new(),
    };
    let response = scrape_http::response(request, &body);
    conn.write_all(response.as_bytes()).await?;
    conn.shutdown().await
}
