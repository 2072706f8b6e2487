//! Differential test: the kernel XDP classifier (through BPF_PROG_TEST_RUN)
//! and the pure reference model must agree on the verdict, the counted
//! class and the counted reason of every frame, for random rule sets (half
//! of them dropping unclassified frames, half with admission) and random,
//! mutated frames: over-long IP length fields, deep VLAN stacks and long
//! IPv6 extension chains among them. A frame that the model drops and the
//! kernel passes is an escape.
//!
//! Reproduce a failure with the seed it prints:
//! `CAUSEWAY_DIFF_SEED=<seed> cargo test -p causeway --test integration xdp_differential::`.

mod edges;
pub(crate) mod gen;

use bpf_maps::counters::{
    IngressCounters, COUNTER_SLOTS, MAP_INGRESS_COUNTERS, MAP_REASON_COUNTERS, REASON_ADM_FRAGMENT,
    REASON_ADM_SOURCE, REASON_EXT_CHAIN, REASON_LENGTH_OVERRUN, REASON_SLOTS, REASON_VLAN_DEPTH,
    UNCLASSIFIED_SLOT,
};
use causeway::classifier::reference::{self, FragmentMemory, Outcome};
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
    read(h, MAP_INGRESS_COUNTERS, slot)
}

fn read(h: &Harness, map: &str, slot: u32) -> IngressCounters {
    let map = h.ebpf.map(map).expect("counter map");
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

/// The class slot a frame with `outcome` is counted in (none for an
/// admission refusal: only its reason counts it).
fn counted_in(outcome: Outcome) -> Option<u32> {
    match outcome {
        Outcome::Unclassified(_) | Outcome::UnclassifiedDropped(_) | Outcome::PartialDropped(_) => {
            Some(UNCLASSIFIED_SLOT)
        }
        Outcome::Refused(_) => None,
        Outcome::Classified { class, .. } => Some(u32::from(class)),
    }
}

/// The counters the kernel must hold, per class slot and per reason, kept
/// from the reference model's outcomes frame by frame.
struct Model {
    slots: Vec<IngressCounters>,
    reasons: Vec<IngressCounters>,
}

impl Model {
    fn new() -> Self {
        Model {
            slots: vec![IngressCounters::default(); COUNTER_SLOTS as usize],
            reasons: vec![IngressCounters::default(); REASON_SLOTS as usize],
        }
    }

    /// Counts `frame` as `outcome` says and compares the kernel's `action`
    /// and counters with it; on a mismatch, says how they differ and takes
    /// the kernel's counters (so later frames find new cases).
    fn check(
        &mut self,
        h: &Harness,
        frame: &[u8],
        outcome: Outcome,
        action: u32,
    ) -> Option<String> {
        let want_action = if outcome.dropped() { 1 } else { 2 };
        let want_slot = counted_in(outcome);
        let bump = |m: &mut IngressCounters| {
            m.packets += 1;
            m.bytes += frame.len() as u64;
            m.drops += u64::from(outcome.dropped());
        };
        if let Some(s) = want_slot {
            bump(&mut self.slots[s as usize]);
        }
        if let Some(r) = outcome.reason() {
            bump(&mut self.reasons[r as usize]);
        }
        // A frame counted in any other slot leaves this one short.
        let counted = want_slot.map(|s| slot(h, s));
        let counted_reason = outcome.reason().map(|r| read(h, MAP_REASON_COUNTERS, r));
        if action == want_action
            && counted == want_slot.map(|s| self.slots[s as usize])
            && counted_reason == outcome.reason().map(|r| self.reasons[r as usize])
        {
            return None;
        }
        self.slots = (0..COUNTER_SLOTS).map(|s| slot(h, s)).collect();
        self.reasons = (0..REASON_SLOTS)
            .map(|r| read(h, MAP_REASON_COUNTERS, r))
            .collect();
        Some(format!(
            "kernel action {action} (slot {want_slot:?} now {counted:?}, reason \
             {counted_reason:?}), reference {outcome:?}\n  frame {}",
            hex(frame)
        ))
    }
}

#[test]
fn kernel_agrees_with_reference_model() {
    require_root!("kernel_agrees_with_reference_model");
    let seed = seed();
    println!("differential seed: {seed} (set CAUSEWAY_DIFF_SEED={seed} to reproduce)");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut h = Harness::load();
    let mut model = Model::new();
    let mut memory = FragmentMemory::default();
    let mut escapes = 0usize;
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
        memory.generation = h.maps.apply(&rules).expect("applying a random rule set");
        for _ in 0..FRAMES_PER_SET {
            let frame = gen::frame(&mut rng);
            let action = h.run(&frame);
            frames += 1;
            let outcome = reference::evaluate_with(&rules, &frame, &mut memory);
            escapes += usize::from(outcome.dropped() && action != 1);
            if let Some(m) = model.check(&h, &frame, outcome, action) {
                mismatches.push(format!(
                    "rule set {set_index} ({} rules), frame {frames}: {m}",
                    rules.len()
                ));
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
        totals, model.slots,
        "seed {seed}: final counters differ from the model"
    );
    let reasons: Vec<IngressCounters> = (0..REASON_SLOTS)
        .map(|r| read(&h, MAP_REASON_COUNTERS, r))
        .collect();
    println!(
        "per-reason packets/drops: {:?}",
        reasons
            .iter()
            .map(|c| (c.packets, c.drops))
            .collect::<Vec<_>>()
    );
    assert_eq!(escapes, 0, "seed {seed}: frames the model drops passed");
    assert_eq!(
        reasons, model.reasons,
        "seed {seed}: final reason counters differ from the model"
    );
    // The generator must reach every malformation and both admission paths,
    // and with `unclassified = "drop"` they must be dropped.
    for r in [
        REASON_LENGTH_OVERRUN,
        REASON_VLAN_DEPTH,
        REASON_EXT_CHAIN,
        REASON_ADM_SOURCE,
        REASON_ADM_FRAGMENT,
    ] {
        assert!(
            reasons[r as usize].drops > 20,
            "reason {r}: {:?}",
            reasons[r as usize]
        );
    }
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

/// The parser's fast path and its fallback edges (see `edges.rs`): every
/// frame through each rule set, with the cache on and off, against the
/// reference model, per frame (action, class slot, reason) and in total.
#[test]
fn parser_fast_path_edges_agree_with_reference_model() {
    require_root!("parser_fast_path_edges_agree_with_reference_model");
    let frames = edges::frames();
    let mut h = Harness::load();
    let mut model = Model::new();
    let mut memory = FragmentMemory::default();
    let mut mismatches = Vec::new();
    let mut classes = std::collections::BTreeMap::new();
    for (index, rules) in edges::rule_sets().iter().enumerate() {
        for cache in [true, false] {
            h.maps
                .set_address_cache(cache)
                .expect("setting the cache flag");
            memory.generation = h.maps.apply(rules).expect("applying the edge rule set");
            for frame in &frames {
                let action = h.run(frame);
                let outcome = reference::evaluate_with(rules, frame, &mut memory);
                *classes.entry(counted_in(outcome)).or_insert(0usize) += 1;
                if let Some(m) = model.check(&h, frame, outcome, action) {
                    mismatches.push(format!("rule set {index}, cache {cache}: {m}"));
                    if mismatches.len() >= 10 {
                        break;
                    }
                }
            }
        }
    }
    println!(
        "{} frames per pass; frames per expected slot: {classes:?}",
        frames.len()
    );
    assert!(
        mismatches.is_empty(),
        "kernel and reference disagree:\n{}",
        mismatches.join("\n")
    );
    let totals: Vec<IngressCounters> = (0..COUNTER_SLOTS).map(|s| slot(&h, s)).collect();
    assert_eq!(totals, model.slots, "final counters differ from the model");
    let reasons: Vec<IngressCounters> = (0..REASON_SLOTS)
        .map(|r| read(&h, MAP_REASON_COUNTERS, r))
        .collect();
    assert_eq!(reasons, model.reasons, "final reason counters differ");
    // Every rule's class is reached, and so are the unclassified slot and
    // admission refusals.
    for class in 1..=8u32 {
        assert!(
            classes.get(&Some(class)).copied().unwrap_or(0) > 20,
            "class {class} is hardly reached: {classes:?}"
        );
    }
    assert!(classes.get(&None).copied().unwrap_or(0) > 20);
    assert!(classes.get(&Some(UNCLASSIFIED_SLOT)).copied().unwrap_or(0) > 1_000);
}

fn hex(frame: &[u8]) -> String {
    let shown: String = frame.iter().take(96).map(|b| format!("{b:02x}")).collect();
    format!(
        "{shown}{} ({} bytes)",
        if frame.len() > 96 { "…" } else { "" },
        frame.len()
    )
}
