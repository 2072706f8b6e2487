//! What Causeway's integration tests and benchmarks share, as a crate
//! instead of `#[path]` includes:
//!
//! - [`root`]: the one root gate ([`require_root!`]): outside CI a test
//!   that needs root prints a visible `SKIP` line; under CI (`CI=true`) it
//!   fails, so that a suite run without privileges cannot pass silently;
//! - [`netns`]: network namespaces and veth pairs torn down on drop (also
//!   when the test panics), and the one `setns` helper;
//! - [`frames`]: Ethernet/VLAN/IPv4/IPv6/UDP/TCP test frames, built with
//!   `causeway-wire`;
//! - [`bpf`] (feature `bpf`): loading the embedded object's programs and
//!   running them through BPF_PROG_TEST_RUN;
//! - [`harness`]: test names as the harness prints them (for tests that
//!   re-run their own binary);
//! - [`tamper`]: a TCP forwarder that flips one bit, for tampered-record
//!   tests of TLS links.
#![deny(unsafe_code)]

#[cfg(feature = "bpf")]
pub mod bpf;
pub mod frames;
pub mod harness;
pub mod netns;
pub mod root;
pub mod tamper;

pub use root::{is_root, root_or_skip};
