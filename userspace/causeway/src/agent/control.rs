//! The agent's local control socket: a unix stream socket, mode 0600, that
//! accepts only root or the agent's own user (checked with SO_PEERCRED);
//! with a control group (`control_group` in agent.toml) mode 0660, owned by
//! that group, and its members are served too (primary group from
//! SO_PEERCRED, or supplementary membership of the peer's user).
//! One JSON request per line, one JSON response per line.
//!
//! ```text
//! → {"command":"clock_status"}
//! ← {"ok":true,"clock":{...}}
//! → {"command":"ping"}
//! ← {"ok":true}
//! → {"command":"paths"}
//! ← {"ok":true,"paths":{"wan_paths":["10.0.1.10","10.0.2.10"]}}
//! ```
//!
//! `paths` is what the communication library on this host asks at start-up
//! (`causeway_collective::agent_paths`): this host's address on each WAN
//! path (`[library]` in agent.toml; none configured: an empty list).

use std::{
    io::{BufRead, BufReader, Write},
    os::unix::{fs::PermissionsExt, net::UnixStream as StdUnixStream},
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader as AsyncBufReader},
    net::{UnixListener, UnixStream},
    sync::watch,
};

use super::report::AgentReport;

/// A request on the control socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Request {
    Ping,
    ClockStatus,
    Paths,
}

/// The answer to [`Request::Paths`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathsReport {
    /// This host's own address on each WAN path, in path order.
    pub wan_paths: Vec<std::net::IpAddr>,
}

/// The response to a [`Request`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<AgentReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<PathsReport>,
}

/// Control socket failures.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("another agent is serving {0}")]
    InUse(PathBuf),
    #[error("the agent at {path} answered with something that is not a response: {source}")]
    BadResponse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("the agent at {path} refused the request: {reason}")]
    Refused { path: PathBuf, reason: String },
}

fn io_err(what: &'static str, path: &Path) -> impl Fn(std::io::Error) -> ControlError {
    let path = path.to_path_buf();
    move |source| ControlError::Io {
        what,
        path: path.clone(),
        source,
    }
}

/// Binds the socket at `path` (replacing a stale one, refusing a live one)
/// with mode 0600, or 0660 and group `group` when one is given.
pub fn bind(path: &Path, group: Option<u32>) -> Result<UnixListener, ControlError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err("create the directory of", path))?;
    }
    if path.exists() {
        if StdUnixStream::connect(path).is_ok() {
            return Err(ControlError::InUse(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(io_err("remove the stale socket", path))?;
    }
    let listener = UnixListener::bind(path).map_err(io_err("bind the control socket", path))?;
    if let Some(gid) = group {
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(io_err("give the control group", path))?;
    }
    let mode = if group.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io_err("restrict the permissions of", path))?;
    Ok(listener)
}

/// Whether a peer with these credentials may use the socket.
fn permitted(uid: u32, gid: u32, me: u32, group: Option<u32>) -> bool {
    if uid == 0 || uid == me {
        return true;
    }
    let Some(g) = group else { return false };
    if gid == g {
        return true;
    }
    // Supplementary groups of the peer's user (SO_PEERCRED has only the
    // primary one).
    use nix::unistd::{getgrouplist, Gid, Uid, User};
    let Ok(Some(user)) = User::from_uid(Uid::from_raw(uid)) else {
        return false;
    };
    let Ok(name) = std::ffi::CString::new(user.name) else {
        return false;
    };
    getgrouplist(&name, user.gid).is_ok_and(|gs| gs.contains(&Gid::from_raw(g)))
}

/// Serves requests until `shutdown` turns true; answers from `report`.
pub async fn serve(
    listener: UnixListener,
    group: Option<u32>,
    report: watch::Receiver<AgentReport>,
    mut shutdown: watch::Receiver<bool>,
) {
    let me = nix::unistd::geteuid().as_raw();
    loop {
        tokio::select! {
            _ = shutdown.changed() => {
                if *shutdown.borrow() { return; }
            }
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let allowed = stream
                    .peer_cred()
                    .is_ok_and(|c| permitted(c.uid(), c.gid(), me, group));
                let report = report.clone();
                tokio::spawn(async move {
                    if let Err(e) = handle(stream, allowed, report).await {
                        tracing::debug!(error = %e, "control connection ended");
                    }
                });
            }
        }
    }
}

async fn handle(
    stream: UnixStream,
    allowed: bool,
    report: watch::Receiver<AgentReport>,
) -> std::io::Result<()> {
    let (rd, mut wr) = stream.into_split();
    let mut lines = AsyncBufReader::new(rd).lines();
    while let Some(line) = lines.next_line().await? {
        let resp = if !allowed {
            failure("permission denied: only root, the agent's user or its control group may use this socket")
        } else {
            match serde_json::from_str::<Request>(&line) {
                Ok(Request::Ping) => Response {
                    ok: true,
                    error: None,
                    clock: None,
                    paths: None,
                },
                Ok(Request::ClockStatus) => Response {
                    ok: true,
                    error: None,
                    clock: Some(report.borrow().clone()),
                    paths: None,
                },
                Ok(Request::Paths) => Response {
                    ok: true,
                    error: None,
                    clock: None,
                    paths: Some(PathsReport {
                        wan_paths: report.borrow().wan_paths.clone(),
                    }),
                },
                Err(e) => failure(&format!("bad request: {e}")),
            }
        };
        let mut text = serde_json::to_string(&resp).map_err(std::io::Error::other)?;
        text.push('\n');
        wr.write_all(text.as_bytes()).await?;
        if !allowed {
            break;
        }
    }
    Ok(())
}

fn failure(msg: &str) -> Response {
    Response {
        ok: false,
        error: Some(msg.to_string()),
        clock: None,
        paths: None,
    }
}

/// Client side (blocking): sends `req` to the agent at `path`.
pub fn request(path: &Path, req: &Request) -> Result<Response, ControlError> {
    let mut stream =
        StdUnixStream::connect(path).map_err(io_err("connect to the agent at", path))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io_err("set a timeout on", path))?;
    let mut text = serde_json::to_string(req).map_err(|source| ControlError::BadResponse {
        path: path.to_path_buf(),
        source,
    })?;
    text.push('\n');
    stream
        .write_all(text.as_bytes())
        .map_err(io_err("write to", path))?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(io_err("read the answer from", path))?;
    let resp: Response =
        serde_json::from_str(&line).map_err(|source| ControlError::BadResponse {
            path: path.to_path_buf(),
            source,
        })?;
    if !resp.ok {
        return Err(ControlError::Refused {
            path: path.to_path_buf(),
            reason: resp.error.unwrap_or_default(),
        });
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The served socket answers `paths` with the report's addresses, and
    /// `ping` with none; a bad request names what was wrong.
    #[test]
    fn paths_answers_with_this_hosts_wan_addresses() {
        let dir = std::env::temp_dir().join(format!("cw-control-{}", std::process::id()));
        let sock = dir.join("agent.sock");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let addrs: Vec<std::net::IpAddr> = vec![
            "10.0.1.10".parse().expect("ip"),
            "fd00::2".parse().expect("ip"),
        ];
        let report = AgentReport {
            wan_paths: addrs.clone(),
            ..AgentReport::default()
        };
        let (_report_tx, report_rx) = watch::channel(report);
        let (stop_tx, stop_rx) = watch::channel(false);
        let listener = rt.block_on(async { bind(&sock, None) }).expect("bind");
        let task = rt.spawn(serve(listener, None, report_rx, stop_rx));
        let got = request(&sock, &Request::Paths).expect("paths");
        assert_eq!(got.paths, Some(PathsReport { wan_paths: addrs }));
        let ping = request(&sock, &Request::Ping).expect("ping");
        assert!(ping.ok && ping.paths.is_none());
        let mut raw = StdUnixStream::connect(&sock).expect("connect");
        raw.write_all(b"{\"command\":\"route\"}\n").expect("write");
        let mut line = String::new();
        BufReader::new(raw).read_line(&mut line).expect("read");
        assert!(
            line.contains("bad request") && line.contains("route"),
            "{line}"
        );
        let _ = stop_tx.send(true);
        let _ = rt.block_on(task);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn root_the_agent_and_the_control_group_are_permitted() {
        let me = 1000;
        assert!(permitted(0, 0, me, None));
        assert!(permitted(me, 1234, me, None));
        assert!(!permitted(4321, 4242, me, None));
        assert!(permitted(4321, 4242, me, Some(4242)));
        // 4321 names no user here: no supplementary groups to find.
        assert!(!permitted(4321, 100, me, Some(4242)));
    }
}
