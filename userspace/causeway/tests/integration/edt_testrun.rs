//! Property test over BPF_PROG_TEST_RUN: the TC egress program's EDT
//! pacing (`pacing = "edt"`) matches the userspace model
//! (`causeway::shaper::bucket::pace`, the shared `bpf_maps::gcra::pace`)
//! for random rates, horizons, frame and GSO sizes, class backlogs and
//! incoming `skb->tstamp` values: the verdict, the departure time written
//! to `skb->tstamp` and the class's new `tat`.
//!
//! As in `gcra_testrun.rs`, the kernel reads its own clock, so each run is
//! bracketed by two reads of `CLOCK_MONOTONIC` and the kernel's result must
//! be the model's at some `now` in that window.

use aya::Ebpf;
use causeway::shaper::{
    bucket::{frame_cost, pace, Pacing},
    config::{ClassShaping, OverAction, ShapingTable},
    maps::{monotonic_ns, ShaperMaps},
    BucketParams,
};
use causeway_test_support::{
    bpf::{self, SkbCtx, TC_EGRESS},
    frames::{eth, ipv4, udp, ETH_IPV4, V4},
    require_root,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

const TC_ACT_SHOT: u32 = 2;
/// `TC_ACT_UNSPEC` (-1): the frame continues.
const PASS: u32 = u32::MAX;
/// The kernel refuses a test-run `wire_len` above this (GSO_LEGACY_MAX_SIZE).
const MAX_TEST_WIRE_LEN: u32 = 65_536;
const CASES: usize = 300;
const SEED: u64 = 0x6564_745f_7465_7374;

/// One random paced class: 1 Mbit/s .. 10 Gbit/s, horizon 1 ms .. 2 s.
fn random_class(rng: &mut StdRng) -> BucketParams {
    let rate = 10f64.powf(rng.gen_range(6.0..10.0)) as u64;
    let horizon = 10f64.powf(rng.gen_range(6.0..9.3)) as u64;
    BucketParams::edt(rate, horizon).expect("valid EDT class")
}

/// An incoming `skb->tstamp` relative to the clock `now`: none, past,
/// TCP-paced inside the horizon, beyond it, or another clock's (TAI).
fn random_earliest(rng: &mut StdRng, now: u64, horizon: u64) -> u64 {
    match rng.gen_range(0..5) {
        0 => 0,
        1 => now.saturating_sub(rng.gen_range(1..=10_000_000)),
        2 => now + rng.gen_range(1_000_000..horizon.max(2_000_000)) / 2,
        3 => now + horizon * 2 + rng.gen_range(0..1_000_000),
        _ => 1_764_000_000_000_000_000 + rng.gen_range(0..1_000_000_000),
    }
}

/// Whether the kernel's result is the model's at some `now` in the window:
/// the instants at which the model's result can change inside it are the
/// ends and the departure time itself.
fn model_agrees(
    tat: u64,
    (before, after): (u64, u64),
    earliest: u64,
    len: u32,
    p: &BucketParams,
    kernel: Pacing,
) -> bool {
    let model = |now| pace(tat, now, earliest, len, p.ns_per_byte_q16(), p.burst_ns());
    let mut nows = vec![before, after];
    if let Pacing::Send { tstamp, .. } = kernel {
        if (before..=after).contains(&tstamp) {
            nows.push(tstamp);
        }
    }
    nows.into_iter().any(|now| model(now) == kernel)
}

#[test]
fn kernel_edt_departures_match_the_model_on_random_inputs() {
    require_root!();
    let ebpf: Ebpf = bpf::load(causeway::ebpf_object::EBPF_OBJECT, &[], &[TC_EGRESS]);
    let mut maps = ShaperMaps::from_ebpf(&ebpf).expect("shaper maps");
    let mut rng = StdRng::seed_from_u64(SEED);
    let (mut sent, mut delayed, mut dropped) = (0u32, 0u32, 0u64);
    for case in 0..CASES {
        let p = random_class(&mut rng);
        let shaping = ClassShaping {
            bucket: Some(p),
            over: OverAction::Drop,
            dscp: None,
            priority: None,
        };
        let table = ShapingTable::new([(0, shaping)]).expect("table");
        maps.apply(&table).expect("apply shaping");
        let mut tat = 0u64;
        for step in 0..rng.gen_range(1..=6) {
            // The class's backlog: none, some, or about the horizon.
            if step == 0 || rng.gen_bool(0.4) {
                let span = (p.burst_ns() * 2) as i64 + 2_000_000;
                let offset = rng.gen_range(-span / 2..=span);
                tat = monotonic_ns().saturating_add_signed(offset);
                maps.set_bucket_tat(0, tat).expect("set tat");
            }
            let payload = rng.gen_range(0..=1458);
            let frame = [
                eth(&[], ETH_IPV4),
                ipv4(
                    V4::new([10, 0, 0, 1], [10, 0, 0, 2], 17),
                    &udp(5000, 7000, payload),
                ),
            ]
            .concat();
            let segs = if rng.gen_bool(0.3) {
                rng.gen_range(2..=44u32)
            } else {
                1
            };
            let wire = (frame.len() as u32 * segs).min(MAX_TEST_WIRE_LEN);
            let earliest = random_earliest(&mut rng, monotonic_ns(), p.burst_ns());
            let ctx = SkbCtx::default().with_wire_len(wire).with_tstamp(earliest);
            let before = monotonic_ns();
            let (r, _, ctx_out) = bpf::run_tc(&ebpf, TC_EGRESS, &frame, &ctx, 1);
            let after = monotonic_ns();
            let new_tat = maps.bucket_tat(0).expect("tat");
            let kernel = match r.return_value {
                PASS => Pacing::Send {
                    tstamp: ctx_out.tstamp(),
                    new_tat,
                },
                TC_ACT_SHOT => {
                    assert_eq!(new_tat, tat, "case {case}: a dropped frame changed tat");
                    Pacing::BeyondHorizon
                }
                v => panic!("case {case}: verdict {v}"),
            };
            assert!(
                model_agrees(tat, (before, after), earliest, wire, &p, kernel),
                "case {case} step {step}: kernel {kernel:?} for a {wire}-byte frame stamped \
                 {earliest} on tat {tat} in [{before}, {after}] at {} bit/s, horizon {} ns; \
                 model at the window's ends: {:?} / {:?}",
                p.rate_bits(),
                p.burst_ns(),
                pace(
                    tat,
                    before,
                    earliest,
                    wire,
                    p.ns_per_byte_q16(),
                    p.burst_ns()
                ),
                pace(
                    tat,
                    after,
                    earliest,
                    wire,
                    p.ns_per_byte_q16(),
                    p.burst_ns()
                ),
            );
            match kernel {
                Pacing::Send { tstamp, new_tat } => {
                    assert_eq!(new_tat - tstamp, frame_cost(wire, p.ns_per_byte_q16()));
                    sent += 1;
                    if tstamp > after {
                        delayed += 1;
                    }
                }
                Pacing::BeyondHorizon => dropped += 1,
            }
            tat = new_tat;
        }
    }
    let counted = maps.counters().expect("counters")[0].dropped;
    assert_eq!(counted, dropped, "drop counter");
    // The inputs reach every outcome often enough to mean something.
    assert!(
        sent > 200 && delayed > 100 && dropped > 100,
        "sent {sent} (delayed {delayed}), dropped {dropped}"
    );
}
