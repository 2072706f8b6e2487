//! The agent's clock sync between two domains over the kernel's netem and
//! over the userspace emulator with the same profile, in one run: a quiet
//! phase, then 1 ms jitter each way (after 300 probes, as on the host's
//! `clock::testbed`). Synthetic clock errors (offset + drift) give the
//! ground truth; the kernel-stamped estimate's |error| is printed per
//! emulator and phase (docs/KERNELS.md).
//!
//! Asserted on both emulators: the kernel source is the one published, and
//! its error stays within the agent's own published bound in ≥ 99 % of the
//! polls. The host's p99 targets (20 µs quiet, 100 µs jittery) assume
//! native timing; under TCG they are printed, not asserted. A status poll
//! that times out under TCG is counted, not a failure.

use std::{collections::BTreeMap, time::Duration};

use causeway::clock::Source;
use causeway_netsim::params::ParamsPatch;
use causeway_test_support::require_root;
use causeway_tests::{
    clock_agent::{measure_ends, quantile, SourceErrors},
    netem_wan::{Ends, NetemWan, WanProfile},
};

use super::fact;

const QUIET: WanProfile = WanProfile {
    one_way_delay_ms: 20,
    jitter_ms: 0,
    rate_mbit: 10,
    loss: 0.0,
};
const JITTERY: WanProfile = WanProfile {
    jitter_ms: 1,
    ..QUIET
};

const WARMUP: Duration = Duration::from_secs(8);
// Under TCG a status poll takes about a second (12 polls in 15 s seen).
const MEASURE: Duration = Duration::from_secs(25);

/// Prints the kernel source's error; an error when it is outside its own
/// bound in more than 1 % of the polls.
fn record(errors: &BTreeMap<Source, SourceErrors>, label: &str) -> Result<(), String> {
    let Some(k) = errors.get(&Source::Kernel) else {
        fact(
            &format!("clock-{label}"),
            "no kernel-stamped estimate polled",
        );
        return Err(format!("{label}: no kernel-stamped estimate"));
    };
    let within = k.within_bound as f64 / k.abs.len() as f64;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    fact(
        &format!("clock-{label}"),
        format!(
            "kernel |err| p50={:.1}us p99={:.1}us max={:.1}us within-bound={:.1}% n={} (guest load {})",
            quantile(&k.abs, 0.5) / 1e3,
            quantile(&k.abs, 0.99) / 1e3,
            quantile(&k.abs, 1.0) / 1e3,
            within * 100.0,
            k.abs.len(),
            load.split_whitespace().next().unwrap_or("?")
        ),
    );
    if within >= 0.99 {
        Ok(())
    } else {
        Err(format!(
            "{label}: error within the agent's bound in only {:.1} %",
            within * 100.0
        ))
    }
}

#[test]
#[ignore = "needs sch_netem (not in the host kernel): runs in the VM stage, cargo xtask vm-test"]
fn clock_sync_over_netem_and_the_emulator_side_by_side() {
    require_root!();
    let wan = NetemWan::new(&QUIET);
    let quiet = measure_ends(&wan.ends(), None, true, "netem", WARMUP, MEASURE);
    wan.set(&JITTERY);
    let jittery = measure_ends(&wan.ends(), None, true, "netem+1ms", WARMUP * 4, MEASURE);
    drop(wan);
    let tb = QUIET.netsim_testbed();
    let emu_quiet = measure_ends(
        &Ends::of_testbed(&tb),
        Some(&tb),
        true,
        "netsim",
        WARMUP,
        MEASURE,
    );
    tb.set_path(
        0,
        &ParamsPatch {
            jitter_ns: Some(JITTERY.jitter_ms * 1_000_000),
            ..Default::default()
        },
    )
    .expect("set jitter");
    let emu_jittery = measure_ends(
        &Ends::of_testbed(&tb),
        Some(&tb),
        true,
        "netsim+1ms",
        WARMUP * 4,
        MEASURE,
    );
    drop(tb);
    // All four recorded before the first assertion can stop the test.
    let phases = [
        (&quiet, "netem-quiet"),
        (&jittery, "netem-jitter1ms"),
        (&emu_quiet, "netsim-quiet"),
        (&emu_jittery, "netsim-jitter1ms"),
    ];
    let failures: Vec<String> = phases
        .into_iter()
        .filter_map(|(errors, label)| record(errors, label).err())
        .collect();
    assert!(failures.is_empty(), "{failures:?}");
}
