//! The collective library's integration tests, one binary: every operation
//! against a reference (`ops`), rendezvous and its typed errors
//! (`rendezvous`), ranks that must agree on domains and wire options
//! (`agreement`), set-up failures every rank hears of (`setup_failure`), a
//! rank that dies (`fault`), a rank that stops (`hang`), a peer that speaks
//! garbage (`hostile`), mutual TLS (`tls`, certificates from `pki`; kTLS,
//! `ktls`, in the VM stage), WAN codecs over real connections (`codecs`),
//! the blocking calls' memory (`memory`), the per-rank Prometheus metrics
//! (`metrics`), the timeline's causality (`trace`) and the binaries'
//! warnings on stderr (`warnings`). Ranks run
//! as threads of this process (`world`) or as worker processes (`procs`,
//! `fault`, `hang`).
//!
//! The environment is process-wide: only `rendezvous::torchrun_environment`
//! sets variables, and nothing else here reads them (the other tests build
//! communicators explicitly, and children get their variables through
//! `Command::env`).

mod agreement;
mod codecs;
mod fault;
mod hang;
mod hostile;
mod ktls;
mod memory;
mod metrics;
mod multipath;
mod ops;
mod pki;
mod procs;
#[cfg(feature = "rdma")]
mod rdma;
mod rendezvous;
mod setup_failure;
mod shrink;
mod tls;
mod trace;
mod warnings;
mod world;
