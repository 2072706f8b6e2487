//! A failure during set-up reaches every rank within a bound, naming who
//! failed: a pair whose connection is refused, a rank killed after it
//! registered, a rank whose own configuration is refused. Without the report the others would wait for their own
//! rendezvous deadline (60 s here).

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use crate::procs::*;
use causeway_collective::store::StoreClient;
use causeway_collective::Options;

const RENDEZVOUS: &str = "60s";
/// Set-up failures must reach everyone well before any deadline.
const BOUND: Duration = Duration::from_secs(5);

fn env(_: usize) -> Vec<(String, String)> {
    vec![
        ("CAUSEWAY_DOMAIN".into(), "d0".into()),
        ("CAUSEWAY_RENDEZVOUS_TIMEOUT".into(), RENDEZVOUS.into()),
    ]
}

fn store(port: u16) -> StoreClient {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    StoreClient::connect(addr, Duration::from_secs(20)).expect("rank 0's store")
}

#[test]
fn a_refused_connection_is_reported_by_every_rank_naming_the_pair() {
    let port = free_port();
    // Ranks 0 and 2 are workers; rank 1 registers by hand an address that refuses.
    let (_procs, rx) = spawn_ranks(3, &[0, 2], port, env, &["--elems", "1000", "--iters", "1"]);
    let t = Instant::now();
    let mut s = store(port);
    assert_eq!(s.add("claim/1", 1).expect("claim"), 1);
    let refusing = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port");
    let mut entry = format!("{refusing}\nhost1\ndomain=d0\n");
    let worker_opts = Options {
        probe: false,
        ..Options::default()
    };
    for (k, v) in worker_opts.wire_settings() {
        entry += &format!("wire:{k}={v}\n");
    }
    s.set("rank/1", entry.as_bytes()).expect("register");
    drop(s); // the fake is done: nothing else of it is needed
    let out = outcomes(&rx, &[0, 2], t, Duration::from_secs(30));
    for (r, v, after) in out {
        eprintln!("rank {r} reported after {after:?}: {}", v["error"]);
        assert_eq!(v["event"], "error", "rank {r}: {v}");
        let e = v["error"].as_str().expect("text");
        assert!(
            e.contains("connection setup failed between rank 2 and rank(s) [1]")
                && e.contains("refused"),
            "rank {r}: {e}"
        );
        assert_eq!(v["peer"], 1, "rank {r} blames the unreachable rank: {v}");
        assert!(after < BOUND, "rank {r} took {after:?}");
    }
}

#[test]
fn a_rank_killed_after_registering_is_reported_by_every_rank() {
    let port = free_port();
    // World of 4, rank 3 never comes: ranks 0-2 wait in the rendezvous.
    let (mut procs, rx) = spawn_ranks(
        4,
        &[0, 1, 2],
        port,
        env,
        &["--elems", "1000", "--iters", "1"],
    );
    let mut s = store(port);
    s.get("rank/1", Duration::from_secs(20))
        .expect("rank 1 registers");
    procs.0[1].kill().expect("kill rank 1");
    let killed = Instant::now();
    drop(s);
    let out = outcomes(&rx, &[0, 2], killed, Duration::from_secs(30));
    for (r, v, after) in out {
        eprintln!("rank {r} reported after {after:?}: {}", v["error"]);
        assert_eq!(v["event"], "error", "rank {r}: {v}");
        let e = v["error"].as_str().expect("text");
        assert!(
            e.contains("connection setup failed at rank 1") && e.contains("closed during set-up"),
            "rank {r}: {e}"
        );
        assert_eq!(v["peer"], 1, "rank {r}: {v}");
        assert!(after < BOUND, "rank {r} took {after:?}");
    }
}

#[test]
fn a_rank_whose_configuration_is_refused_tells_every_rank() {
    rank_1_refuses_its_window(|_| Vec::new());
}

/// The same with mutual TLS on (`CAUSEWAY_TLS=all`, every rank's own
/// certificate): the refused rank's report goes over TLS, so the store takes
/// it and every rank still learns within the bound who failed.
#[test]
fn a_refused_configuration_is_reported_over_tls() {
    use crate::pki::{self, Ca};
    let dir = pki::dir("setup-report");
    let ca = Ca::new("d0");
    let files: Vec<[std::path::PathBuf; 3]> = (0..3)
        .map(|r| {
            pki::files(
                &dir,
                &format!("r{r}"),
                &ca.issue(&format!("host{r}")),
                &[&ca],
            )
        })
        .collect();
    rank_1_refuses_its_window(|r| {
        let [cert, key, ca] = &files[r];
        let mut v: Vec<(String, String)> = [
            ("CAUSEWAY_TLS_CERT", cert),
            ("CAUSEWAY_TLS_KEY", key),
            ("CAUSEWAY_TLS_CA", ca),
        ]
        .into_iter()
        .map(|(k, p)| (k.to_string(), p.display().to_string()))
        .collect();
        v.push(("CAUSEWAY_TLS".into(), "all".into()));
        v
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three ranks with `extra(rank)` in their environment, rank 1 with a
/// refused `CAUSEWAY_WINDOW`: every rank fails within [`BOUND`] with that
/// error, and the others name rank 1 as the failed peer.
fn rank_1_refuses_its_window(extra: impl Fn(usize) -> Vec<(String, String)>) {
    let port = free_port();
    let (_procs, rx) = spawn_ranks(
        3,
        &[0, 1, 2],
        port,
        |r| {
            let mut v = env(r);
            v.extend(extra(r));
            if r == 1 {
                v.push(("CAUSEWAY_WINDOW".into(), "0".into()));
            }
            v
        },
        &["--elems", "1000", "--iters", "1"],
    );
    let out = outcomes(&rx, &[0, 1, 2], Instant::now(), Duration::from_secs(30));
    for (r, v, after) in out {
        eprintln!("rank {r} reported after {after:?}: {}", v["error"]);
        assert_eq!(v["event"], "error", "rank {r}: {v}");
        let e = v["error"].as_str().expect("text");
        assert!(e.contains("window must be 1..=1024"), "rank {r}: {e}");
        if r != 1 {
            assert!(
                e.contains("connection setup failed at rank 1"),
                "rank {r}: {e}"
            );
            assert_eq!(v["peer"], 1, "rank {r}: {v}");
        }
        assert!(after < BOUND, "rank {r} took {after:?}");
    }
}
