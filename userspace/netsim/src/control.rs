//! The emulator's control socket: one JSON request per line, one JSON reply per
//! line, over a Unix stream socket. Lets tests, the CLI and people read counters
//! and change a running emulator's parameters.
//!
//! ```text
//! {"op":"stats"}
//! {"op":"set","dir":"both","patch":{"rate_bps":100000000,"up":false}}
//! ```

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::emulator::{Dir, Emulator, EmulatorStats};
use crate::params::ParamsPatch;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Stats,
    Set { dir: Dir, patch: ParamsPatch },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<EmulatorStats>,
}

/// Control-socket failures.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("control socket {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("control socket {path}: bad reply: {source}")]
    Reply {
        path: String,
        source: serde_json::Error,
    },
    #[error("emulator refused the request: {0}")]
    Refused(String),
}

/// Answer one request line.
pub fn handle(emulator: &Emulator, line: &str) -> Response {
    let req: Request = match serde_json::from_str(line) {
        Ok(r) => r,
        Err(e) => {
            return Response {
                ok: false,
                error: Some(format!("bad request: {e}")),
                stats: None,
            }
        }
    };
    match req {
        Request::Stats => Response {
            ok: true,
            error: None,
            stats: Some(emulator.stats()),
        },
        Request::Set { dir, patch } => match emulator.set(dir, &patch) {
            Ok(()) => Response {
                ok: true,
                error: None,
                stats: Some(emulator.stats()),
            },
            Err(e) => Response {
                ok: false,
                error: Some(e.to_string()),
                stats: None,
            },
        },
    }
}

/// Serve the control socket at `path` until `stop` is set. Clients are served
/// one at a time; each may send several requests.
pub fn serve(emulator: &Emulator, path: &Path, stop: &AtomicBool) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    listener.set_nonblocking(true)?;
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = serve_client(emulator, stream, stop);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let _ = std::fs::remove_file(path);
    Ok(())
}

fn serve_client(emulator: &Emulator, stream: UnixStream, stop: &AtomicBool) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while !stop.load(Ordering::Relaxed) {
        match reader.read_line(&mut line) {
            Ok(0) => return Ok(()),
            Ok(_) => {
                let reply = handle(emulator, line.trim());
                line.clear();
                let mut text = serde_json::to_string(&reply).map_err(std::io::Error::other)?;
                text.push('\n');
                writer.write_all(text.as_bytes())?;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Send one request to the emulator at `path` and return its stats.
pub fn request(path: &Path, req: &Request) -> Result<EmulatorStats, ControlError> {
    let io = |source| ControlError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut stream = UnixStream::connect(path).map_err(io)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io)?;
    let mut text = serde_json::to_string(req).map_err(|e| io(std::io::Error::other(e)))?;
    text.push('\n');
    stream.write_all(text.as_bytes()).map_err(io)?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).map_err(io)?;
    let reply: Response = serde_json::from_str(&line).map_err(|source| ControlError::Reply {
        path: path.display().to_string(),
        source,
    })?;
    match (reply.ok, reply.stats) {
        (true, Some(stats)) => Ok(stats),
        (_, _) => Err(ControlError::Refused(
            reply.error.unwrap_or_else(|| "no reason given".into()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_reject_unknown_ops() {
        let r: Request =
            serde_json::from_str(r#"{"op":"set","dir":"a_to_b","patch":{"up":false}}"#).unwrap();
        assert!(matches!(r, Request::Set { dir: Dir::AToB, patch } if patch.up == Some(false)));
        assert!(serde_json::from_str::<Request>(r#"{"op":"reboot"}"#).is_err());
        assert!(
            serde_json::from_str::<Request>(r#"{"op":"set","dir":"sideways","patch":{}}"#).is_err()
        );
    }
}
