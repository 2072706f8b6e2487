//! The HTTP/1.1 of a Prometheus scrape endpoint, without the I/O: one
//! request per connection, `GET /metrics` answered, anything else 404
//! (unknown path) or 405 (another method), `Connection: close`. The agent
//! (tokio) and the library (std threads) read the request head and write
//! the response on their own sockets; what the bytes mean is decided here.

use std::time::Duration;

/// The OpenMetrics text format's content type.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// A request head larger than this is refused.
pub const MAX_HEAD: usize = 8 * 1024;
/// A client that sends no complete request head within this is dropped.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What a complete request head asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `GET /metrics` (with or without a query).
    Metrics,
    /// Another path, or a head without a request line.
    NotFound,
    /// Another method.
    NotAllowed,
}

/// Whether `head` holds the whole request head (it ends at a blank line).
pub fn head_complete(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n")
}

/// The request line's method and path.
pub fn request_line(head: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(head).ok()?;
    let mut words = text.lines().next()?.split_whitespace();
    Some((words.next()?, words.next()?))
}

/// What a complete request head asks for.
pub fn route(head: &[u8]) -> Request {
    match request_line(head) {
        Some(("GET", path)) if path == "/metrics" || path.starts_with("/metrics?") => {
            Request::Metrics
        }
        Some(("GET", _)) => Request::NotFound,
        Some(_) => Request::NotAllowed,
        // A head the request line cannot be read from: as before, 405.
        None => Request::NotAllowed,
    }
}

/// The whole response: `body` (the exposition text) for [`Request::Metrics`],
/// a short plain-text reason otherwise.
pub fn response(request: Request, body: &str) -> String {
    let (status, content_type, body) = match request {
        Request::Metrics => ("200 OK", CONTENT_TYPE, body),
        Request::NotFound => ("404 Not Found", "text/plain", "try /metrics\n"),
        Request::NotAllowed => ("405 Method Not Allowed", "text/plain", "GET only\n"),
    };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
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

    #[test]
    fn only_get_metrics_is_answered_with_the_exposition() {
        assert!(!head_complete(b"GET /metrics HTTP/1.1\r\n"));
        assert!(head_complete(b"GET /metrics HTTP/1.1\r\n\r\n"));
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\n\r\n"), Request::Metrics);
        assert_eq!(
            route(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n"),
            Request::Metrics
        );
        assert_eq!(route(b"GET /metricsx HTTP/1.1\r\n\r\n"), Request::NotFound);
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Request::NotAllowed
        );
        assert_eq!(route(b"\xff\r\n\r\n"), Request::NotAllowed);
        let ok = response(Request::Metrics, "a 1\n");
        assert_eq!(
            ok,
            format!("HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: 4\r\nConnection: close\r\n\r\na 1\n")
        );
        assert!(response(Request::NotFound, "a 1\n").starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(response(Request::NotAllowed, "").ends_with("\r\n\r\nGET only\n"));
    }
}
