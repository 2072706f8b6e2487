//! The collective library on the emulated two-domain testbed (2 domains × 2 hosts,
//! WAN RTT 40 ms, 200 Mbit/s): four ranks, one per host, run checked allreduces
//! (hierarchical, probed costs); then one rank is killed mid-allreduce and every
//! survivor must fail within the timeout, naming it.

use causeway_test_support::require_root;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use causeway_netsim::{Host, NsChild, Profile, Testbed};
use causeway_tests::netsim_support;
use serde_json::Value;

const WORLD: usize = 4;

/// Builds the worker binary with the profile this test was built with and returns its path.
fn worker_binary() -> PathBuf {
    collective_binary("causeway-collective-worker", false)
}

/// Builds binary `name` of causeway-collective with this test's profile (or
/// release, when `release`); its path.
pub(super) fn collective_binary(name: &str, release: bool) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/<test> → target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf();
    let target_dir = profile_dir.parent().expect("target dir").to_path_buf();
    let release = release || profile_dir.file_name().is_some_and(|n| n == "release");
    let profile_dir = if release {
        target_dir.join("release")
    } else {
        profile_dir
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-q", "-p", "causeway-collective", "--bin", name]);
    if release {
        cmd.arg("--release");
    }
    let status = cmd
        .env("CARGO_TARGET_DIR", &target_dir)
        .status()
        .expect("run cargo build");
    assert!(status.success(), "building {name} failed");
    profile_dir.join(name)
}

pub(super) struct World {
    pub ranks: Vec<Option<NsChild>>,
    pub lines: Receiver<(usize, Value)>,
}

pub(super) fn start(tb: &Testbed, bin: &Path, port: u16, args: &[&str]) -> World {
    start_with(tb, bin, port, args, |_, _| Vec::new())
}

/// [`start`], with more `NAME=value` variables per rank (`extra(rank, host)`;
/// a later one replaces an earlier one, e.g. `CAUSEWAY_TIMEOUT`).
pub(super) fn start_with(
    tb: &Testbed,
    bin: &Path,
    port: u16,
    args: &[&str],
    extra: impl Fn(usize, &Host) -> Vec<String>,
) -> World {
    let master = tb.host(0, 0).ip.to_string();
    let (tx, lines) = channel();
    let mut ranks = Vec::new();
    for r in 0..WORLD {
        let host = tb.host(r / 2, r % 2);
        let mut env = vec![
            format!("RANK={r}"),
            format!("WORLD_SIZE={WORLD}"),
            "LOCAL_RANK=0".to_string(),
            format!("MASTER_ADDR={master}"),
            format!("MASTER_PORT={port}"),
            format!("CAUSEWAY_DOMAIN=dc{}", r / 2),
            "CAUSEWAY_TIMEOUT=10s".to_string(),
            "CAUSEWAY_RENDEZVOUS_TIMEOUT=30s".to_string(),
        ];
        env.extend(extra(r, host));
        let mut argv: Vec<&str> = env.iter().map(String::as_str).collect();
        let bin = bin.to_str().expect("utf-8 path");
        argv.push(bin);
        argv.extend_from_slice(args);
        let mut child = tb.spawn(host, "env", &argv).expect("spawn rank");
        let out = child.child().stdout.take().expect("stdout");
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                match serde_json::from_str(&line) {
                    Ok(v) => {
                        let _ = tx.send((r, v));
                    }
                    Err(_) => eprintln!("rank {r}: {line}"),
                }
            }
        });
        ranks.push(Some(child));
    }
    World { ranks, lines }
}

impl World {
    /// Waits for every rank to exit and asserts each succeeded (`what`
    /// prefixes the failure: which run it was).
    pub(super) fn finish(self, what: &str) {
        for (r, c) in self.ranks.into_iter().enumerate() {
            let out = c.expect("running").wait_output().expect("wait");
            assert!(
                out.status.success(),
                "{what}rank {r}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

pub(super) fn next(w: &World, deadline: Instant) -> (usize, Value) {
    w.lines
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .expect("a rank reports before the deadline")
}

#[test]
fn allreduce_across_two_domains_and_a_killed_rank_is_named() {
    require_root!("allreduce_across_two_domains_and_a_killed_rank_is_named");
    let bin = worker_binary();
    let tb = netsim_support::testbed(2, 2, Profile::Wan40);

    // 1. Checked allreduces of 4 MiB per rank.
    let t = Instant::now();
    let w = start(&tb, &bin, 29610, &["--elems", "1048576", "--iters", "3"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut done = [false; WORLD];
    while !done.iter().all(|d| *d) {
        let (r, v) = next(&w, deadline);
        match v["event"].as_str() {
            Some("ready") => {
                assert_eq!(v["algorithm"], "Hierarchical", "rank {r}: {v}");
                assert_eq!(v["domain"], format!("dc{}", r / 2));
            }
            Some("iter") => eprintln!(
                "rank {r} iteration {} took {:.3} s",
                v["iter"],
                v["s"].as_f64().unwrap_or(0.0)
            ),
            Some("done") => done[r] = true,
            _ => panic!("rank {r}: {v}"),
        }
    }
    w.finish("");
    eprintln!("checked run took {:?}", t.elapsed());

    // 2. Kill rank 3 (domain 1) mid-stream.
    let victim = 3;
    let mut w = start(
        &tb,
        &bin,
        29611,
        &["--elems", "1048576", "--iters", "100000"],
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut iterated = [false; WORLD];
    while !iterated.iter().all(|d| *d) {
        let (r, v) = next(&w, deadline);
        assert!(
            v["event"] == "ready" || v["event"] == "iter",
            "rank {r}: {v}"
        );
        if v["event"] == "iter" {
            iterated[r] = true;
        }
    }
    drop(w.ranks[victim].take()); // NsChild kills on drop
    let killed = Instant::now();
    let mut blamed = [None; WORLD];
    while (0..WORLD).any(|r| r != victim && blamed[r].is_none()) {
        let (r, v) = next(&w, killed + Duration::from_secs(15));
        if v["event"] == "error" {
            blamed[r] = Some((v["peer"].as_u64(), killed.elapsed()));
            eprintln!("rank {r}: {v}");
        } else {
            assert_eq!(v["event"], "iter", "rank {r}: {v}");
        }
    }
    for (r, b) in blamed.iter().enumerate().filter(|(r, _)| *r != victim) {
        let (peer, after) = b.expect("reported");
        assert_eq!(peer, Some(victim as u64), "rank {r} names the killed rank");
        assert!(
            after < Duration::from_secs(11),
            "rank {r} took {after:?} (timeout 10 s)"
        );
    }
}
