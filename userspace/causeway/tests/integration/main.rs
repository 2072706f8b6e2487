//! The controller's integration tests, one binary (aya's
//! `test/integration-test` is the model): the eBPF programs through
//! BPF_PROG_TEST_RUN, the classifier against its reference model, and the
//! `causeway` binary refusing bad policies. Shared plumbing comes from
//! `causeway-test-support`.
//!
//! Run one part: `cargo test -p causeway --test integration xdp_testrun::`.

mod admission_testrun;
mod bad_policy;
mod classifier_harness;
mod cli_pipes;
mod clock_stamp_testrun;
mod edt_testrun;
mod gcra_testrun;
mod policy_apply_undo;
mod policy_audit;
mod probe_codec;
mod program_table;
mod steer_testrun;
mod tc_testrun;
mod xdp_differential;
mod xdp_testrun;
