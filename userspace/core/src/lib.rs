//! Causeway's kernel-free controller core: the parts of the controller that
//! are pure models over plain data. Nothing here opens a map, a socket or a
//! netlink channel, or embeds the eBPF object, so this crate builds and tests
//! with stable Rust and no eBPF toolchain (`cargo test -p causeway-core`);
//! the `causeway` crate adds the kernel side on top (as `aya` adds loading on
//! top of `aya-obj`).
#![deny(unsafe_code)]

pub mod units;

#[cfg(feature = "cli")]
pub mod cli_main;
