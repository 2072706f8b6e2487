//! Causeway's eBPF programs. This file only wires the programs to their
//! modules: the parser and classifier are shared by every program.
#![no_std]
#![no_main]
// The shaper's compare-and-swap: the bpfel target has no `AtomicU64::compare_exchange`.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod addresses;
mod admission;
mod classify;
mod clock_probe;
mod counters;
mod log;
mod maps;
mod parse;
mod shaper;
mod steer;
mod tc_egress;
#[cfg(feature = "verifier-reject-test")]
mod verifier_reject;
mod xdp_ingress;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};

/// The XDP ingress classifier (multi-buffer aware, so it attaches to
/// jumbo-MTU devices).
#[xdp(frags)]
pub fn causeway_xdp(ctx: XdpContext) -> u32 {
    xdp_ingress::xdp_ingress(&ctx)
}

/// Benchmark baseline: an XDP program that passes every frame and does
/// nothing else (`benches/classifier.rs` reports costs relative to it).
#[xdp(frags)]
pub fn causeway_xdp_pass(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

/// The TC egress shaper (classify, token bucket, DSCP, `skb->priority`).
#[aya_ebpf::macros::classifier]
pub fn causeway_tc_egress(ctx: aya_ebpf::programs::TcContext) -> i32 {
    tc_egress::tc_egress(&ctx)
}

/// WAN path steering at a gateway's LAN-side ingress: `skb->mark` per flow.
#[aya_ebpf::macros::classifier]
pub fn causeway_tc_steer(ctx: aya_ebpf::programs::TcContext) -> i32 {
    steer::tc_steer(&ctx)
}

/// Benchmark baseline: a TC program that passes every frame
/// (`benches/shaper.rs` reports costs relative to it).
#[aya_ebpf::macros::classifier]
pub fn causeway_tc_pass(_ctx: aya_ebpf::programs::TcContext) -> i32 {
    aya_ebpf::bindings::TC_ACT_OK
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 4] = *b"GPL\0";
