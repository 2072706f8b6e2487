//! Shared by the classifier's integration tests and its benchmark: a frame
//! builder and a harness that runs the XDP program through BPF_PROG_TEST_RUN.
#![allow(dead_code)]

pub mod frames;

use aya::{
    maps::PerCpuArray,
    programs::{TestRun, TestRunOptions, TestRunResult, Xdp},
    Ebpf,
};
use bpf_maps::counters::{IngressCounters, COUNTER_SLOTS, MAP_INGRESS_COUNTERS};
use causeway::{classifier::ClassifierMaps, ebpf_object::EBPF_OBJECT};

/// The classifier program and the benchmark baseline, as built into the object.
pub const XDP_CLASSIFIER: &str = "causeway_xdp";
pub const XDP_BASELINE: &str = "causeway_xdp_pass";

/// Whether the process may load BPF programs; prints a visible SKIP line when not.
pub fn root_or_skip(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("SKIP: {test} needs root (BPF_PROG_TEST_RUN)");
    false
}

/// A freshly loaded Causeway object with the XDP programs loaded (not attached).
pub struct Harness {
    pub ebpf: Ebpf,
    pub maps: ClassifierMaps,
}

impl Harness {
    pub fn load() -> Self {
        let mut ebpf = Ebpf::load(EBPF_OBJECT).expect("loading the embedded eBPF object");
        for name in [XDP_CLASSIFIER, XDP_BASELINE] {
            let prog: &mut Xdp = ebpf
                .program_mut(name)
                .unwrap_or_else(|| panic!("program {name} missing"))
                .try_into()
                .expect("an XDP program");
            prog.load()
                .unwrap_or_else(|e| panic!("verifier rejected {name}: {e:?}"));
        }
        let maps = ClassifierMaps::from_ebpf(&ebpf).expect("classifier maps");
        Self { ebpf, maps }
    }

    pub fn program(&self, name: &str) -> &Xdp {
        self.ebpf
            .program(name)
            .expect("program")
            .try_into()
            .expect("an XDP program")
    }

    /// Runs `frame` through the classifier once and returns the XDP action.
    pub fn run(&self, frame: &[u8]) -> u32 {
        self.run_program(XDP_CLASSIFIER, frame, 1).return_value
    }

    /// Runs `frame` through program `name` `repeat` times.
    pub fn run_program(&self, name: &str, frame: &[u8], repeat: u32) -> TestRunResult {
        let opts = TestRunOptions {
            data_in: Some(frame),
            repeat,
            ..Default::default()
        };
        self.program(name).test_run(opts).unwrap_or_else(|e| {
            panic!(
                "BPF_PROG_TEST_RUN of {name} on a {}-byte frame: {e:?}",
                frame.len()
            )
        })
    }

    /// Ingress counters per slot, summed over CPUs.
    pub fn counters(&self) -> Vec<IngressCounters> {
        let map = self.ebpf.map(MAP_INGRESS_COUNTERS).expect("counter map");
        let array = PerCpuArray::<_, IngressCounters>::try_from(map).expect("per-CPU array");
        (0..COUNTER_SLOTS)
            .map(|slot| {
                let per_cpu = array.get(&slot, 0).expect("reading counters");
                per_cpu
                    .iter()
                    .fold(IngressCounters::default(), |acc, c| IngressCounters {
                        packets: acc.packets + c.packets,
                        bytes: acc.bytes + c.bytes,
                        drops: acc.drops + c.drops,
                    })
            })
            .collect()
    }
}
