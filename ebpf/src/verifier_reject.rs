//! A deliberately broken program (feature `verifier-reject-test` only): it
//! reads the packet without checking `data_end`, which every kernel's
//! verifier refuses ("invalid access to packet"). The VM stage loads it to
//! prove that a program the verifier rejects fails the stage, with the
//! verifier's log in the report.

use aya_ebpf::{macros::xdp, programs::XdpContext};

#[xdp]
pub fn causeway_verifier_reject(ctx: XdpContext) -> u32 {
    let byte = ctx.data() as *const u8;
    // SAFETY: none — this read has no bounds check on purpose; the verifier
    // refuses the program before it could ever run.
    let value = unsafe { core::ptr::read_volatile(byte.wrapping_add(64)) };
    u32::from(value)
}
