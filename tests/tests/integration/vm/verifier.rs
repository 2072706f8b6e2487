//! The proof that the VM stage can fail: a program the verifier must
//! reject (ebpf feature `verifier-reject-test`, built by `cargo xtask
//! vm-test` into its own object, named by `CAUSEWAY_VERIFIER_REJECT_OBJ`)
//! does not load on any kernel, and the verifier's log says why.

use aya::{
    programs::{ProgramError, Xdp},
    EbpfLoader,
};
use causeway_test_support::require_root;

use super::fact;

#[test]
#[ignore = "needs the object that `cargo xtask vm-test` builds (CAUSEWAY_VERIFIER_REJECT_OBJ)"]
fn a_program_reading_past_the_packet_is_rejected_with_the_verifier_log() {
    require_root!();
    let path = std::env::var("CAUSEWAY_VERIFIER_REJECT_OBJ")
        .expect("CAUSEWAY_VERIFIER_REJECT_OBJ names the object built with verifier-reject-test");
    let mut ebpf = EbpfLoader::new()
        .load_file(&path)
        .expect("the object parses");
    let program: &mut Xdp = ebpf
        .program_mut("causeway_verifier_reject")
        .expect("the object has the broken program")
        .try_into()
        .expect("an XDP program");
    match program.load() {
        Ok(()) => panic!("the verifier accepted a program that reads past data_end"),
        Err(ProgramError::LoadError {
            io_error,
            verifier_log,
        }) => {
            let log = verifier_log.to_string();
            println!("verifier log ({io_error}):\n{log}");
            assert!(
                log.contains("invalid access to packet"),
                "unexpected verifier log:\n{log}"
            );
            // The harness shows the log on every kernel (facts are printed
            // by the host after the run, even for a passing test).
            for line in log.lines().filter(|l| !l.trim().is_empty()).take(12) {
                fact("verifier-log", line.trim());
            }
            fact("verifier-rejects-unchecked-packet-read", "yes");
        }
        Err(other) => panic!("expected a verifier rejection, got: {other}"),
    }
}
