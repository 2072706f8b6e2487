//! Loading the programs of Causeway's eBPF object and running them once
//! on a frame through BPF_PROG_TEST_RUN (needs root). The object itself is
//! passed in (`causeway::ebpf_object::EBPF_OBJECT`), so this crate does
//! not depend on the controller.

use aya::{
    maps::PerCpuArray,
    programs::{
        Program, ProgramError, SchedClassifier, TestRun, TestRunOptions, TestRunResult, Xdp,
    },
    Ebpf,
};
use bpf_maps::counters::{IngressCounters, COUNTER_SLOTS, MAP_INGRESS_COUNTERS};

// Program names come from the one table in `bpf-maps`.
pub use bpf_maps::programs::{TC_EGRESS, TC_PASS, TC_STEER, XDP_CLASSIFIER, XDP_PASS};

/// `sizeof(struct __sk_buff)` on 6.x kernels.
pub const SKB_CTX_LEN: usize = 192;
/// Offset of `priority` in `struct __sk_buff`.
const SKB_PRIORITY: usize = 32;
/// Offset of `mark` in `struct __sk_buff`.
const SKB_MARK: usize = 8;
/// Offset of `wire_len` in `struct __sk_buff`.
const SKB_WIRE_LEN: usize = 160;
/// Offset of `tstamp` in `struct __sk_buff`.
const SKB_TSTAMP: usize = 152;

/// Loads `object` and the named XDP and TC programs into the kernel (not
/// attached); panics with the verifier's complaint if one is refused.
pub fn load(object: &[u8], xdp: &[&str], tc: &[&str]) -> Ebpf {
    let mut ebpf = Ebpf::load(object).expect("loading the embedded eBPF object");
    for &name in xdp {
        verified(name, program_mut::<Xdp>(&mut ebpf, name).load());
    }
    for &name in tc {
        verified(name, program_mut::<SchedClassifier>(&mut ebpf, name).load());
    }
    ebpf
}

fn verified(name: &str, loaded: Result<(), ProgramError>) {
    loaded.unwrap_or_else(|e| panic!("verifier rejected {name}: {e:?}"));
}

fn program_mut<'a, P>(ebpf: &'a mut Ebpf, name: &str) -> &'a mut P
where
    &'a mut P: TryFrom<&'a mut Program, Error = ProgramError>,
{
    let prog = ebpf
        .program_mut(name)
        .unwrap_or_else(|| panic!("program {name} missing"));
    prog.try_into()
        .unwrap_or_else(|e| panic!("{name} is not of the expected type: {e}"))
}

fn program<'a, P>(ebpf: &'a Ebpf, name: &str) -> &'a P
where
    &'a P: TryFrom<&'a Program, Error = ProgramError>,
{
    let prog = ebpf
        .program(name)
        .unwrap_or_else(|| panic!("program {name} missing"));
    prog.try_into()
        .unwrap_or_else(|e| panic!("{name} is not of the expected type: {e}"))
}

/// The loaded XDP program `name`.
pub fn xdp<'a>(ebpf: &'a Ebpf, name: &str) -> &'a Xdp {
    program(ebpf, name)
}

/// The loaded TC program `name`, to attach.
pub fn tc_mut<'a>(ebpf: &'a mut Ebpf, name: &str) -> &'a mut SchedClassifier {
    program_mut(ebpf, name)
}

/// The loaded TC program `name`.
pub fn tc<'a>(ebpf: &'a Ebpf, name: &str) -> &'a SchedClassifier {
    program(ebpf, name)
}

/// Runs `frame` through XDP program `name` `repeat` times (the frame that
/// leaves is not read back).
pub fn run_xdp(ebpf: &Ebpf, name: &str, frame: &[u8], repeat: u32) -> TestRunResult {
    let opts = TestRunOptions {
        data_in: Some(frame),
        repeat,
        ..Default::default()
    };
    xdp(ebpf, name).test_run(opts).unwrap_or_else(|e| {
        panic!(
            "BPF_PROG_TEST_RUN of {name} on a {}-byte frame: {e:?}",
            frame.len()
        )
    })
}

/// Runs `frame` through XDP program `name` once; returns the verdict and
/// the frame as it left.
pub fn run_xdp_out(ebpf: &Ebpf, name: &str, frame: &[u8]) -> (u32, Vec<u8>) {
    let mut out = vec![0u8; frame.len() + 64];
    let r = xdp(ebpf, name)
        .test_run(TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("BPF_PROG_TEST_RUN of {name}: {e:?}"));
    out.truncate(r.data_size_out as usize);
    (r.return_value, out)
}

/// The `struct __sk_buff` a TC program runs with: zero except the fields
/// set here, which the kernel copies in (and `priority` back out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkbCtx(pub [u8; SKB_CTX_LEN]);

impl Default for SkbCtx {
    fn default() -> Self {
        Self([0; SKB_CTX_LEN])
    }
}

impl SkbCtx {
    pub fn priority(&self) -> u32 {
        self.u32_at(SKB_PRIORITY)
    }

    pub fn with_priority(mut self, priority: u32) -> Self {
        self.0[SKB_PRIORITY..SKB_PRIORITY + 4].copy_from_slice(&priority.to_ne_bytes());
        self
    }

    pub fn mark(&self) -> u32 {
        self.u32_at(SKB_MARK)
    }

    /// `skb->mark` as the frame arrives.
    pub fn with_mark(mut self, mark: u32) -> Self {
        self.0[SKB_MARK..SKB_MARK + 4].copy_from_slice(&mark.to_ne_bytes());
        self
    }

    /// The qdisc's length of the frame (0: the frame length).
    pub fn with_wire_len(mut self, len: u32) -> Self {
        self.0[SKB_WIRE_LEN..SKB_WIRE_LEN + 4].copy_from_slice(&len.to_ne_bytes());
        self
    }

    /// `skb->tstamp`: the departure time a paced frame leaves with.
    pub fn tstamp(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[SKB_TSTAMP..SKB_TSTAMP + 8]);
        u64::from_ne_bytes(b)
    }

    /// `skb->tstamp` as the frame arrives (0: none).
    pub fn with_tstamp(mut self, tstamp: u64) -> Self {
        self.0[SKB_TSTAMP..SKB_TSTAMP + 8].copy_from_slice(&tstamp.to_ne_bytes());
        self
    }

    fn u32_at(&self, at: usize) -> u32 {
        u32::from_ne_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }
}

/// Runs `frame` through TC program `name` `repeat` times with `ctx`;
/// returns the verdict, the frame as it left and the context out.
pub fn run_tc(
    ebpf: &Ebpf,
    name: &str,
    frame: &[u8],
    ctx: &SkbCtx,
    repeat: u32,
) -> (TestRunResult, Vec<u8>, SkbCtx) {
    try_run_tc(ebpf, name, frame, ctx, repeat)
        .unwrap_or_else(|e| panic!("BPF_PROG_TEST_RUN of {name}: {e:?}"))
}

/// [`run_tc`], returning the kernel's refusal instead of panicking (newer
/// kernels refuse to build an skb from a frame too short for its
/// ethertype's header, with `EINVAL`).
pub fn try_run_tc(
    ebpf: &Ebpf,
    name: &str,
    frame: &[u8],
    ctx: &SkbCtx,
    repeat: u32,
) -> Result<(TestRunResult, Vec<u8>, SkbCtx), aya::programs::ProgramError> {
    let mut out = vec![0u8; frame.len() + 64];
    let mut ctx_out = SkbCtx::default();
    let r = tc(ebpf, name).test_run(TestRunOptions {
        data_in: Some(frame),
        data_out: Some(&mut out),
        ctx_in: Some(&ctx.0),
        ctx_out: Some(&mut ctx_out.0),
        repeat,
        ..Default::default()
    })?;
    out.truncate(r.data_size_out as usize);
    Ok((r, out, ctx_out))
}

/// The XDP ingress counters per slot, summed over CPUs.
pub fn ingress_counters(ebpf: &Ebpf) -> Vec<IngressCounters> {
    let map = ebpf.map(MAP_INGRESS_COUNTERS).expect("counter map");
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
