//! Ranks as worker processes (`causeway-collective-worker`), each with its own
//! environment: for what only the environment path or a whole process can show
//! (topology files, a rank killed during set-up, peak memory).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// The children; killed and reaped when dropped.
pub struct Procs(pub Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A free port below Linux's ephemeral range (32768-60999), so that no
/// listener another test's rank binds to port 0 can take it before rank 0 does.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
    for _ in 0..1000 {
        let n = seed.wrapping_add(NEXT.fetch_add(7919, Ordering::Relaxed));
        let port = 20_000 + (n % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000-31999");
}

/// Spawns workers for `ranks` of a world of `n` on loopback (master on `port`,
/// probe off, one host id per rank) with `env(rank)` added; their JSON stdout
/// lines arrive as (rank, line). The children are in the order of `ranks`.
pub fn spawn_ranks(
    n: usize,
    ranks: &[usize],
    port: u16,
    env: impl Fn(usize) -> Vec<(String, String)>,
    args: &[&str],
) -> (Procs, Receiver<(usize, serde_json::Value)>) {
    let (tx, rx) = channel();
    let mut kids = Vec::new();
    for &r in ranks {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_causeway-collective-worker"));
        cmd.args(args)
            .env("RANK", r.to_string())
            .env("WORLD_SIZE", n.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("CAUSEWAY_HOST_ID", format!("host{r}"))
            .env("CAUSEWAY_PROBE", "0")
            .env_remove("CAUSEWAY_DOMAIN")
            .env_remove("CAUSEWAY_TOPOLOGY")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env(r) {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn worker");
        let out = child.stdout.take().expect("stdout");
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    let _ = tx.send((r, v));
                }
            }
        });
        kids.push(child);
    }
    (Procs(kids), rx)
}

/// Spawns a world of `n` workers in two domains (`d{r % 2}`), with `extra`
/// environment on every rank, on a fresh port.
pub fn spawn_world(
    n: usize,
    extra: &[(&str, &str)],
    args: &[&str],
) -> (Procs, Receiver<(usize, serde_json::Value)>) {
    let ranks: Vec<usize> = (0..n).collect();
    let env = |r: usize| {
        let mut env = vec![("CAUSEWAY_DOMAIN".to_string(), format!("d{}", r % 2))];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    };
    spawn_ranks(n, &ranks, free_port(), env, args)
}

/// Waits until each of the `n` ranks has printed `count` `iter` lines (so a
/// fault injected next lands mid-sequence); a `wrong` line fails the test.
pub fn wait_for_iterations(rx: &Receiver<(usize, serde_json::Value)>, n: usize, count: usize) {
    let mut iterated = vec![0; n];
    let deadline = Instant::now() + Duration::from_secs(60);
    while iterated.iter().any(|k| *k < count) {
        let (r, v) = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("ranks make progress");
        assert_ne!(v["event"], "wrong", "rank {r}: {v}");
        if v["event"] == "iter" {
            iterated[r] += 1;
        }
    }
}

/// The first `error` or `done` line of each of `ranks`, with when it arrived
/// (relative to `since`); panics if one does not come within `limit`.
pub fn outcomes(
    rx: &Receiver<(usize, serde_json::Value)>,
    ranks: &[usize],
    since: Instant,
    limit: Duration,
) -> Vec<(usize, serde_json::Value, Duration)> {
    let mut out: Vec<(usize, serde_json::Value, Duration)> = Vec::new();
    while out.len() < ranks.len() {
        let left = (since + limit).saturating_duration_since(Instant::now());
        let Ok((r, v)) = rx.recv_timeout(left) else {
            let have: Vec<usize> = out.iter().map(|o| o.0).collect();
            panic!("only ranks {have:?} of {ranks:?} finished within {limit:?}");
        };
        let last = v["event"] == "error" || v["event"] == "done";
        if last && ranks.contains(&r) && !out.iter().any(|o| o.0 == r) {
            out.push((r, v, since.elapsed()));
        }
    }
    out.sort_by_key(|o| o.0);
    out
}
