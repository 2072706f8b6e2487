//! Shrink and grow: survivors of a killed rank or domain form a new
//! communicator whose allreduces are exact; a newcomer grows it back; the old
//! communicator never returns `Ok` again.

use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use crate::procs::{spawn_world, wait_for_iterations};
use crate::world::test_options;
use causeway_collective::store::StoreServer;
use causeway_collective::{CollectiveError, Communicator, Options, Rank, ReduceOp};

/// Rank-dependent small integers: their f32 sums are exact.
fn data(rank: Rank, it: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i + rank * 5 + it) % 11) as f32).collect()
}

/// `iters` allreduces on `c`, each checked element by element.
fn exact_allreduces(c: &Communicator, iters: usize) {
    let (r, w, n) = (c.rank(), c.world_size(), 3000);
    for it in 0..iters {
        let mut v = data(r, it, n);
        c.allreduce(&mut v, ReduceOp::Sum)
            .unwrap_or_else(|e| panic!("epoch {} rank {r} iter {it}: {e}", c.epoch()));
        for (i, x) in v.iter().enumerate() {
            let want: f32 = (0..w).map(|q| ((i + q * 5 + it) % 11) as f32).sum();
            assert_eq!(*x, want, "epoch {} rank {r} iter {it} index {i}", c.epoch());
        }
    }
}

/// Allreduces until one fails; the error.
fn until_error(c: &Communicator) -> CollectiveError {
    for it in 0.. {
        let mut v = data(c.rank(), it, 3000);
        if let Err(e) = c.allreduce(&mut v, ReduceOp::Sum) {
            return e;
        }
    }
    unreachable!()
}

/// Runs ranks as threads, each owning its communicator; rank r is on host `h{r}`.
fn spawn<R: Send>(
    domains: &[&str],
    opts: &Options,
    f: impl Fn(Communicator) -> R + Sync,
) -> Vec<R> {
    let server = StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("store");
    let n = domains.len();
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let b = Communicator::builder(r, n)
                    .master(server.addr())
                    .host_store(false)
                    .domain(domains[r])
                    .host_id(format!("h{r}"))
                    .options(opts.clone());
                s.spawn(move || f(b.build().unwrap_or_else(|e| panic!("rank {r}: {e}"))))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

/// Worker processes in two domains (`d{r % 2}`); `victims` get `signal`
/// (`KILL`, or `STOP`: hung, not dead) mid-sequence; the survivors shrink
/// and run 100 exact allreduces (the workers check every value). Returns each
/// survivor's `shrunk` line, after checking what every survivor must show.
fn survivors_shrink(victims: &[Rank], signal: &str, timeout_ms: u64) -> Vec<serde_json::Value> {
    let n = 4;
    let timeout = format!("{timeout_ms}ms");
    let (mut ranks, rx) = spawn_world(
        n,
        &[("CAUSEWAY_TIMEOUT", &timeout)],
        &[
            "--elems",
            "20000",
            "--iters",
            "100000",
            "--shrink-iters",
            "100",
        ],
    );
    wait_for_iterations(&rx, n, 3);
    for &v in victims {
        let pid = ranks.0[v].id().to_string();
        let st = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("kill");
        assert!(st.success(), "kill -{signal} {pid}");
    }
    let mut shrunk = vec![None; n];
    let mut done: Vec<bool> = (0..n).map(|r| victims.contains(&r)).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    while done.iter().any(|d| !d) {
        let (r, v) = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("every survivor shrinks and finishes");
        match v["event"].as_str() {
            Some("wrong" | "shrink_error") => panic!("rank {r}: {v}"),
            Some("shrunk") => shrunk[r] = Some(v),
            Some("done") => done[r] = true,
            _ => {}
        }
    }
    let survivors: Vec<Rank> = (0..n).filter(|r| !victims.contains(r)).collect();
    let mut lines = Vec::new();
    for (new, &r) in survivors.iter().enumerate() {
        let c = &mut ranks.0[r];
        assert_eq!(
            c.wait().expect("wait").code(),
            Some(0),
            "rank {r} exits cleanly"
        );
        let v = shrunk[r].take().expect("shrunk line");
        assert_eq!(v["world"], survivors.len(), "{v}");
        assert_eq!(v["rank"], new, "dense renumbering in old-rank order: {v}");
        assert_eq!(v["epoch"], 1, "{v}");
        assert_eq!(v["lost"], serde_json::json!(victims), "{v}");
        let old = v["old_comm"].as_str().expect("old_comm");
        assert!(old.starts_with("Err(Retired"), "old communicator: {old}");
        eprintln!(
            "rank {r}: shrink took {}s after {}",
            v["took_s"], v["failed_with"]
        );
        lines.push(v);
    }
    lines
}

/// Rank 0 served the bootstrap store: the survivors do without it.
#[test]
fn survivors_of_a_killed_store_host_shrink_and_stay_exact() {
    for v in survivors_shrink(&[0], "KILL", 5000) {
        assert_eq!(
            v["failed_peer"], 0,
            "the failed operation names the lost rank: {v}"
        );
    }
}

#[test]
fn survivors_of_a_killed_rank_shrink_and_stay_exact() {
    for v in survivors_shrink(&[2], "KILL", 5000) {
        assert_eq!(
            v["failed_peer"], 2,
            "the failed operation names the lost rank: {v}"
        );
        assert_eq!(v["domains"], 2, "{v}");
    }
}

/// Both processes of domain d1 are SIGKILLed: one domain remains.
#[test]
fn survivors_of_a_killed_domain_shrink_to_one_domain() {
    for v in survivors_shrink(&[1, 3], "KILL", 5000) {
        let p = v["failed_peer"].as_u64().expect("failed peer");
        assert!(p % 2 == 1, "the failed operation names a rank of d1: {v}");
        assert_eq!(v["domains"], 1, "{v}");
    }
}

/// A hung (SIGSTOPped) rank 0 accepts connections but never answers: the
/// survivors give up on it after the store's wait and shrink without it.
#[test]
fn survivors_of_a_stopped_store_host_shrink_in_bounded_time() {
    let timeout_s = 2.0;
    for v in survivors_shrink(&[0], "STOP", 2000) {
        assert_eq!(
            v["failed_peer"], 0,
            "the failed operation names the hung rank: {v}"
        );
        let took = v["took_s"].as_f64().expect("took_s");
        // One candidate wait (timeout + the store client's 10 s slack) + set-up.
        assert!(took < timeout_s + 10.0 + 3.0, "shrink took {took}s: {v}");
    }
}

/// A survivor that does not come to the shrink within `timeout + 2 s` is left
/// out, so the others finish in bounded time; it learns so when it comes.
#[test]
fn a_survivor_that_stays_away_is_left_out_in_bounded_time() {
    let opts = Options {
        timeout: Duration::from_millis(800),
        ..test_options()
    };
    let both = std::sync::Barrier::new(2);
    let all_done = crate::world::AllArrive::new(3);
    let out = spawn(&["d0", "d0", "d1"], &opts, |mut c| {
        exact_allreduces(&c, 2);
        // Rank 2 leaves only once every rank has its results.
        all_done.wait();
        if c.rank() == 2 {
            return None;
        }
        until_error(&c);
        if c.rank() == 1 {
            std::thread::sleep(Duration::from_secs(5));
        }
        let t = Instant::now();
        let res = c.shrink();
        let took = t.elapsed();
        if let Ok(next) = &res {
            exact_allreduces(next, 10);
        }
        // Rank 0's new communicator (and the store it serves) outlives rank 1's attempt.
        both.wait();
        Some((c.rank(), res.map(|n| n.world_size()), took))
    });
    let out: Vec<_> = out.into_iter().flatten().collect();
    let (_, r0, t0) = &out[0];
    assert_eq!(r0.as_ref().ok(), Some(&1), "{r0:?}");
    assert!(*t0 < Duration::from_millis(800 + 2000 + 1500), "{t0:?}");
    let (_, r1, _) = &out[1];
    assert!(
        matches!(r1, Err(CollectiveError::Excluded { rank: 1, epoch: 1, members }) if members == &vec![0]),
        "{r1:?}"
    );
    eprintln!("rank 0 shrank without the absent rank 1 in {t0:?}");
}

/// Both ranks of domain d1 die (threads drop their communicators); the two of
/// d0 shrink to a single-domain communicator whose allreduces are exact, and
/// the old one keeps failing with a typed error.
#[test]
fn killed_domain_leaves_a_working_single_domain_communicator() {
    let all_done = crate::world::AllArrive::new(4);
    let out = spawn(&["d0", "d1", "d0", "d1"], &test_options(), |mut c| {
        exact_allreduces(&c, 3);
        // d1 leaves only once every rank has its results.
        all_done.wait();
        if c.rank() % 2 == 1 {
            return None; // the whole of d1 is gone
        }
        let failed = until_error(&c);
        let t = Instant::now();
        let next = c
            .shrink()
            .unwrap_or_else(|e| panic!("rank {}: shrink: {e}", c.rank()));
        let took = t.elapsed();
        let mut v = [1.0f32; 4];
        let old = c.allreduce(&mut v, ReduceOp::Sum);
        assert!(
            matches!(old, Err(CollectiveError::Retired { epoch: 0 })),
            "{old:?}"
        );
        let again = c.shrink().map(|_| ());
        assert!(
            matches!(again, Err(CollectiveError::Retired { epoch: 0 })),
            "a retired communicator does not shrink twice: {again:?}"
        );
        assert_eq!(next.world_size(), 2);
        assert_eq!(next.topology().domains().len(), 1, "{:?}", next.topology());
        exact_allreduces(&next, 100);
        Some((
            c.rank(),
            next.rank(),
            next.membership().clone(),
            failed,
            took,
        ))
    });
    for (old, new, m, failed, took) in out.into_iter().flatten() {
        assert_eq!(new, old / 2);
        assert_eq!(m.lost, vec![1, 3]);
        assert_eq!(m.previous, vec![Some(0), Some(2)]);
        assert!(
            failed.peer().is_some_and(|p| p % 2 == 1),
            "blames d1: {failed}"
        );
        assert!(took < Duration::from_secs(5), "shrink took {took:?}");
        eprintln!("rank {old}: shrink took {took:?} after {failed}");
    }
}

/// Rank 1 of three dies, the survivors shrink to two, then a new thread joins
/// and they grow back to three: the allreduce over the grown world is exact.
#[test]
fn joiner_grows_a_shrunk_communicator_back() {
    let opts = test_options();
    let (addr_tx, addr_rx) = channel();
    std::thread::scope(|s| {
        let opts2 = opts.clone();
        let joiner = s.spawn(move || {
            let opts = opts2;
            let addr = addr_rx.recv().expect("grow address");
            let c = Communicator::joiner()
                .domain("d1")
                .host_id("h9")
                .options(opts.clone())
                .join(addr)
                .expect("join");
            assert_eq!((c.rank(), c.world_size(), c.epoch()), (2, 3, 2));
            exact_allreduces(&c, 20);
        });
        let addr_tx = std::sync::Mutex::new(addr_tx);
        let all_done = crate::world::AllArrive::new(3);
        let out = spawn(&["d0", "d1", "d1"], &opts, |mut c| {
            exact_allreduces(&c, 2);
            // Rank 1 leaves only once every rank has its results.
            all_done.wait();
            if c.rank() == 1 {
                return None;
            }
            until_error(&c);
            let mut small = c.shrink().expect("shrink");
            exact_allreduces(&small, 5);
            if small.rank() == 0 {
                addr_tx
                    .lock()
                    .expect("lock")
                    .send(small.grow_address())
                    .expect("send");
            }
            let t = Instant::now();
            let grown = small.grow(1).expect("grow");
            let took = t.elapsed();
            assert_eq!(grown.world_size(), 3);
            assert_eq!(grown.membership().previous, vec![Some(0), Some(1), None]);
            assert!(matches!(
                small.barrier(),
                Err(CollectiveError::Retired { epoch: 1 })
            ));
            exact_allreduces(&grown, 20);
            Some(took)
        });
        joiner.join().expect("joiner");
        for took in out.into_iter().flatten() {
            eprintln!("grow took {took:?}");
        }
    });
}

/// A healthy two-rank communicator grows by exactly the one joiner it asks
/// for; a second joiner is refused with a typed error, not admitted.
#[test]
fn grow_admits_exactly_the_joiners_asked_for() {
    let opts = test_options();
    let (addr_tx, addr_rx) = channel::<std::net::SocketAddr>();
    std::thread::scope(|s| {
        let opts2 = opts.clone();
        let joiners = s.spawn(move || {
            let addr = addr_rx.recv().expect("grow address");
            let hs: Vec<_> = (0..2)
                .map(|j| {
                    let b = Communicator::joiner()
                        .domain("d0")
                        .host_id(format!("j{j}"))
                        .options(opts2.clone());
                    std::thread::spawn(move || {
                        b.join(addr).map(|c| {
                            exact_allreduces(&c, 5);
                            c.rank()
                        })
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("joiner"))
                .collect::<Vec<_>>()
        });
        let addr_tx = std::sync::Mutex::new(addr_tx);
        spawn(&["d0", "d0"], &opts, |mut c| {
            exact_allreduces(&c, 2);
            if c.rank() == 0 {
                let a = c.grow_address();
                addr_tx.lock().expect("lock").send(a).expect("send");
            }
            let grown = c.grow(1).expect("grow");
            assert_eq!((grown.world_size(), grown.epoch()), (3, 1));
            exact_allreduces(&grown, 5);
        });
        let out = joiners.join().expect("joiners");
        let admitted: Vec<_> = out.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(admitted, vec![&2], "{out:?}");
        assert!(
            out.iter()
                .any(|r| matches!(r, Err(CollectiveError::Membership { .. }))),
            "{out:?}"
        );
    });
}

/// With nobody lost, a shrink is a resynchronisation: same ranks, epoch + 1.
#[test]
fn shrink_without_losses_keeps_every_rank() {
    let out = spawn(&["d0", "d1", "d0"], &test_options(), |mut c| {
        exact_allreduces(&c, 2);
        let next = c.shrink().expect("shrink");
        exact_allreduces(&next, 5);
        (
            c.rank(),
            next.rank(),
            next.world_size(),
            next.membership().clone(),
        )
    });
    for (old, new, world, m) in out {
        assert_eq!((old, world, m.epoch), (new, 3, 1));
        assert!(m.lost.is_empty(), "{m:?}");
    }
}
