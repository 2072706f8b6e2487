//! The binaries print the library's warnings on stderr (`cli::init_logging`):
//! a worker across two domains without TLS says so, and `RUST_LOG` sets the
//! level.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::procs::{free_port, Procs};

/// Runs a two-domain world of 2 workers (one allreduce, no TLS) with
/// `RUST_LOG` = `log` (None: unset); returns each rank's stderr.
fn stderr_of_a_world_without_tls(log: Option<&str>) -> Vec<String> {
    let port = free_port();
    let mut kids = Procs(Vec::new());
    for r in 0..2 {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_causeway-collective-worker"));
        cmd.args(["--elems", "1000", "--iters", "1"])
            .env("RANK", r.to_string())
            .env("WORLD_SIZE", "2")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("CAUSEWAY_HOST_ID", format!("host{r}"))
            .env("CAUSEWAY_DOMAIN", format!("d{r}"))
            .env("CAUSEWAY_PROBE", "0")
            .env_remove("CAUSEWAY_TOPOLOGY")
            .env_remove("CAUSEWAY_TLS_CERT")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(l) = log {
            cmd.env("RUST_LOG", l);
        }
        kids.0.push(cmd.spawn().expect("spawn worker"));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    for c in &mut kids.0 {
        loop {
            if let Some(st) = c.try_wait().expect("wait") {
                assert!(st.success(), "worker failed: {st}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the world did not finish in 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut s = String::new();
        c.stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut s)
            .expect("read stderr");
        out.push(s);
    }
    out
}

#[test]
fn a_world_across_domains_without_tls_warns_on_stderr_unless_silenced() {
    let err = stderr_of_a_world_without_tls(None);
    assert!(
        err[0].contains("RUNNING WITHOUT TLS ACROSS 2 DOMAINS"),
        "rank 0's stderr: {:?}",
        err[0]
    );
    assert!(
        err[1].contains("running without TLS across 2 domains"),
        "rank 1's stderr: {:?}",
        err[1]
    );
    // Not a terminal: no colour codes in a log file.
    assert!(!err[0].contains('\u{1b}'), "{:?}", err[0]);
    let quiet = stderr_of_a_world_without_tls(Some("error"));
    assert!(
        quiet.iter().all(|e| !e.contains("TLS")),
        "RUST_LOG=error: {quiet:?}"
    );
}
