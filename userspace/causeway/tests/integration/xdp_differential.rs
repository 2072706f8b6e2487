//! Differential test: the kernel XDP classifier (through BPF_PROG_TEST_RUN)
//! and the pure reference model must agree on the verdict and the counted
//! class of every frame, for random rule sets and random, mutated frames.
//!
//! Reproduce a failure with the seed it prints:
//! `CAUSEWAY_DIFF_SEED=<seed> cargo test -p causeway --test integration xdp_differential::`.

mod gen;

use bpf_maps::counters::{IngressCounters, COUNTER_SLOTS, MAP_INGRESS_COUNTERS, UNCLASSIFIED_SLOT};
use causeway::classifier::{
    reference::{self, Outcome},
    Verdict,
};
use causeway_test_support::require_root;

use crate::classifier_harness::Harness;
use rand::{rngs::StdRng, SeedableRng};

/// Rule sets tried, and frames per rule set: 120,000 frames in all.
const RULE_SETS: usize = 48;
const FRAMES_PER_SET: usize = 2_500;

fn seed() -> u64 {
    match std::env::var("CAUSEWAY_DIFF_SEED") {
        Ok(s) => s.parse().expect("CAUSEWAY_DIFF_SEED must be a u64"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    }
}

/// Reads one counter slot, summed over CPUs.
fn slot(h: &Harness, slot: u32) -> IngressCounters {
    let map = h.ebpf.map(MAP_INGRESS_COUNTERS).expect("counter map");
    let array = aya::maps::PerCpuArray::<_, IngressCounters>::try_from(map).expect("per-CPU array");
    array.get(&slot, 0).expect("reading counters").iter().fold(
        IngressCounters::default(),
        |a, c| IngressCounters {
            packets: a.packets + c.packets,
            bytes: a.bytes + c.bytes,
            drops: a.drops + c.drops,
        },
    )
}

#[test]
fn kernel_agrees_with_reference_model() {
    require_root!("kernel_agrees_with_reference_model");
    let seed = seed();
    println!("differential seed: {seed} (set CAUSEWAY_DIFF_SEED={seed} to reproduce)");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut h = Harness::load();
    let mut model = vec![IngressCounters::default(); COUNTER_SLOTS as usize];
    let mut mismatches = Vec::new();
    let mut frames = 0usize;
    let started = std::time::Instant::now();

    for set_index in 0..RULE_SETS {
        let rules = gen::rule_set(&mut rng, set_index);
        // Every other rule set runs without the address cache, so that both
        // paths are compared with the model (the cache sees many repeats:
        // addresses come from small pools).
        h.maps
            .set_address_cache(set_index % 2 == 0)
            .expect("setting the cache flag");
        h.maps.apply(&rules).expect("applying a random rule set");
        for _ in 0..FRAMES_PER_SET {
            let frame = gen::frame(&mut rng);
            let action = h.run(&frame);
            frames += 1;
            let (want_slot, want_action, dropped) = match reference::evaluate(&rules, &frame) {
                Outcome::Unclassified(_) => (UNCLASSIFIED_SLOT, 2, 0),
                Outcome::Classified {
                    class,
                    verdict: Verdict::Pass,
                    ..
                } => (u32::from(class), 2, 0),
                Outcome::Classified {
                    class,
                    verdict: Verdict::Drop,
                    ..
                } => (u32::from(class), 1, 1),
            };
            let m = &mut model[want_slot as usize];
            m.packets += 1;
            m.bytes += frame.len() as u64;
            m.drops += dropped;
            // A frame counted in any other slot leaves this one short.
            let counted = slot(&h, want_slot);
            if action != want_action || counted != *m {
                mismatches.push(format!(
                    "rule set {set_index} ({} rules), frame {}: kernel action {action} (slot {want_slot} now {:?}), \
                     reference {:?}\n  frame {}",
                    rules.len(),
                    frames,
                    counted,
                    reference::evaluate(&rules, &frame),
                    hex(&frame)
                ));
                // Resynchronise the model with the kernel to keep finding new cases.
                model = (0..COUNTER_SLOTS).map(|s| slot(&h, s)).collect();
                if mismatches.len() >= 10 {
                    break;
                }
            }
        }
        if mismatches.len() >= 10 {
            break;
        }
    }
    let totals: Vec<IngressCounters> = (0..COUNTER_SLOTS).map(|s| slot(&h, s)).collect();
    println!(
        "{frames} frames in {:.1?}; per-slot packets: {:?}",
        started.elapsed(),
        totals.iter().map(|c| c.packets).collect::<Vec<_>>()
    );
    assert!(
        mismatches.is_empty(),
        "seed {seed}: kernel and reference disagree:\n{}",
        mismatches.join("\n")
    );
    assert_eq!(
        totals, model,
        "seed {seed}: final counters differ from the model"
    );
    assert!(frames >= 100_000);
    assert!(
        totals[UNCLASSIFIED_SLOT as usize].packets > 1_000,
        "the generator must produce unparseable frames too"
    );
    assert!(
        totals.iter().map(|c| c.drops).sum::<u64>() > 1_000,
        "and frames that rules drop"
    );
}

fn hex(frame: &[u8]) -> String {
    let shown: String = frame.iter().take(96).map(|b| format!("{b:02x}")).collect();
    format!(
        "{shown}{} ({} bytes)",
        if frame.len() > 96 { "…" } else { "" },
        frame.len()
    )
}
