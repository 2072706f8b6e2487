//! Every operation × dtype against a naive reference, world sizes 1–8, over TCP,
//! shared memory, and a two-domain mix of both; sizes from proptest plus the edge
//! cases 0, 1 and sizes not divisible by the world size.

use crate::world::*;
use causeway_collective::cost::CostModel;
use causeway_collective::schedule::sim::LinkCost;
use causeway_collective::{Algorithm, Communicator, Element, Options, ReduceOp};
use half::{bf16, f16};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

/// Deterministic per-(seed, rank, index) values, small enough that every sum and
/// product is exact in every dtype (so the reference's order does not matter).
fn small(seed: u64, rank: usize, i: usize, prod: bool) -> i64 {
    let mut x = seed ^ ((rank as u64) << 32) ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 29;
    if prod {
        [-2, -1, 1, 2][(x % 4) as usize]
    } else {
        (x % 17) as i64 - 8
    }
}

pub(crate) trait TestElem: Element + Copy {
    fn from_i64(v: i64) -> Self;
    fn reference(op: ReduceOp, vals: &[i64], n: usize) -> Self;
}

macro_rules! float_elem {
    ($t:ty, $from:expr, $avg:expr) => {
        impl TestElem for $t {
            fn from_i64(v: i64) -> Self {
                $from(v as f64)
            }
            fn reference(op: ReduceOp, vals: &[i64], n: usize) -> Self {
                let f = |v: i64| v as f64;
                match op {
                    ReduceOp::Sum => $from(vals.iter().copied().map(f).sum()),
                    ReduceOp::Avg => $avg($from(vals.iter().copied().map(f).sum()), n),
                    ReduceOp::Min => $from(f(*vals.iter().min().expect("nonempty"))),
                    ReduceOp::Max => $from(f(*vals.iter().max().expect("nonempty"))),
                    ReduceOp::Prod => $from(vals.iter().copied().map(f).product()),
                }
            }
        }
    };
}
float_elem!(f32, |v: f64| v as f32, |s: f32, n| s / n as f32);
float_elem!(f64, |v: f64| v, |s: f64, n| s / n as f64);
float_elem!(f16, f16::from_f64, |s: f16, n| f16::from_f32(
    s.to_f32() / n as f32
));
float_elem!(bf16, bf16::from_f64, |s: bf16, n| bf16::from_f32(
    s.to_f32() / n as f32
));

macro_rules! int_elem {
    ($t:ty) => {
        impl TestElem for $t {
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn reference(op: ReduceOp, vals: &[i64], n: usize) -> Self {
                let it = vals.iter().map(|v| *v as $t);
                match op {
                    ReduceOp::Sum => it.fold(0, <$t>::wrapping_add),
                    ReduceOp::Avg => {
                        (it.fold(0 as $t, <$t>::wrapping_add) as i128 / n as i128) as $t
                    }
                    ReduceOp::Min => it.min().expect("nonempty"),
                    ReduceOp::Max => it.max().expect("nonempty"),
                    ReduceOp::Prod => it.fold(1, <$t>::wrapping_mul),
                }
            }
        }
    };
}
int_elem!(i32);
int_elem!(i64);
int_elem!(u8);

fn input<T: TestElem>(seed: u64, rank: usize, len: usize, prod: bool) -> Vec<T> {
    (0..len)
        .map(|i| T::from_i64(small(seed, rank, i, prod)))
        .collect()
}

fn expected<T: TestElem>(op: ReduceOp, seed: u64, n: usize, len: usize) -> Vec<T> {
    let prod = op == ReduceOp::Prod;
    (0..len)
        .map(|i| {
            let vals: Vec<i64> = (0..n).map(|r| small(seed, r, i, prod)).collect();
            T::reference(op, &vals, n)
        })
        .collect()
}

fn eq<T: TestElem>(got: &[T], want: &[T], what: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        bytemuck::cast_slice::<T, u8>(got) == bytemuck::cast_slice::<T, u8>(want),
        "{}: got {:?}, want {:?}",
        what,
        got,
        want
    );
    Ok(())
}

/// One case of every operation for dtype `T`.
pub(crate) fn all_ops<T: TestElem>(
    c: &Communicator,
    len: usize,
    seed: u64,
) -> Result<(), TestCaseError> {
    let (n, r) = (c.world_size(), c.rank());
    let step = std::cell::Cell::new(0);
    let tag = |what: &str| {
        step.set(step.get() + 1);
        format!(
            "{what} #{} {} len={len} n={n} rank={r}",
            step.get(),
            std::any::type_name::<T>()
        )
    };
    for op in ReduceOp::ALL {
        let prod = op == ReduceOp::Prod;
        let mut buf = input::<T>(seed, r, len, prod);
        c.allreduce(&mut buf, op)
            .map_err(|e| TestCaseError::fail(format!("{}: {e}", tag("op"))))?;
        let want = expected::<T>(op, seed, n, len);
        eq(&buf, &want, &tag(&format!("allreduce {op:?}")))?;

        let send = input::<T>(seed, r, len, prod);
        let mut shard = vec![T::zeroed(); c.shard(len, r).len()];
        c.reduce_scatter(&send, &mut shard, op)
            .map_err(|e| TestCaseError::fail(format!("{}: {e}", tag("op"))))?;
        eq(
            &shard,
            &want[c.shard(len, r)],
            &tag(&format!("reduce_scatter {op:?}")),
        )?;
    }
    // Out-of-place and asynchronous allreduce, two in flight at once.
    let send = input::<T>(seed, r, len, false);
    let mut recv = vec![T::zeroed(); len];
    c.allreduce_into(&send, &mut recv, ReduceOp::Sum)
        .map_err(|e| TestCaseError::fail(format!("{}: {e}", tag("op"))))?;
    let want = expected::<T>(ReduceOp::Sum, seed, n, len);
    eq(&recv, &want, &tag("allreduce_into"))?;
    let h1 = c.allreduce_async(input::<T>(seed, r, len, false), ReduceOp::Sum);
    let h2 = c.allreduce_async(input::<T>(seed ^ 1, r, len, false), ReduceOp::Max);
    let (a, b) = (h1.wait(), h2.wait());
    eq(
        &a.map_err(|e| TestCaseError::fail(format!("{}: {e}", tag("op"))))?,
        &want,
        &tag("allreduce_async 1"),
    )?;
    eq(
        &b.map_err(|e| TestCaseError::fail(format!("{}: {e}", tag("op"))))?,
        &expected::<T>(ReduceOp::Max, seed ^ 1, n, len),
        &tag("allreduce_async 2"),
    )?;

    let mut rs = input::<T>(seed, r, len, false);
    c.reduce_scatter_in_place(&mut rs, ReduceOp::Sum)
        .map_err(|e| TestCaseError::fail(format!("{}: {e}", tag("op"))))?;
    eq(
        &rs[c.shard(len, r)],
        &want[c.shard(len, r)],
        &tag("reduce_scatter_in_place"),
    )?;

    let root = (seed as usize) % n;
    let mut b = input::<T>(seed, r, len, false);
    c.broadcast(&mut b, root)
        .map_err(|e| TestCaseError::fail(format!("{}: {e}", tag("op"))))?;
    eq(&b, &input::<T>(seed, root, len, false), &tag("broadcast"))?;

    let mine = input::<T>(seed, r, len, false);
    let mut all = vec![T::zeroed(); len * n];
    c.allgather(&mine, &mut all)
        .map_err(|e| TestCaseError::fail(format!("{}: {e}", tag("op"))))?;
    let want_all: Vec<T> = (0..n)
        .flat_map(|q| input::<T>(seed, q, len, false))
        .collect();
    eq(&all, &want_all, &tag("allgather"))?;
    let mut inplace = vec![T::from_i64(99); len * n];
    inplace[r * len..(r + 1) * len].copy_from_slice(&mine);
    c.allgather_in_place(&mut inplace)
        .map_err(|e| TestCaseError::fail(format!("{}: {e}", tag("op"))))?;
    eq(&inplace, &want_all, &tag("allgather_in_place"))?;
    c.barrier()
        .map_err(|e| TestCaseError::fail(format!("{}: {e}", tag("op"))))?;
    Ok(())
}

/// The edge sizes, then random cases drawn from `seed`: the same on every
/// rank, so every rank draws the same cases. No shrinking, which would
/// diverge between ranks. A runner per dtype: one runner counts its
/// successes across `run` calls, so a shared one ran cases for the first
/// dtype only.
fn run_dtype<T: TestElem>(c: &Communicator, seed: u8) {
    let n = c.world_size();
    for len in [0, 1, n + 1, 3 * n - 1, 37] {
        all_ops::<T>(c, len, len as u64 * 7919).unwrap_or_else(|e| panic!("edge size {len}: {e}"));
    }
    let cfg = Config {
        cases: 2,
        max_shrink_iters: 0,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]);
    TestRunner::new_with_rng(cfg, rng)
        .run(&(0usize..300, any::<u64>()), |(len, seed)| {
            all_ops::<T>(c, len, seed)
        })
        .unwrap_or_else(|e| panic!("rank {}: {e}", c.rank()));
}

fn every_dtype(c: &Communicator) {
    run_dtype::<f32>(c, 1);
    run_dtype::<f64>(c, 2);
    run_dtype::<f16>(c, 3);
    run_dtype::<bf16>(c, 4);
    run_dtype::<i32>(c, 5);
    run_dtype::<i64>(c, 6);
    run_dtype::<u8>(c, 7);
}

/// Ring allreduce and scatter-allgather broadcast: costs that make bandwidth dominate.
fn bandwidth_bound() -> Options {
    let lc = LinkCost {
        alpha: 1e-9,
        beta: 1e-3,
    };
    Options {
        cost: CostModel {
            intra_host: lc,
            intra_domain: lc,
            inter_domain: lc,
        },
        ..test_options()
    }
}

#[test]
fn tcp_flat_ring_world_1_to_8() {
    for n in 1..=8 {
        run_world(&separate_hosts(n), &bandwidth_bound(), every_dtype);
    }
}

#[test]
fn shared_memory_tree_world_1_to_8() {
    let opts = Options {
        algorithm: Some(Algorithm::Tree),
        ..test_options()
    };
    for n in 1..=8 {
        run_world(&one_host(n), &opts, every_dtype);
    }
}

#[test]
fn two_domains_hierarchical_world_1_to_8() {
    let opts = Options {
        algorithm: Some(Algorithm::Hierarchical),
        ..test_options()
    };
    for n in 1..=8 {
        run_world(&two_domains(n), &opts, every_dtype);
    }
}

/// Every transfer across domains sent twice (on the latency connection and
/// a bulk one, `wan_duplicate_bytes`): the receivers keep the first copy of
/// each frame and drop the other, within its operation or after it; the
/// metrics count the dropped copies.
#[test]
fn two_domains_with_every_wan_transfer_sent_twice() {
    let opts = Options {
        algorithm: Some(Algorithm::Hierarchical),
        latency_bytes: usize::MAX,
        wan_duplicate_bytes: usize::MAX,
        metrics_addr: Some("127.0.0.1:0".parse().expect("addr")),
        ..test_options()
    };
    for n in [2, 3, 5] {
        let dropped = run_world(&two_domains(n), &opts, |c| {
            every_dtype(c);
            let text = crate::metrics::scrape(c.metrics_addr().expect("metrics served"));
            let name = "causeway_wan_copies_dropped_total";
            let by_rank = crate::metrics::sum_by(&text, name, "rank");
            by_rank.get(&c.rank().to_string()).copied().unwrap_or(0.0)
        });
        eprintln!("world of {n}: copies dropped per rank {dropped:?}");
        assert!(
            dropped.iter().sum::<f64>() > 0.0,
            "world of {n}: no copy dropped: {dropped:?}"
        );
    }
}

/// Random (inexact) floats: every rank must end with the same bits.
#[test]
fn float_results_are_bit_identical_on_every_rank() {
    for (layout, algo) in [
        (two_domains(6), Algorithm::Hierarchical),
        (separate_hosts(5), Algorithm::Ring),
        (one_host(4), Algorithm::Tree),
    ] {
        let opts = Options {
            algorithm: Some(algo),
            ..test_options()
        };
        let out = run_world(&layout, &opts, |c| {
            let v: Vec<f32> = (0..1000)
                .map(|i| ((i * 7 + c.rank() * 13) as f32).sin() * 1e3)
                .collect();
            let w: Vec<bf16> = v.iter().map(|x| bf16::from_f32(*x)).collect();
            (
                c.allreduce_async(v, ReduceOp::Sum).wait().expect("f32"),
                c.allreduce_async(w, ReduceOp::Avg).wait().expect("bf16"),
            )
        });
        for o in &out[1..] {
            assert!(
                bytemuck::cast_slice::<f32, u8>(&o.0) == bytemuck::cast_slice::<f32, u8>(&out[0].0),
                "{algo:?} f32"
            );
            assert!(
                bytemuck::cast_slice::<bf16, u8>(&o.1)
                    == bytemuck::cast_slice::<bf16, u8>(&out[0].1),
                "{algo:?} bf16"
            );
        }
    }
}

/// A blocking call sends settled ranges straight from the caller's buffer
/// (no copy into a pool buffer) and returns only once they are written: the
/// callers overwrite their buffers the moment a call returns, and every rank
/// must still get what was there. Over TCP, shared memory, and two domains.
#[test]
fn a_buffer_may_be_reused_the_moment_its_call_returns() {
    const LEN: usize = 1 << 20; // f32: 4 MiB
    let worlds = [separate_hosts(3), one_host(3), two_domains(4)];
    // Frames of 256 KiB (the other tests' 64 bytes would make 16,384
    // frames per chunk of the buffer), copied below 32 KiB.
    let opts = Options {
        chunk_bytes: 256 << 10,
        window: Options::default().window,
        ..test_options()
    };
    for world in &worlds {
        let before = causeway_collective::pool::lent_bytes();
        run_world(world, &opts, |c| {
            let (me, n) = (c.rank(), c.world_size());
            let mut buf = vec![0f32; LEN];
            for round in 0..3usize {
                let v = (round * 10 + 1) as f32;
                let root = round % n;
                if me == root {
                    buf.iter_mut()
                        .enumerate()
                        .for_each(|(i, x)| *x = v + (i % 1000) as f32);
                }
                c.broadcast(&mut buf, root).expect("broadcast");
                let bad = buf
                    .iter()
                    .enumerate()
                    .find(|&(i, x)| *x != v + (i % 1000) as f32);
                assert!(bad.is_none(), "round {round}: rank {me} got {bad:?}");
                buf.iter_mut().for_each(|x| *x = -7.0);
                buf.iter_mut().for_each(|x| *x = (me + 1) as f32);
                c.allreduce(&mut buf, ReduceOp::Sum).expect("allreduce");
                let want = (n * (n + 1) / 2) as f32;
                assert!(
                    buf.iter().all(|x| *x == want),
                    "round {round}: rank {me} sum"
                );
                buf.iter_mut().for_each(|x| *x = -7.0);
            }
        });
        let lent = causeway_collective::pool::lent_bytes() - before;
        eprintln!(
            "{} ranks: {lent} payload bytes sent from the callers' buffers",
            world.len()
        );
        assert!(lent > 0, "settled ranges went from the callers' buffers");
    }
}

/// An asynchronous call sends from the vector it was given, as a blocking
/// call does from the caller's slice, and hands the vector back only once
/// those sends are written: each caller overwrites it at once, and every
/// rank must still get what was there. Besides the settled half it sends
/// back inside its domain, a rank of a hierarchical allreduce sends the half
/// its domain peer reduces uncopied too (that peer alone overwrites it, with
/// its answer); only the half across the WAN, reduced in place in the same
/// step, is copied.
#[test]
fn an_async_call_sends_from_its_vector_and_hands_it_back_written() {
    const LEN: usize = 1 << 20; // f32: 4 MiB
    const ROUNDS: usize = 3;
    let opts = Options {
        algorithm: Some(Algorithm::Hierarchical),
        chunk_bytes: 256 << 10,
        window: Options::default().window,
        ..test_options()
    };
    let before = causeway_collective::pool::lent_bytes();
    run_world(&two_domains(4), &opts, |c| {
        let (me, n) = (c.rank(), c.world_size());
        let mut buf = vec![0f32; LEN];
        for round in 0..ROUNDS {
            let base = |r: usize| (r + 1 + round) as f32;
            buf.iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = base(me) + (i % 7) as f32);
            buf = c
                .allreduce_async(buf, ReduceOp::Sum)
                .wait()
                .expect("allreduce");
            let sum: f32 = (0..n).map(base).sum();
            let bad = buf
                .iter()
                .enumerate()
                .find(|&(i, x)| *x != sum + (n * (i % 7)) as f32);
            assert!(bad.is_none(), "round {round}: rank {me} got {bad:?}");
            buf.iter_mut().for_each(|x| *x = -7.0);
        }
    });
    let lent = causeway_collective::pool::lent_bytes() - before;
    // Per rank and call: half the buffer to the domain peer, half back.
    let want = (4 * ROUNDS * LEN * 4) as u64;
    eprintln!("{lent} payload bytes sent from the vectors (at least {want} expected)");
    assert!(lent >= want, "{lent} bytes lent, {want} expected");
}
