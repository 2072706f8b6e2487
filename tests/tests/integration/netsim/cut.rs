//! A cut path drops traffic, a restored one carries it again, and parameters
//! change while traffic flows.

use causeway_test_support::require_root;
use std::time::Duration;

use causeway_netsim::{ParamsPatch, Profile};
use causeway_tests::netsim_support::{assert_rtt_ms, echo_in, rtts, socket_in, two_hosts};

#[test]
fn cut_restore_and_change_a_path_at_run_time() {
    require_root!("cut_restore_and_change_a_path_at_run_time");
    let tb = two_hosts(Profile::Wan40);
    let (a, b) = (tb.host(0, 0), tb.host(1, 0));
    let _echo = echo_in(&tb, b);
    let sock = socket_in(&tb, &a.netns);
    let t = Duration::from_millis(300);

    assert_eq!(
        rtts(&sock, b.ip, 5, t).lost(),
        0,
        "path works before the cut"
    );

    tb.cut_path(0).expect("cut");
    let before = tb
        .path_stats(0)
        .expect("stats")
        .a_to_b
        .counters
        .dropped_down;
    let cut = rtts(&sock, b.ip, 5, t);
    assert_eq!(cut.rtts.len(), 0, "a cut path must carry nothing");
    let after = tb
        .path_stats(0)
        .expect("stats")
        .a_to_b
        .counters
        .dropped_down;
    assert!(
        after >= before + 5,
        "the emulator counted the cut drops ({before} -> {after})"
    );

    tb.restore_path(0).expect("restore");
    let back = rtts(&sock, b.ip, 5, t);
    assert_eq!(back.lost(), 0, "a restored path carries traffic again");

    // Longer delay at run time: 50 ms each way.
    tb.set_path(
        0,
        &ParamsPatch {
            delay_ns: Some(50_000_000),
            ..Default::default()
        },
    )
    .expect("set");
    let slow = rtts(&sock, b.ip, 5, Duration::from_millis(500));
    assert_rtt_ms(&slow, 100.0, "after the change");

    // Bad parameters are refused and change nothing.
    assert!(tb
        .set_path(
            0,
            &ParamsPatch {
                loss: Some(1.5),
                delay_ns: Some(1),
                ..Default::default()
            }
        )
        .is_err());
    assert_eq!(
        tb.path_stats(0)
            .expect("stats")
            .a_to_b
            .params
            .expect("params")
            .delay_ns,
        50_000_000
    );
}
