//! The XDP classifier loaded from the embedded object, with its maps, for
//! the classifier tests (the benchmark builds the same from the same
//! `causeway_test_support::bpf` calls).

use aya::{programs::TestRunResult, Ebpf};
use bpf_maps::counters::IngressCounters;
use causeway::{
    classifier::{ClassifierMaps, Rule, Verdict},
    ebpf_object::EBPF_OBJECT,
};
use causeway_test_support::bpf::{self, XDP_CLASSIFIER, XDP_PASS};

/// A freshly loaded Causeway object with the XDP programs loaded (not attached).
pub struct Harness {
    pub ebpf: Ebpf,
    pub maps: ClassifierMaps,
}

impl Harness {
    pub fn load() -> Self {
        let ebpf = bpf::load(EBPF_OBJECT, &[XDP_CLASSIFIER, XDP_PASS], &[]);
        let maps = ClassifierMaps::from_ebpf(&ebpf).expect("classifier maps");
        Self { ebpf, maps }
    }

    /// Runs `frame` through the classifier once and returns the XDP action.
    pub fn run(&self, frame: &[u8]) -> u32 {
        self.run_program(XDP_CLASSIFIER, frame, 1).return_value
    }

    /// Runs `frame` through program `name` `repeat` times.
    pub fn run_program(&self, name: &str, frame: &[u8], repeat: u32) -> TestRunResult {
        bpf::run_xdp(&self.ebpf, name, frame, repeat)
    }

    /// Ingress counters per slot, summed over CPUs.
    pub fn counters(&self) -> Vec<IngressCounters> {
        bpf::ingress_counters(&self.ebpf)
    }
}

/// A rule that matches every frame, to be narrowed with `..rule(...)`.
pub fn rule(priority: u32, class: u8, verdict: Verdict) -> Rule {
    Rule::any(priority, class, verdict)
}
