#![no_std]
#![no_main]

use aya_ebpf::{bindings::xdp_action, macros::{map, xdp}, maps::PerCpuArray, programs::XdpContext};
use bpf_maps::counters::{IngressCounters, COUNTER_SLOTS, UNCLASSIFIED_SLOT};

#[map(name = "CW_IN_COUNT")]
static CW_IN_COUNT: PerCpuArray<IngressCounters> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);

#[xdp]
pub fn causeway_xdp(ctx: XdpContext) -> u32 {
    let len = (ctx.data_end() - ctx.data()) as u64;
    if let Some(c) = CW_IN_COUNT.get_ptr_mut(UNCLASSIFIED_SLOT) {
        // SAFETY: per-CPU slot, only this CPU writes it while the program runs.
        unsafe {
            (*c).packets += 1;
            (*c).bytes += len;
        }
    }
    xdp_action::XDP_PASS
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 4] = *b"GPL\0";
