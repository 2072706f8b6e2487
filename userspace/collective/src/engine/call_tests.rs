//! Ranks that make different calls (issue 19): every data frame carries the
//! call's signature, so a chunk of a different call fails the operation on the
//! rank that receives it, which tells every other rank (an Abort naming both
//! calls). Each case runs 4 ranks in two domains over loopback TCP.

use std::time::Duration;

use crate::error::CollectiveError;
use crate::store::StoreServer;
use crate::{Communicator, Options, ReduceOp};

fn options() -> Options {
    Options {
        timeout: Duration::from_secs(10),
        rendezvous_timeout: Duration::from_secs(20),
        chunk_bytes: 256,
        window: 3,
        probe: false,
        wan_warm_bytes: 0,
        ..Options::default()
    }
}

/// Runs `f(rank, comm)` on 4 ranks; returns each rank's outcome.
fn world<R: Send>(
    f: impl Fn(usize, &Communicator) -> Result<R, CollectiveError> + Sync,
) -> Vec<Result<R, CollectiveError>> {
    let server = StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("store");
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|r| {
                let b = Communicator::builder(r, 4)
                    .master(server.addr())
                    .host_store(false)
                    .domain(format!("d{}", r / 2))
                    .host_id(format!("h{r}"))
                    .options(options());
                // No start-up warm-up (`wan_warm_bytes: 0`): warm-up pairs
                // finish at different times, and a rank still warming up when
                // the odd rank's Abort arrives has not made the call, so it
                // cannot tell which rank is odd (it fails `build` naming the
                // noticer's counterpart). Here every rank reaches the call.
                s.spawn(move || f(r, &b.build()?))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

/// Every rank failed with the typed [`CollectiveError::CallMismatch`] naming
/// both calls; at least one noticed it itself (the others were told by an Abort).
fn assert_named<R: std::fmt::Debug>(out: &[Result<R, CollectiveError>], a: &str, b: &str) {
    for (r, res) in out.iter().enumerate() {
        let Err(e) = res else {
            panic!("rank {r} returned Ok({res:?}) from mismatched calls");
        };
        assert!(
            matches!(e, CollectiveError::CallMismatch { .. }),
            "rank {r}: {e}"
        );
        let text = e.to_string();
        assert!(
            text.contains(a) && text.contains(b),
            "rank {r}: {text} should name {a} and {b}"
        );
    }
    assert!(
        out.iter().any(|res| matches!(
            res,
            Err(CollectiveError::CallMismatch {
                reported_by: None,
                ..
            })
        )),
        "{out:?}"
    );
}

#[test]
fn same_width_dtypes_fail_on_every_rank() {
    let out = world(|r, c| {
        if r == 3 {
            c.allreduce_async(vec![1i32; 4096], ReduceOp::Sum)
                .wait()
                .map(|_| ())
        } else {
            c.allreduce_async(vec![1.0f32; 4096], ReduceOp::Sum)
                .wait()
                .map(|_| ())
        }
    });
    assert_named(
        &out,
        "allreduce(i32, 4096, sum)",
        "allreduce(f32, 4096, sum)",
    );
}

#[test]
fn different_operations_fail_on_every_rank() {
    let out = world(|r, c| {
        if r == 1 {
            c.broadcast_async(vec![1.0f32; 4096], 0)?.wait().map(|_| ())
        } else {
            c.allreduce_async(vec![1.0f32; 4096], ReduceOp::Sum)
                .wait()
                .map(|_| ())
        }
    });
    assert_named(
        &out,
        "broadcast(f32, 4096, root 0)",
        "allreduce(f32, 4096, sum)",
    );
}

#[test]
fn different_counts_fail_on_every_rank() {
    let out = world(|r, c| {
        let n = if r == 2 { 4000 } else { 4096 };
        c.allreduce_async(vec![1.0f32; n], ReduceOp::Sum)
            .wait()
            .map(|_| ())
    });
    assert_named(
        &out,
        "allreduce(f32, 4000, sum)",
        "allreduce(f32, 4096, sum)",
    );
}

#[test]
fn different_reductions_fail_on_every_rank() {
    let out = world(|r, c| {
        let op = if r == 0 { ReduceOp::Max } else { ReduceOp::Sum };
        c.allreduce_async(vec![1.0f32; 4096], op).wait().map(|_| ())
    });
    assert_named(
        &out,
        "allreduce(f32, 4096, max)",
        "allreduce(f32, 4096, sum)",
    );
}

#[test]
fn different_roots_fail_on_every_rank() {
    // The root in rank 0's view hears from nobody during the broadcast itself:
    // the confirmation lane is what makes it fail too.
    let out = world(|r, c| {
        let root = if r == 3 { 1 } else { 0 };
        c.broadcast_async(vec![1.0f32; 4096], root)?
            .wait()
            .map(|_| ())
    });
    assert_named(
        &out,
        "broadcast(f32, 4096, root 1)",
        "broadcast(f32, 4096, root 0)",
    );
}

#[test]
fn a_broadcast_leaf_that_calls_allreduce_fails_every_rank() {
    let out = world(|r, c| {
        if r == 3 {
            c.allreduce_async(vec![1.0f32; 4096], ReduceOp::Sum)
                .wait()
                .map(|_| ())
        } else {
            c.broadcast_async(vec![1.0f32; 4096], 0)?.wait().map(|_| ())
        }
    });
    assert_named(
        &out,
        "broadcast(f32, 4096, root 0)",
        "allreduce(f32, 4096, sum)",
    );
}

#[test]
fn an_empty_call_against_a_full_one_fails_every_rank() {
    let out = world(|r, c| {
        let n = if r == 3 { 0 } else { 4096 };
        c.allreduce_async(vec![1.0f32; n], ReduceOp::Sum)
            .wait()
            .map(|_| ())
    });
    assert_named(&out, "allreduce(f32, 0, sum)", "allreduce(f32, 4096, sum)");
}

#[test]
fn matching_calls_after_matching_calls_still_work() {
    // The signature must not disturb well-formed sequences of different calls.
    let out = world(|r, c| {
        let v = c
            .allreduce_async(vec![r as f32; 1000], ReduceOp::Sum)
            .wait()?;
        let b = c.broadcast_async(vec![r as i32; 300], 2)?.wait()?;
        c.barrier()?;
        Ok((v[0], b[0]))
    });
    for res in out {
        assert_eq!(res.expect("matching calls"), (6.0, 2));
    }
}

#[test]
fn a_count_mismatch_blames_the_odd_rank_on_every_other_rank() {
    // Issue 19: a size mismatch used to blame the rank that was right. Rank 2
    // alone calls with 4000 elements: every other rank's error names rank 2.
    for _ in 0..3 {
        let out = world(|r, c| {
            let n = if r == 2 { 4000 } else { 4096 };
            c.allreduce_async(vec![1.0f32; n], ReduceOp::Sum)
                .wait()
                .map(|_| ())
        });
        for (r, res) in out.iter().enumerate().filter(|(r, _)| *r != 2) {
            let e = res.as_ref().expect_err("mismatched counts never return Ok");
            assert_eq!(e.peer(), Some(2), "rank {r}: {e}");
        }
    }
}
