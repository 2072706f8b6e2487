//! Causeway's integration tests across network namespaces, one binary
//! (aya's `test/integration-test` is the model), one module per area:
//!
//! - `cli`: the real `causeway` binary attaching, classifying, detaching;
//! - `clock`: the agent's clock sync against kernel stamps and chrony;
//! - `collective`: the collective library over the agent's maps and the
//!   emulated WAN;
//! - `deploy`: the Kubernetes manifest of docs/deploy (parsed, no cluster);
//! - `netsim`: the WAN emulator and testbed;
//! - `observe`: the agent's metrics scraped by a real Prometheus server;
//! - `shaper`: TC egress shaping with HTB (rates, isolation, live changes);
//! - `vm`: what differs per kernel (attach modes, verifier), run on the host
//!   and in the VM stage on 6.1, 6.12 and 7.x.
//!
//! These tests measure rates and delays, so `cargo xtask test` runs them
//! with `--test-threads=1`. One area: `cargo test -p causeway-tests --test
//! integration -- --test-threads=1 shaper::`.

mod cli;
mod clock;
mod collective;
mod deploy;
mod netsim;
mod observe;
mod shaper;
mod vm;
