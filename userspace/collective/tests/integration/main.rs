//! The collective library's integration tests, one binary: every operation
//! against a reference (`ops`), rendezvous and its typed errors
//! (`rendezvous`), a rank that dies (`fault`), a rank that stops (`hang`) and a peer that speaks
//! garbage (`hostile`). Ranks run as threads of this process (`world`) or
//! as worker processes.
//!
//! The environment is process-wide: only `rendezvous::torchrun_environment`
//! sets variables, and nothing else here reads them (the other tests build
//! communicators explicitly, and children get their variables through
//! `Command::env`).

mod fault;
mod hang;
mod hostile;
mod ops;
mod rendezvous;
mod shrink;
mod world;
