//! The WAN paths the host's agent names for this library (issue 14): the
//! agent's `[library] wan_paths` in agent.toml, this host's own address on
//! each path, asked for on its control socket at start-up.
//!
//! ```text
//! → {"command":"paths"}
//! ← {"ok":true,"paths":{"wan_paths":["10.0.1.10","10.0.2.10"]}}
//! ```
//!
//! Which socket: `CAUSEWAY_AGENT_SOCKET` when set, else the agent's default
//! for the root network namespace ([`DEFAULT_SOCKET`]) when it exists.
//! `CAUSEWAY_WAN_PATHS` (or [`crate::CommunicatorBuilder::wan_paths`]) takes
//! precedence: the agent is asked only when no path is configured. Without
//! an agent, or when it names no path, the communicator uses one path, as
//! before; an agent that cannot be asked is logged (a warning naming why),
//! not an error. Ranks that end up disagreeing (paths on some hosts only)
//! are refused at start-up by the options check every rank runs.
//!
//! The weights stay the library's own: the stripe scheduler measures each
//! path from its live connections (`crate::stripe`), which sees this
//! communicator's traffic, not the agent's probes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::stripe::MAX_PATHS;

/// The agent's control socket in the root network namespace
/// (`causeway agent`'s default).
pub const DEFAULT_SOCKET: &str = "/run/causeway/root/agent.sock";

/// How long the agent may take to answer.
const TIMEOUT: Duration = Duration::from_secs(2);
/// The most an answer may be (a line of JSON).
const MAX_ANSWER: u64 = 64 << 10;

#[derive(Debug, thiserror::Error)]
pub enum AgentPathsError {
    #[error("cannot ask the agent at {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the agent at {path} answered with something that is not a paths response: {detail}")]
    BadAnswer { path: PathBuf, detail: String },
    #[error("the agent at {path} refused the request: {reason}")]
    Refused { path: PathBuf, reason: String },
}

/// Asks the agent at `socket` for this host's WAN path addresses.
pub fn ask(socket: &Path) -> Result<Vec<IpAddr>, AgentPathsError> {
    let io = |source| AgentPathsError::Io {
        path: socket.to_path_buf(),
        source,
    };
    let bad = |detail: String| AgentPathsError::BadAnswer {
        path: socket.to_path_buf(),
        detail,
    };
    let mut s = UnixStream::connect(socket).map_err(io)?;
    s.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
    s.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
    s.write_all(b"{\"command\":\"paths\"}\n").map_err(io)?;
    let mut line = String::new();
    BufReader::new(s.take(MAX_ANSWER))
        .read_line(&mut line)
        .map_err(io)?;
    if !line.ends_with('\n') {
        return Err(bad(format!(
            "no complete line within {MAX_ANSWER} bytes ({} read)",
            line.len()
        )));
    }
    let a: serde_json::Value = serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?;
    let Some(ok) = a["ok"].as_bool() else {
        return Err(bad("no `ok`".into()));
    };
    if !ok {
        return Err(AgentPathsError::Refused {
            path: socket.to_path_buf(),
            reason: a["error"].as_str().unwrap_or_default().to_string(),
        });
    }
    let Some(list) = a["paths"]["wan_paths"].as_array() else {
        return Err(bad(
            "no `paths.wan_paths` (an agent older than this library?)".into(),
        ));
    };
    if list.len() > MAX_PATHS {
        return Err(bad(format!("{} paths, at most {MAX_PATHS}", list.len())));
    }
    list.iter()
        .map(|v| {
            let s = v
                .as_str()
                .ok_or_else(|| bad(format!("{v} is not a string")))?;
            s.parse::<IpAddr>()
                .map_err(|e| bad(format!("{s:?} is not an IP address: {e}")))
        })
        .collect()
}

/// The socket to ask: `configured` (`CAUSEWAY_AGENT_SOCKET`), else
/// [`DEFAULT_SOCKET`] when it exists.
pub fn socket(configured: Option<&Path>) -> Option<PathBuf> {
    match configured {
        Some(p) => Some(p.to_path_buf()),
        None => Some(PathBuf::from(DEFAULT_SOCKET)).filter(|p| p.exists()),
    }
}

/// The WAN paths to use: `configured` when it names any, else what the
/// agent at `socket` names (none on any failure, which is logged).
pub fn resolve(configured: &[IpAddr], socket: Option<&Path>) -> Vec<IpAddr> {
    if !configured.is_empty() {
        return configured.to_vec();
    }
    let Some(socket) = socket else {
        return Vec::new();
    };
    match ask(socket) {
        Ok(paths) => {
            if !paths.is_empty() {
                tracing::info!(socket = %socket.display(), ?paths, "WAN paths from the agent");
            }
            paths
        }
        Err(e) => {
            tracing::warn!(error = %e, "no WAN paths from the agent: one path");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A one-connection agent at a fresh socket that reads one request line
    /// and answers `answer` (raw bytes).
    fn fake_agent(name: &str, answer: &'static [u8]) -> (PathBuf, std::thread::JoinHandle<String>) {
        let dir =
            std::env::temp_dir().join(format!("cw-agent-paths-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("agent.sock");
        let l = UnixListener::bind(&path).expect("bind");
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().expect("accept");
            let mut req = String::new();
            BufReader::new(&s).read_line(&mut req).expect("request");
            (&s).write_all(answer).expect("answer");
            req
        });
        (path, t)
    }

    #[test]
    fn the_agents_paths_are_asked_for_and_parsed() {
        let (sock, t) = fake_agent(
            "ok",
            b"{\"ok\":true,\"paths\":{\"wan_paths\":[\"10.0.1.10\",\"fd00::2\"]}}\n",
        );
        let got = resolve(&[], Some(&sock));
        assert_eq!(t.join().expect("agent"), "{\"command\":\"paths\"}\n");
        let want: Vec<IpAddr> = vec![
            "10.0.1.10".parse().expect("ip"),
            "fd00::2".parse().expect("ip"),
        ];
        assert_eq!(got, want);
        // Configured paths win: the agent is not asked.
        let mine: Vec<IpAddr> = vec!["10.9.9.9".parse().expect("ip")];
        assert_eq!(resolve(&mine, Some(&sock)), mine);
    }

    #[test]
    fn a_missing_refusing_or_garbled_agent_means_one_path_and_a_named_error() {
        let gone = std::env::temp_dir().join("cw-agent-paths-no-such/agent.sock");
        assert!(matches!(ask(&gone), Err(AgentPathsError::Io { .. })));
        assert!(resolve(&[], Some(&gone)).is_empty());
        assert!(resolve(&[], None).is_empty());
        let cases: [(&str, &'static [u8], &str); 5] = [
            (
                "refused",
                b"{\"ok\":false,\"error\":\"permission denied\"}\n",
                "refused the request: permission denied",
            ),
            ("old", b"{\"ok\":true}\n", "no `paths.wan_paths`"),
            ("garbled", b"{\"ok\":tru\n", "not a paths response"),
            ("cut", b"{\"ok\":true,\"paths\":", "no complete line"),
            (
                "bad-ip",
                b"{\"ok\":true,\"paths\":{\"wan_paths\":[\"10.0.1\"]}}\n",
                "\"10.0.1\" is not an IP address",
            ),
        ];
        for (name, answer, needle) in cases {
            let (sock, t) = fake_agent(name, answer);
            let e = ask(&sock).expect_err(name).to_string();
            let _ = t.join();
            assert!(e.contains(needle), "{name}: {e}");
            assert!(e.contains(&sock.display().to_string()), "{name}: {e}");
            let _ = std::fs::remove_dir_all(sock.parent().expect("dir"));
        }
    }
}
