//! Causeway's kernel-free controller core: the parts of the controller that
//! are pure models over plain data — the policy file and its validation,
//! the classifier's rule model, compiler and reference classifier, the
//! shaper's validated plan and token-bucket model, the clock estimator, and
//! the units parser. Nothing here opens a map, a socket or a netlink
//! channel, or embeds the eBPF object, so this crate builds and tests with
//! stable Rust and no eBPF toolchain (`cargo test -p causeway-core`); the
//! `causeway` crate adds the kernel side on top (as `aya` adds loading on
//! top of `aya-obj`).
#![deny(unsafe_code)]

pub mod classifier;
pub mod clock;
pub mod identity;
pub mod paths;
pub mod policy;
pub mod scrape_http;
pub mod shaper;
pub mod traffic;
pub mod units;

#[cfg(feature = "cli")]
pub mod cli_main;
