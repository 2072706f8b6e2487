use half::{bf16, f16};
use proptest::prelude::*;

use super::*;

fn bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn round_trip(spec: CodecSpec, x: &[f32], seed: u64) -> Vec<f32> {
    let c = spec.codec().unwrap().unwrap();
    let mut out = Vec::new();
    c.encode(&bytes(x), DType::F32, seed, &mut out).unwrap();
    let mut dst = vec![0u8; 4 * x.len()];
    c.decode(&out, DType::F32, &mut dst).unwrap();
    floats(&dst)
}

const ALL: [CodecSpec; 8] = [
    CodecSpec::Bf16,
    CodecSpec::Fp16,
    CodecSpec::Int8 {
        block: 64,
        rounding: Rounding::Nearest,
    },
    CodecSpec::Int8 {
        block: 7,
        rounding: Rounding::Stochastic,
    },
    CodecSpec::TopK {
        per_million: 10_000,
    },
    CodecSpec::Lz4,
    CodecSpec::Zstd { level: 3 },
    CodecSpec::Zstd { level: 1 },
];

fn specials() -> Vec<f32> {
    vec![
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        0.0,
        1e-45,
        -3e-39,
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
        1.0,
        -65504.0,
        65520.0,
    ]
}

fn same_bits_or_both_nan(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn special_values_survive_each_codec_as_documented() {
    let x = specials();
    for spec in [CodecSpec::Lz4, CodecSpec::Zstd { level: 3 }] {
        assert_eq!(bytes(&round_trip(spec, &x, 0)), bytes(&x), "{spec}");
    }
    let b = round_trip(CodecSpec::Bf16, &x, 0);
    let h = round_trip(CodecSpec::Fp16, &x, 0);
    for (i, &v) in x.iter().enumerate() {
        assert!(
            same_bits_or_both_nan(b[i], bf16::from_f32(v).to_f32()),
            "bf16 {v}"
        );
        assert!(
            same_bits_or_both_nan(h[i], f16::from_f32(v).to_f32()),
            "fp16 {v}"
        );
        if v.is_nan() {
            assert!(b[i].is_nan() && h[i].is_nan());
        }
        if v.is_infinite() || v == 0.0 {
            assert_eq!(b[i].to_bits(), v.to_bits(), "bf16 keeps {v:?}");
            assert_eq!(h[i].to_bits(), v.to_bits(), "fp16 keeps {v:?}");
        }
    }
    assert_eq!(h[9], f32::INFINITY, "fp16 overflows to +Inf");
    assert_eq!(h[13], f32::INFINITY, "65520 rounds to +Inf in fp16");
    // int8: the block holds NaN/Inf, so it goes raw, bit-exact.
    for r in [Rounding::Nearest, Rounding::Stochastic] {
        let q = round_trip(
            CodecSpec::Int8 {
                block: 4,
                rounding: r,
            },
            &x,
            9,
        );
        for (a, b) in x[..4].iter().zip(&q[..4]) {
            assert!(same_bits_or_both_nan(*a, *b));
        }
        // Block of −0, 0, 1e-45, −3e-39: tiny magnitudes go raw too.
        assert_eq!(bytes(&q[4..8]), bytes(&x[4..8]));
    }
    // Top-k keeps the NaN and the infinities first (the largest magnitudes).
    let t = round_trip(
        CodecSpec::TopK {
            per_million: 300_000,
        },
        &x,
        0,
    );
    assert!(t[0].is_nan() && t[1].is_nan() && t[2] == f32::INFINITY && t[3] == f32::NEG_INFINITY);
}

#[test]
fn zero_block_and_single_element_and_empty_round_trip() {
    for spec in ALL {
        assert!(round_trip(spec, &[], 1).is_empty(), "{spec}");
        let z = round_trip(spec, &[0.0; 33], 1);
        assert!(z.iter().all(|v| *v == 0.0), "{spec}");
        let one = round_trip(spec, &[0.75], 1);
        assert!((one[0] - 0.75).abs() <= 0.75 / 254.0, "{spec}: {one:?}");
    }
}

fn tensor() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(
        prop_oneof![
            8 => -1e3f32..1e3,
            2 => -1e-3f32..1e-3,
            1 => -1e30f32..1e30,
        ],
        0..3000,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn bf16_is_bit_exact_with_half_and_within_2_pow_minus_8(bits in prop::collection::vec(any::<u32>(), 0..600)) {
        let x: Vec<f32> = bits.iter().map(|b| f32::from_bits(*b)).collect();
        let y = round_trip(CodecSpec::Bf16, &x, 0);
        for (a, b) in x.iter().zip(&y) {
            prop_assert!(same_bits_or_both_nan(*b, bf16::from_f32(*a).to_f32()));
            if a.is_finite() && a.abs() >= f32::MIN_POSITIVE && a.abs() <= bf16::MAX.to_f32() {
                prop_assert!(((a - b) / a).abs() <= 2f32.powi(-8), "{a} -> {b}");
            }
        }
    }

    #[test]
    fn fp16_within_its_range(x in prop::collection::vec(-70000f32..70000.0, 0..2000), tiny in prop::collection::vec(-1e-4f32..1e-4, 0..200)) {
        let y = round_trip(CodecSpec::Fp16, &x, 0);
        for (a, b) in x.iter().zip(&y) {
            prop_assert!(same_bits_or_both_nan(*b, f16::from_f32(*a).to_f32()));
            if a.abs() >= f16::MIN_POSITIVE.to_f32() && a.abs() <= 65504.0 {
                prop_assert!(((a - b) / a).abs() <= 2f32.powi(-11), "{a} -> {b}");
            } else if a.abs() > 65520.0 {
                prop_assert!(b.is_infinite() && b.signum() == a.signum());
            }
        }
        let y = round_trip(CodecSpec::Fp16, &tiny, 0);
        for (a, b) in tiny.iter().zip(&y) {
            if a.abs() < f16::MIN_POSITIVE.to_f32() {
                prop_assert!((a - b).abs() <= 2f32.powi(-25), "{a} -> {b}");
            }
        }
    }

    #[test]
    fn int8_per_block_error_is_bounded(x in tensor(), block in 1u32..600, seed in any::<u64>(), stochastic in any::<bool>()) {
        let rounding = if stochastic { Rounding::Stochastic } else { Rounding::Nearest };
        let spec = CodecSpec::Int8 { block, rounding };
        let y = round_trip(spec, &x, seed);
        prop_assert_eq!(&y, &round_trip(spec, &x, seed), "deterministic for a seed");
        for (xb, yb) in x.chunks(block as usize).zip(y.chunks(block as usize)) {
            let max = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let bound = if stochastic { max / 127.0 } else { max / 254.0 };
            // One f32 rounding of the product q·scale on top of the quantisation.
            let bound = bound * (1.0 + 1e-6) + max * f32::EPSILON;
            for (a, b) in xb.iter().zip(yb) {
                prop_assert!((a - b).abs() <= bound, "{a} -> {b} (block max {max}, {spec})");
            }
        }
    }

    #[test]
    fn lossless_codecs_are_bit_exact(raw in prop::collection::vec(any::<u8>(), 0..5000), x in tensor()) {
        for spec in [CodecSpec::Lz4, CodecSpec::Zstd { level: 3 }, CodecSpec::Zstd { level: 19 }] {
            let c = spec.codec().unwrap().unwrap();
            for input in [raw.clone(), bytes(&x)] {
                let mut out = Vec::new();
                c.encode(&input, DType::U8, 0, &mut out).unwrap();
                let mut dst = vec![0u8; input.len()];
                c.decode(&out, DType::U8, &mut dst).unwrap();
                prop_assert_eq!(&dst, &input);
            }
        }
    }

    #[test]
    fn topk_keeps_exactly_the_largest(x in tensor(), ppm in 1u32..1_000_000) {
        let y = round_trip(CodecSpec::TopK { per_million: ppm }, &x, 0);
        let k = topk::kept(x.len(), ppm);
        let kept: Vec<usize> = (0..x.len()).filter(|&i| y[i].to_bits() == x[i].to_bits() && x[i] != 0.0).collect();
        prop_assert!(y.iter().zip(&x).all(|(b, a)| *b == 0.0 || b.to_bits() == a.to_bits()));
        prop_assert!(kept.len() <= k);
        let min_kept = kept.iter().map(|&i| x[i].abs()).fold(f32::INFINITY, f32::min);
        let dropped_max = (0..x.len()).filter(|i| y[*i] == 0.0).map(|i| x[i].abs()).fold(0f32, f32::max);
        prop_assert!(kept.is_empty() || dropped_max <= min_kept);
    }

    #[test]
    fn decoders_survive_random_bytes(junk in prop::collection::vec(any::<u8>(), 0..400), len in 0usize..300) {
        for spec in ALL {
            let c = spec.codec().unwrap().unwrap();
            let mut dst = vec![0u8; len * 4];
            let _ = c.decode(&junk, DType::F32, &mut dst);
            // With a valid header the body parser is reached too.
            let mut p = Header { spec, raw_len: (len * 4) as u32 }.encode().to_vec();
            p.extend_from_slice(&junk);
            let _ = c.decode(&p, DType::F32, &mut dst);
        }
    }

    #[test]
    fn corrupted_payloads_fail_typed_or_decode_in_bounds(x in tensor(), at in any::<prop::sample::Index>(), flip in 1u8..=255, cut in any::<prop::sample::Index>()) {
        for spec in ALL {
            let c = spec.codec().unwrap().unwrap();
            let mut out = Vec::new();
            c.encode(&bytes(&x), DType::F32, 5, &mut out).unwrap();
            let mut dst = vec![0u8; 4 * x.len()];
            let mut bad = out.clone();
            let i = at.index(bad.len());
            bad[i] ^= flip;
            let _ = c.decode(&bad, DType::F32, &mut dst);
            let short = &out[..cut.index(out.len())];
            prop_assert!(c.decode(short, DType::F32, &mut dst).is_err() || x.is_empty(), "{spec}: truncated payload accepted");
        }
    }
}

#[test]
fn a_payload_of_another_codec_or_length_is_a_typed_error() {
    let x = bytes(&[1.0, 2.0, 3.0, 4.0]);
    let mut out = Vec::new();
    let int8 = CodecSpec::Int8 {
        block: 64,
        rounding: Rounding::Nearest,
    };
    int8.codec()
        .unwrap()
        .unwrap()
        .encode(&x, DType::F32, 0, &mut out)
        .unwrap();
    let other = CodecSpec::Int8 {
        block: 32,
        rounding: Rounding::Nearest,
    };
    let mut dst = vec![0u8; 16];
    let e = other
        .codec()
        .unwrap()
        .unwrap()
        .decode(&out, DType::F32, &mut dst);
    assert_eq!(
        e,
        Err(CodecError::Mismatch {
            expected: other,
            got: int8
        })
    );
    let e = CodecSpec::Bf16
        .codec()
        .unwrap()
        .unwrap()
        .decode(&out, DType::F32, &mut dst);
    assert!(matches!(e, Err(CodecError::Mismatch { .. })));
    let mut short = vec![0u8; 12];
    let e = int8
        .codec()
        .unwrap()
        .unwrap()
        .decode(&out, DType::F32, &mut short);
    assert_eq!(
        e,
        Err(CodecError::WrongLength {
            expected: 12,
            got: 16
        })
    );
    out[0] = 42;
    let e = int8
        .codec()
        .unwrap()
        .unwrap()
        .decode(&out, DType::F32, &mut dst);
    assert_eq!(e, Err(CodecError::UnknownCodec(42)));
    let e = CodecSpec::Bf16
        .codec()
        .unwrap()
        .unwrap()
        .encode(&x, DType::F64, 0, &mut Vec::new());
    assert!(matches!(e, Err(CodecError::UnsupportedType { .. })));
}

#[test]
fn a_decompression_bomb_is_refused_without_allocating() {
    let big = vec![0u8; 8 << 20];
    for spec in [CodecSpec::Lz4, CodecSpec::Zstd { level: 3 }] {
        let c = spec.codec().unwrap().unwrap();
        let mut out = Vec::new();
        c.encode(&big, DType::U8, 0, &mut out).unwrap();
        assert!(out.len() < 64 << 10, "{spec}: {} bytes", out.len());
        // Claim a small raw length: the decoder writes into 4 KiB and stops.
        out[8..12].copy_from_slice(&4096u32.to_le_bytes());
        let mut dst = vec![0u8; 4096];
        let e = c.decode(&out, DType::U8, &mut dst);
        assert!(
            matches!(e, Err(CodecError::Corrupt { .. })),
            "{spec}: {e:?}"
        );
    }
}

#[test]
fn error_feedback_delays_but_loses_nothing() {
    let spec = CodecSpec::TopK {
        per_million: 50_000,
    };
    let c = spec.codec().unwrap().unwrap();
    let mut ef = ErrorFeedback::new();
    let n = 400;
    let mut sent = vec![0f64; n];
    let mut given = vec![0f64; n];
    for call in 0..30u64 {
        let g: Vec<f32> = (0..n)
            .map(|i| ((i as f32 * 0.37 + call as f32).sin()) * 0.01)
            .collect();
        for (s, v) in given.iter_mut().zip(&g) {
            *s += f64::from(*v);
        }
        // Two chunks of the same tensor.
        let mut x = bytes(&g);
        let (a, b) = x.split_at_mut(4 * 150);
        ef.encode(
            TensorPart {
                key: 7,
                total: n,
                at: 0,
            },
            c.as_ref(),
            a,
            call,
            &mut Vec::new(),
        )
        .unwrap();
        ef.encode(
            TensorPart {
                key: 7,
                total: n,
                at: 150,
            },
            c.as_ref(),
            b,
            call,
            &mut Vec::new(),
        )
        .unwrap();
        for (s, v) in sent.iter_mut().zip(floats(&x)) {
            *s += f64::from(v);
        }
    }
    let r = ef.residual(7).unwrap();
    for i in 0..n {
        let err = (given[i] - sent[i] - f64::from(r[i])).abs();
        assert!(
            err < 1e-5,
            "element {i}: given {} sent {} residual {}",
            given[i],
            sent[i],
            r[i]
        );
    }
    assert!(ef.reset(7) && ef.residual(7).is_none() && !ef.reset(7));
}

#[test]
fn specs_parse_and_print() {
    for (s, spec) in [
        ("none", CodecSpec::None),
        ("bf16", CodecSpec::Bf16),
        ("fp16", CodecSpec::Fp16),
        (
            "int8",
            CodecSpec::Int8 {
                block: DEFAULT_INT8_BLOCK,
                rounding: Rounding::Nearest,
            },
        ),
        (
            "int8:128:stochastic",
            CodecSpec::Int8 {
                block: 128,
                rounding: Rounding::Stochastic,
            },
        ),
        (
            "topk:1%",
            CodecSpec::TopK {
                per_million: 10_000,
            },
        ),
        ("topk:0.001", CodecSpec::TopK { per_million: 1_000 }),
        ("lz4", CodecSpec::Lz4),
        ("zstd", CodecSpec::Zstd { level: 3 }),
        ("zstd:9", CodecSpec::Zstd { level: 9 }),
    ] {
        assert_eq!(CodecSpec::parse(s), Ok(spec), "{s}");
        assert_eq!(CodecSpec::parse(&spec.to_string()), Ok(spec), "{spec}");
    }
    for bad in [
        "int8:0",
        "topk:0%",
        "topk:200%",
        "zstd:30",
        "gzip",
        "bf16:3",
        "int8:8:up",
    ] {
        assert!(CodecSpec::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn unaligned_chunks_encode_and_decode_like_aligned_ones() {
    let x: Vec<f32> = (0..777)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
        .collect();
    let raw = bytes(&x);
    let mut shifted = vec![0u8; raw.len() + 1];
    shifted[1..].copy_from_slice(&raw);
    for spec in ALL {
        let c = spec.codec().unwrap().unwrap();
        let (mut a, mut b) = (Vec::new(), vec![0u8]);
        c.encode(&raw, DType::F32, 3, &mut a).unwrap();
        c.encode(&shifted[1..], DType::F32, 3, &mut b).unwrap();
        assert_eq!(a, b[1..], "{spec}: encoded bytes");
        let mut d1 = vec![0u8; raw.len()];
        let mut d2 = vec![0u8; raw.len() + 1];
        c.decode(&a, DType::F32, &mut d1).unwrap();
        c.decode(&b[1..], DType::F32, &mut d2[1..]).unwrap();
        assert_eq!(d1, d2[1..], "{spec}: decoded bytes");
    }
}
