//! The eBPF object built by `build.rs`, embedded in the binary.

/// The ELF object holding every Causeway eBPF program and map.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(env!("CAUSEWAY_EBPF_OBJ"));

/// Program names inside [`EBPF_OBJECT`].
pub const XDP_PROGRAM: &str = "causeway_xdp";
