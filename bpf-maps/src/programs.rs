//! The programs of Causeway's eBPF object: one table of their names and
//! kinds, shared by the loader (`userspace/causeway/src/datapath/`), the
//! tests and the benchmarks. Each name is the program's function name in
//! `ebpf/src/main.rs` (the `#[xdp]`/`#[classifier]` macros take it from
//! there), the name the kernel shows (cut to 15 bytes), and the name of
//! its pins
//! (`<pin dir>/prog/<name>`, `<pin dir>/link/<name>`).
//!
//! `userspace/causeway/tests/integration/program_table.rs` checks this table against
//! the built object both ways.

/// The XDP ingress classifier.
pub const XDP_CLASSIFIER: &str = "causeway_xdp";
/// Benchmark baseline: an XDP program that passes every frame.
pub const XDP_PASS: &str = "causeway_xdp_pass";
/// The TC egress shaper (classify, token bucket, DSCP, `skb->priority`).
pub const TC_EGRESS: &str = "causeway_tc_egress";
/// Benchmark baseline: a TC program that passes every frame.
pub const TC_PASS: &str = "causeway_tc_pass";
/// The WAN path steering program (TC ingress of a gateway's LAN side: sets
/// `skb->mark` per flow, see `crate::paths`).
pub const TC_STEER: &str = "causeway_tc_steer";

/// The kernel program type of a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProgramKind {
    /// `BPF_PROG_TYPE_XDP` (section `xdp` or `xdp.frags`).
    Xdp,
    /// `BPF_PROG_TYPE_SCHED_CLS` (section `classifier`), attached with TCX.
    SchedClassifier,
}

/// One program of the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProgramSpec {
    pub name: &'static str,
    pub kind: ProgramKind,
    /// Attached by Causeway (the others are benchmark baselines).
    pub attached: bool,
}

/// [`XDP_CLASSIFIER`]'s entry.
pub const XDP_CLASSIFIER_SPEC: ProgramSpec = ProgramSpec {
    name: XDP_CLASSIFIER,
    kind: ProgramKind::Xdp,
    attached: true,
};
/// [`XDP_PASS`]'s entry.
pub const XDP_PASS_SPEC: ProgramSpec = ProgramSpec {
    name: XDP_PASS,
    kind: ProgramKind::Xdp,
    attached: false,
};
/// [`TC_EGRESS`]'s entry.
pub const TC_EGRESS_SPEC: ProgramSpec = ProgramSpec {
    name: TC_EGRESS,
    kind: ProgramKind::SchedClassifier,
    attached: true,
};
/// [`TC_PASS`]'s entry.
pub const TC_PASS_SPEC: ProgramSpec = ProgramSpec {
    name: TC_PASS,
    kind: ProgramKind::SchedClassifier,
    attached: false,
};

/// [`TC_STEER`]'s entry.
pub const TC_STEER_SPEC: ProgramSpec = ProgramSpec {
    name: TC_STEER,
    kind: ProgramKind::SchedClassifier,
    attached: true,
};

/// Every program in the object, and nothing else.
pub const ALL: &[ProgramSpec] = &[
    XDP_CLASSIFIER_SPEC,
    XDP_PASS_SPEC,
    TC_EGRESS_SPEC,
    TC_PASS_SPEC,
    TC_STEER_SPEC,
];

/// The table entry of `name`.
pub fn spec(name: &str) -> Option<&'static ProgramSpec> {
    ALL.iter().find(|p| p.name == name)
}
