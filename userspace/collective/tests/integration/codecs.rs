//! WAN codecs through real connections: 4 ranks in two domains (each its own
//! host, so every link is TCP and two of them cross domains). Every rank ends
//! bit-identical, the error against the exact result stays within the codec's
//! bound, lossless codecs change nothing, and a codec mismatch or a corrupt
//! payload fails the operation with a typed error while the process goes on.

use crate::hostile::rank_zero_calling;
use crate::world::*;
use causeway_collective::codec::{CodecSpec, Header, Rounding};
use causeway_collective::wire::{Call, CallKind, Codec, FrameHeader, FrameKind};
use causeway_collective::{CallOptions, CollectiveError, DType, Options, ReduceOp};

const N: usize = 20_011;

fn value(rank: usize, i: usize) -> f32 {
    let mut x = (rank as u64) << 40 ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 29;
    ((x % 20_001) as f32 / 10_000.0 - 1.0) * if i.is_multiple_of(97) { 40.0 } else { 1.0 }
}

fn layout() -> Layout {
    (0..4)
        .map(|r| (format!("d{}", r / 2), format!("h{r}")))
        .collect()
}

fn opts() -> Options {
    Options {
        chunk_bytes: 8192,
        ..test_options()
    }
}

fn allreduce(spec: CodecSpec) -> Vec<Vec<f32>> {
    run_world(&layout(), &opts(), |c| {
        let mut v: Vec<f32> = (0..N).map(|i| value(c.rank(), i)).collect();
        c.allreduce_with(&mut v, ReduceOp::Sum, &CallOptions::codec(spec))
            .unwrap_or_else(|e| panic!("rank {}: {spec}: {e}", c.rank()));
        v
    })
}

fn identical(out: &[Vec<f32>], what: &str) {
    for (r, v) in out.iter().enumerate() {
        let same = v
            .iter()
            .zip(&out[0])
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{what}: rank {r} differs from rank 0");
    }
}

/// Each domain's exact partial sum (what crosses the WAN), in f64.
fn partials(i: usize) -> [f64; 2] {
    [0, 1].map(|d| (0..2).map(|k| f64::from(value(2 * d + k, i))).sum())
}

#[test]
fn lossy_allreduce_is_bit_identical_on_every_rank_and_within_the_bound() {
    let int8 = CodecSpec::Int8 {
        block: 256,
        rounding: Rounding::Nearest,
    };
    let plain = allreduce(CodecSpec::None);
    for spec in [CodecSpec::Bf16, CodecSpec::Fp16, int8] {
        let out = allreduce(spec);
        identical(&out, &spec.to_string());
        assert_ne!(out[0], plain[0], "{spec} was applied");
        // Largest partial magnitude (int8's block maxima are at most this).
        let pmax = (0..N)
            .flat_map(|i| partials(i).map(f64::abs))
            .fold(0.0, f64::max);
        for (i, got) in out[0].iter().enumerate() {
            let p = partials(i);
            let exact = p[0] + p[1];
            let bound = match spec {
                CodecSpec::Bf16 => (p[0].abs() + p[1].abs()) * 2f64.powi(-8),
                CodecSpec::Fp16 => (p[0].abs() + p[1].abs()) * 2f64.powi(-11),
                _ => 2.0 * pmax / 254.0,
            } + 1e-5 * (1.0 + exact.abs());
            let err = (f64::from(*got) - exact).abs();
            assert!(
                err <= bound,
                "{spec} element {i}: {got} vs {exact} (bound {bound})"
            );
        }
    }
    let topk = allreduce(CodecSpec::TopK {
        per_million: 10_000,
    });
    identical(&topk, "topk");
    let kept = topk[0].iter().filter(|v| **v != 0.0).count();
    assert!(kept > 0 && kept <= 2 * N / 100 + 4, "top-k 1 % kept {kept}");
}

#[test]
fn lossless_codecs_change_no_bit() {
    let plain = allreduce(CodecSpec::None);
    for spec in [CodecSpec::Lz4, CodecSpec::Zstd { level: 3 }] {
        assert_eq!(allreduce(spec), plain, "{spec}");
    }
    let layout = layout();
    let out = run_world(&layout, &opts(), |c| {
        let o = CallOptions::codec(CodecSpec::Zstd { level: 1 });
        let mut b: Vec<f32> = (0..N).map(|i| value(c.rank(), i)).collect();
        c.broadcast_with(&mut b, 3, &o).expect("broadcast");
        let mut g = vec![0f32; 4 * 1000];
        for (i, x) in g[c.rank() * 1000..][..1000].iter_mut().enumerate() {
            *x = value(c.rank(), i);
        }
        c.allgather_in_place_with(&mut g, &CallOptions::codec(CodecSpec::Lz4))
            .expect("allgather");
        (b, g)
    });
    for (b, g) in &out {
        assert!(b
            .iter()
            .enumerate()
            .all(|(i, x)| x.to_bits() == value(3, i).to_bits()));
        for r in 0..4 {
            assert!((0..1000).all(|i| g[r * 1000 + i].to_bits() == value(r, i).to_bits()));
        }
    }
}

#[test]
fn reduce_scatter_with_int8_feedback_stays_within_the_bound() {
    let layout = layout();
    let spec = CodecSpec::Int8 {
        block: 64,
        rounding: Rounding::Stochastic,
    };
    let out = run_world(&layout, &opts(), |c| {
        let o = CallOptions::codec(spec).with_feedback(1);
        let mut v: Vec<f32> = (0..N).map(|i| value(c.rank(), i)).collect();
        c.reduce_scatter_in_place_with(&mut v, ReduceOp::Sum, &o)
            .expect("reduce-scatter");
        c.reset_feedback(Some(1)).expect("reset");
        (c.shard(N, c.rank()), v)
    });
    for (shard, v) in out {
        for i in shard {
            let exact: f64 = (0..4).map(|r| f64::from(value(r, i))).sum();
            // Two WAN hops of a ring over 4 ranks, each ≤ max|block|/127 (stochastic) ≤ 3·40/127.
            assert!(
                (f64::from(v[i]) - exact).abs() <= 2.0 * 160.0 / 127.0,
                "element {i}"
            );
        }
    }
}

#[test]
fn lossy_codecs_where_they_do_not_apply_are_refused_and_the_communicator_goes_on() {
    let layout = layout();
    let errs = run_world(&layout, &opts(), |c| {
        let o = CallOptions::codec(CodecSpec::Bf16);
        let mut b = vec![1f32; 64];
        let e1 = c
            .broadcast_with(&mut b, 0, &o)
            .expect_err("lossy broadcast");
        let mut d = vec![1f64; 64];
        let e2 = c
            .allreduce_with(&mut d, ReduceOp::Sum, &o)
            .expect_err("f64");
        let mut v = vec![1f32; 64];
        c.allreduce_with(&mut v, ReduceOp::Sum, &o)
            .expect("still usable");
        assert!(v.iter().all(|x| *x == 4.0));
        (e1, e2)
    });
    for (e1, e2) in errs {
        assert!(matches!(e1, CollectiveError::InvalidArgument(_)), "{e1}");
        assert!(matches!(e2, CollectiveError::InvalidArgument(_)), "{e2}");
    }
}

#[test]
fn a_lossy_default_compresses_f32_and_leaves_other_dtypes_exact() {
    let o = Options {
        wan_codec: CodecSpec::Bf16,
        ..opts()
    };
    let out = run_world(&layout(), &o, |c| {
        // Odd integers above 2^24 that bf16 (8 significant bits) cannot hold.
        let mut ints: Vec<i64> = (0..N as i64).map(|i| (1 << 30) + 2 * i + 1).collect();
        c.allreduce(&mut ints, ReduceOp::Sum)
            .expect("i64 under a lossy default");
        let mut doubles = vec![1.0f64 + 2f64.powi(-40); 64];
        c.allreduce(&mut doubles, ReduceOp::Sum)
            .expect("f64 under a lossy default");
        let mut v: Vec<f32> = (0..N).map(|i| value(c.rank(), i)).collect();
        c.allreduce(&mut v, ReduceOp::Sum)
            .expect("f32 under a lossy default");
        (ints, doubles, v)
    });
    let exact: Vec<f32> = (0..N)
        .map(|i| (0..4).map(|r| f64::from(value(r, i))).sum::<f64>() as f32)
        .collect();
    for (r, (ints, doubles, v)) in out.iter().enumerate() {
        for (i, x) in ints.iter().enumerate() {
            assert_eq!(*x, 4 * ((1 << 30) + 2 * i as i64 + 1), "rank {r} i64[{i}]");
        }
        assert!(
            doubles.iter().all(|d| *d == 4.0 + 2f64.powi(-38)),
            "rank {r} f64"
        );
        // The f32 sum went through bf16 across the WAN: not exact, but close.
        let differs = v.iter().zip(&exact).filter(|(a, b)| a != b).count();
        assert!(
            differs > N / 2,
            "rank {r}: only {differs} of {N} values changed: not compressed?"
        );
        // bf16 rounds each domain's partial sum to 8 significant bits.
        for (i, (a, b)) in v.iter().zip(&exact).enumerate() {
            let bound = partials(i).iter().map(|p| p.abs()).sum::<f64>() / 256.0 + 1e-6;
            let err = (f64::from(*a) - f64::from(*b)).abs();
            assert!(err <= bound, "rank {r} [{i}]: error {err} > {bound}");
        }
    }
    identical(
        &out.iter().map(|o| o.2.clone()).collect::<Vec<_>>(),
        "bf16 default",
    );
}

#[test]
fn a_codec_mismatch_between_ranks_is_a_typed_error_on_every_rank() {
    let layout = layout();
    // Same codec id, other parameters: the payload header tells.
    let errs = run_world(&layout, &opts(), |c| {
        let block = if c.rank() < 2 { 64 } else { 128 };
        let o = CallOptions::codec(CodecSpec::Int8 {
            block,
            rounding: Rounding::Nearest,
        });
        let mut v = vec![1f32; 4096];
        c.allreduce_with(&mut v, ReduceOp::Sum, &o)
            .expect_err("mismatch")
    });
    let typed = errs
        .iter()
        .filter(|e| matches!(e, CollectiveError::Codec { .. }) && e.to_string().contains("int8:"))
        .count();
    assert!(typed >= 1, "{errs:?}");
    // Another codec: the call signature differs.
    let errs = run_world(&layout, &opts(), |c| {
        let spec = if c.rank() < 2 {
            CodecSpec::Bf16
        } else {
            CodecSpec::Fp16
        };
        let mut v = vec![1f32; 4096];
        c.allreduce_with(&mut v, ReduceOp::Sum, &CallOptions::codec(spec))
            .expect_err("mismatch")
    });
    for e in &errs {
        assert!(matches!(e, CollectiveError::CallMismatch { .. }), "{e}");
    }
}

/// A data frame for rank 0's first receive (lane 0, step 0: the cross-domain exchange).
fn poisoned(spec: CodecSpec, payload: &[u8]) -> Vec<u8> {
    let h = FrameHeader {
        kind: FrameKind::Data,
        op: 0,
        lane: 0,
        step: 0,
        offset: 0,
        len: payload.len() as u32,
        call: Some(Call {
            kind: CallKind::Allreduce,
            dtype: DType::F32,
            count: 1000,
            reduce: ReduceOp::Sum,
            root: 0,
            codec: Codec::of(spec),
        }),
    };
    let mut bytes = h.encode().to_vec();
    bytes.extend_from_slice(payload);
    bytes
}

#[test]
fn a_corrupt_payload_across_a_real_connection_is_a_typed_error() {
    let call = |spec: CodecSpec| {
        move |c: &causeway_collective::Communicator, v: &mut [f32]| {
            c.allreduce_with(v, ReduceOp::Sum, &CallOptions::codec(spec))
        }
    };
    // A bf16 payload whose body is shorter than its header claims.
    let mut p = Header {
        spec: CodecSpec::Bf16,
        raw_len: 8,
    }
    .encode()
    .to_vec();
    p.extend_from_slice(&[1, 2, 3]);
    let err = rank_zero_calling(poisoned(CodecSpec::Bf16, &p), call(CodecSpec::Bf16));
    assert!(
        matches!(&err, CollectiveError::Codec { peer: 1, .. }),
        "{err}"
    );
    // A payload that claims to inflate far past one frame: refused before allocating.
    let mut p = Header {
        spec: CodecSpec::Lz4,
        raw_len: u32::MAX,
    }
    .encode()
    .to_vec();
    p.extend_from_slice(&[0x1f, 0, 0, 0]);
    let err = rank_zero_calling(poisoned(CodecSpec::Lz4, &p), call(CodecSpec::Lz4));
    assert!(
        matches!(&err, CollectiveError::Codec { peer: 1, .. })
            && err.to_string().contains("expected"),
        "{err}"
    );
    // int8 with other parameters than rank 0 asked for.
    let int8 = |block| CodecSpec::Int8 {
        block,
        rounding: Rounding::Nearest,
    };
    let mut p = Header {
        spec: int8(32),
        raw_len: 8,
    }
    .encode()
    .to_vec();
    p.extend_from_slice(&[0; 6]);
    let err = rank_zero_calling(poisoned(int8(32), &p), call(int8(64)));
    assert!(
        matches!(&err, CollectiveError::Codec { peer: 1, .. }),
        "{err}"
    );
}
