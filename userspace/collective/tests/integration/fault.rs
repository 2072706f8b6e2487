//! A rank dies mid-allreduce: every other rank's operation fails within the
//! timeout with an error naming the dead rank; later operations fail fast.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::procs::{spawn_world, wait_for_iterations};
use crate::world::*;
use causeway_collective::{CollectiveError, ReduceOp};

#[test]
fn killed_rank_is_named_by_every_survivor() {
    let n = 4;
    let victim = 2;
    let (mut ranks, rx) = spawn_world(
        n,
        &[("CAUSEWAY_TIMEOUT", "5s")],
        &["--elems", "2000000", "--iters", "100000"],
    );
    // Wait until every rank has completed an allreduce, so the kill lands mid-stream.
    wait_for_iterations(&rx, n, 1);
    ranks.0[victim].kill().expect("kill");
    let killed_at = Instant::now();
    let mut errors = vec![None; n];
    while errors
        .iter()
        .enumerate()
        .any(|(r, e)| r != victim && e.is_none())
    {
        let (r, v) = rx
            .recv_timeout(Duration::from_secs(15))
            .expect("every survivor reports an error in time");
        if v["event"] == "error" {
            errors[r] = Some((v, killed_at.elapsed()));
        }
    }
    for (r, e) in errors.iter().enumerate().filter(|(r, _)| *r != victim) {
        let (v, after) = e.as_ref().expect("reported");
        assert_eq!(v["peer"], victim, "rank {r} blames the dead rank: {v}");
        assert!(*after < Duration::from_secs(6), "rank {r} took {after:?}");
    }
    for (r, c) in ranks.0.iter_mut().enumerate().filter(|(r, _)| *r != victim) {
        let status = c.wait().expect("wait");
        assert_eq!(
            status.code(),
            Some(3),
            "rank {r} exits with the collective-error code"
        );
    }
}

#[test]
fn rank_that_leaves_early_is_named_and_later_ops_fail_fast() {
    let layout = two_domains(4);
    // Rank 1 leaves only once every rank has its first result: it can
    // finish before a peer has read its last chunk.
    let first_done = AllArrive::new(layout.len());
    let results = run_world(&layout, &test_options(), |c| {
        let mut v = vec![1.0f32; 10_000];
        c.allreduce(&mut v, ReduceOp::Sum).expect("first allreduce");
        first_done.wait();
        if c.rank() == 1 {
            return Ok(()); // drops its communicator: goodbye, connections closed
        }
        let first = c.allreduce(&mut v, ReduceOp::Sum);
        let t = Instant::now();
        let later = c.allreduce(&mut v, ReduceOp::Sum);
        assert!(
            t.elapsed() < Duration::from_millis(100),
            "later operations fail fast"
        );
        assert!(later.is_err());
        first
    });
    for (r, res) in results.into_iter().enumerate().filter(|(r, _)| *r != 1) {
        let e = res.expect_err("allreduce without rank 1 fails");
        assert!(
            matches!(e, CollectiveError::PeerFailed { peer: 1, .. }),
            "rank {r}: {e}"
        );
    }
}

/// Handles are futures too: poll two allreduces from a minimal executor.
#[test]
fn handles_work_as_futures() {
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    fn block_on<F: Future + Unpin>(mut f: F) -> F::Output {
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(v) = std::pin::Pin::new(&mut f).poll(&mut cx) {
                return v;
            }
            std::thread::park();
        }
    }
    let out = run_world(&separate_hosts(3), &test_options(), |c| {
        let a = c.allreduce_async(vec![c.rank() as i32; 5000], ReduceOp::Sum);
        let mut seen = (0, 0);
        while !a.is_finished() {
            seen = a.progress();
            std::thread::yield_now();
        }
        let (done, total) = a.progress();
        assert!(
            done == total && total > 0 && seen.0 <= total,
            "progress {seen:?} then {done}/{total}"
        );
        let b = c.allreduce_async(vec![1u8; 7], ReduceOp::Max);
        (block_on(a).expect("a"), block_on(b).expect("b"))
    });
    for (a, b) in out {
        assert!(a.iter().all(|x| *x == 3) && b == vec![1u8; 7]);
    }
}

/// A peer that stops making progress (alive, connections open) is named after the
/// configured timeout; it learns of the failure as soon as it comes back.
#[test]
fn silent_peer_times_out_and_is_named() {
    let opts = causeway_collective::Options {
        timeout: Duration::from_millis(400),
        ..test_options()
    };
    let out = run_world(&separate_hosts(2), &opts, |c| {
        let mut v = vec![1.0f64; 1000];
        if c.rank() == 1 {
            std::thread::sleep(Duration::from_millis(3000));
        }
        let t = Instant::now();
        (c.allreduce(&mut v, ReduceOp::Sum), t.elapsed())
    });
    let (r0, t0) = &out[0];
    assert!(
        matches!(r0, Err(CollectiveError::PeerTimeout { peers, .. }) if peers == &vec![1]),
        "rank 0: {r0:?}"
    );
    assert!(
        *t0 >= Duration::from_millis(400) && *t0 < Duration::from_millis(1400),
        "{t0:?}"
    );
    let (r1, t1) = &out[1];
    assert!(
        r1.is_err() && *t1 < Duration::from_millis(300),
        "rank 1 fails fast: {r1:?} after {t1:?}"
    );
}

/// The binaries refuse a bad rate, size or duration (flag or environment)
/// with one line naming it and status 1, before joining anything.
#[test]
fn binaries_refuse_bad_unit_values_in_one_line_with_status_1() {
    let bench = env!("CARGO_BIN_EXE_causeway-allreduce-bench");
    let world = [
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "1"),
    ];
    /// Arguments, environment, expected error.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 4] = [
        (
            &["--sizes", "64kb,1xb"],
            &[],
            "error: --sizes: '1xb' is not a size",
        ),
        (
            &["--sizes", "4kb"],
            &[("CAUSEWAY_TIMEOUT", "20")],
            "CAUSEWAY_TIMEOUT=\"20\" is invalid: '20' is not a duration: a duration needs a unit",
        ),
        (
            &["--sizes", "4kb"],
            &[("CAUSEWAY_CHUNK_BYTES", "1mbit")],
            "CAUSEWAY_CHUNK_BYTES=\"1mbit\" is invalid: '1mbit' is not a size",
        ),
        (
            &["--sizes", "4kb"],
            &[("CAUSEWAY_WAN_MBIT", "200")],
            "CAUSEWAY_WAN_MBIT=\"200\" is invalid: renamed: write a value with a unit, e.g. CAUSEWAY_WAN_RATE=",
        ),
    ];
    for (args, vars, want) in cases {
        let out = Command::new(bench)
            .args(args)
            .env_remove("CAUSEWAY_TIMEOUT")
            .envs(world)
            .envs(vars.iter().copied())
            .output()
            .expect("run the bench");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?} {vars:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(want),
            "want {want:?} in {stderr}"
        );
        assert!(out.stdout.is_empty(), "nothing on stdout: {:?}", out.stdout);
    }
}
