//! Property test over BPF_PROG_TEST_RUN: the TC egress program's bucket
//! decisions match the userspace model (`causeway::shaper::bucket`, whose
//! arithmetic is the shared `bpf_maps::gcra`) for random rates, bursts,
//! frame and GSO sizes and time steps.
//!
//! The kernel reads its own clock, so each run is bracketed by two reads
//! of `CLOCK_MONOTONIC` (`before`, `after`): the kernel's decision must be
//! the model's for some `now` in that window, and the new `tat` must be
//! exactly what the model writes at that `now`. Time steps are simulated
//! by moving the bucket's `tat` relative to the clock between frames.

use aya::{
    programs::{SchedClassifier, TestRun, TestRunOptions},
    Ebpf,
};
use causeway::shaper::{
    bucket::{decide, Decision},
    config::{ClassShaping, OverAction, ShapingTable},
    maps::{monotonic_ns, ShaperMaps},
    BucketParams,
};
use causeway_test_support::{
    frames::{eth, ipv4, udp, ETH_IPV4, V4},
    require_root,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

use bpf_maps::programs::TC_EGRESS as TC_PROGRAM;
const TC_ACT_SHOT: u32 = 2;
/// `TC_ACT_UNSPEC` (-1): the frame continues.
const PASS: u32 = u32::MAX;
/// `sizeof(struct __sk_buff)` and the offsets the test sets.
const SKB_CTX_LEN: usize = 192;
const SKB_WIRE_LEN: usize = 160;
const SKB_GSO_SEGS: usize = 164;
const SKB_GSO_SIZE: usize = 176;
/// The kernel refuses a test-run `wire_len` above this (GSO_LEGACY_MAX_SIZE).
const MAX_TEST_WIRE_LEN: u32 = 65_536;
/// Headers repeated in every segment of the frames built here.
const SEGMENT_HEADERS: u32 = 14 + 20 + 8;
const CASES: usize = 300;
const SEED: u64 = 0x6763_7261_7465_7374;

struct Tc {
    ebpf: Ebpf,
    maps: ShaperMaps,
}

impl Tc {
    fn load() -> Self {
        let mut ebpf = Ebpf::load(causeway::ebpf_object::EBPF_OBJECT).expect("load object");
        let prog: &mut SchedClassifier = ebpf
            .program_mut(TC_PROGRAM)
            .expect("program")
            .try_into()
            .expect("a classifier");
        prog.load().expect("verifier accepts the TC program");
        let maps = ShaperMaps::from_ebpf(&ebpf).expect("shaper maps");
        Self { ebpf, maps }
    }

    /// Runs one frame standing for `segs` segments of `wire_len` bytes in
    /// all; returns the verdict.
    fn run(&self, frame: &[u8], wire_len: u32, segs: u32) -> u32 {
        let mut ctx = [0u8; SKB_CTX_LEN];
        ctx[SKB_WIRE_LEN..SKB_WIRE_LEN + 4].copy_from_slice(&wire_len.to_ne_bytes());
        if segs > 1 {
            let size = (wire_len / segs).saturating_sub(SEGMENT_HEADERS);
            ctx[SKB_GSO_SEGS..SKB_GSO_SEGS + 4].copy_from_slice(&segs.to_ne_bytes());
            ctx[SKB_GSO_SIZE..SKB_GSO_SIZE + 4].copy_from_slice(&size.to_ne_bytes());
        }
        let prog: &SchedClassifier = self
            .ebpf
            .program(TC_PROGRAM)
            .expect("program")
            .try_into()
            .expect("classifier");
        prog.test_run(TestRunOptions {
            data_in: Some(frame),
            ctx_in: Some(&ctx),
            ..Default::default()
        })
        .expect("BPF_PROG_TEST_RUN")
        .return_value
    }
}

/// One random class configuration.
fn random_bucket(rng: &mut StdRng) -> BucketParams {
    loop {
        // Log-uniform 1 Mbit/s .. 100 Gbit/s; bursts 1 frame .. 4 MiB.
        let rate = 10f64.powf(rng.gen_range(6.0..11.0)) as u64;
        let burst = 10f64.powf(rng.gen_range(3.19..6.63)) as u64;
        if let Ok(p) = BucketParams::new(rate, burst, 1514) {
            return p;
        }
    }
}

/// What the model allows for a frame the kernel ran between `before` and
/// `after` on a bucket that held `tat`: the decision the kernel made must
/// be the model's at some `now` in the window. Returns whether it was.
fn model_agrees(
    tat: u64,
    (before, after): (u64, u64),
    len: u32,
    p: &BucketParams,
    kernel: Decision,
) -> bool {
    let model = |now| decide(tat, now, len, p.ns_per_byte_q16(), p.burst_ns());
    match kernel {
        // A later `now` only makes a frame more conforming: the earliest
        // instant is the one at which the model could refuse it.
        Decision::OverLimit => model(before) == Decision::OverLimit,
        Decision::Conform { new_tat } => {
            let cost = causeway::shaper::bucket::frame_cost(len, p.ns_per_byte_q16());
            // new_tat = max(tat, now) + cost: the kernel's `now` is
            // new_tat - cost when that is inside the window; otherwise
            // `tat` was ahead of the whole window and any instant in it
            // gives the same result.
            let start = new_tat.wrapping_sub(cost);
            let now = if (before..=after).contains(&start) {
                start
            } else {
                after
            };
            model(now) == kernel
        }
    }
}

#[test]
fn kernel_bucket_decisions_match_the_model_on_random_inputs() {
    require_root!();
    let mut tc = Tc::load();
    let mut rng = StdRng::seed_from_u64(SEED);
    let (mut conform, mut over, mut dropped) = (0u32, 0u32, 0u64);
    for case in 0..CASES {
        let p = random_bucket(&mut rng);
        let shaping = ClassShaping {
            bucket: Some(p),
            over: OverAction::Drop,
            dscp: None,
            priority: None,
        };
        let table = ShapingTable::new([(0, shaping)]).expect("table");
        tc.maps.apply(&table).expect("apply shaping");
        // A short run of frames; before some of them, time "passes": the
        // bucket's `tat` is moved relative to the clock.
        let mut tat = 0u64;
        for step in 0..rng.gen_range(1..=6) {
            if step == 0 || rng.gen_bool(0.4) {
                let span = (p.burst_ns() * 2) as i64 + 2_000_000;
                let offset = rng.gen_range(-span..=span);
                tat = monotonic_ns().saturating_add_signed(offset);
                tc.maps.set_bucket_tat(0, tat).expect("set tat");
            }
            let payload = rng.gen_range(0..=1458);
            let frame = eth(&[], ETH_IPV4);
            let frame = [
                frame,
                ipv4(
                    V4::new([10, 0, 0, 1], [10, 0, 0, 2], 17),
                    &udp(5000, 7000, payload),
                ),
            ]
            .concat();
            let len = frame.len() as u32;
            let segs = if rng.gen_bool(0.3) {
                rng.gen_range(2..=44u32)
            } else {
                1
            };
            // A super-frame of `segs` segments like this one.
            let wire = (len * segs).min(MAX_TEST_WIRE_LEN);
            let before = monotonic_ns();
            let verdict = tc.run(&frame, wire, segs);
            let after = monotonic_ns();
            let new_tat = tc.maps.bucket_tat(0).expect("tat");
            let kernel = match verdict {
                PASS => Decision::Conform { new_tat },
                TC_ACT_SHOT => {
                    assert_eq!(new_tat, tat, "case {case}: a refused frame changed tat");
                    Decision::OverLimit
                }
                v => panic!("case {case}: verdict {v}"),
            };
            assert!(
                model_agrees(tat, (before, after), wire, &p, kernel),
                "case {case} step {step}: kernel {kernel:?} for a {wire}-byte frame ({segs} segments) \
                 on tat {tat} in [{before}, {after}] at {} bit/s, burst {} bytes ({} ns); model at \
                 the window's ends: {:?} / {:?}",
                p.rate_bits(),
                p.burst_bytes(),
                p.burst_ns(),
                decide(tat, before, wire, p.ns_per_byte_q16(), p.burst_ns()),
                decide(tat, after, wire, p.ns_per_byte_q16(), p.burst_ns()),
            );
            match kernel {
                Decision::Conform { .. } => conform += 1,
                Decision::OverLimit => {
                    over += 1;
                    dropped += 1;
                }
            }
            tat = new_tat;
        }
    }
    let counted = tc.maps.counters().expect("counters")[0].dropped;
    assert_eq!(counted, dropped, "drop counter");
    // The inputs reach both outcomes often enough to mean something.
    assert!(
        conform > 200 && over > 200,
        "conform {conform}, over the limit {over}"
    );
}
