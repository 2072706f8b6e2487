//! The eBPF object built by `build.rs`, embedded in the binary.

/// The ELF object holding every Causeway eBPF program and map.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(env!("CAUSEWAY_EBPF_OBJ"));

/// The names and kinds of its programs: [`bpf_maps::programs`].
pub use bpf_maps::programs;
