//! Hosts of one domain talk without WAN delay; across domains the RTT is the profile's.

use causeway_test_support::require_root;
use std::time::Duration;

use causeway_netsim::Profile;
use causeway_tests::netsim_support::{assert_rtt_ms, echo_in, median_ms, rtts, socket_in, testbed};

#[test]
fn lan_is_fast_and_wan40_rtt_matches_the_profile() {
    require_root!("lan_is_fast_and_wan40_rtt_matches_the_profile");
    let tb = testbed(2, 2, Profile::Wan40);
    let (a0, a1, b0) = (tb.host(0, 0), tb.host(0, 1), tb.host(1, 0));
    let _e1 = echo_in(&tb, a1);
    let _e2 = echo_in(&tb, b0);
    let sock = socket_in(&tb, &a0.netns);

    let lan = rtts(&sock, a1.ip, 20, Duration::from_millis(200));
    assert_eq!(lan.lost(), 0);
    assert!(
        median_ms(&lan) < 1.0,
        "same-domain RTT {} ms must be < 1 ms",
        median_ms(&lan)
    );

    let wan = rtts(&sock, b0.ip, 20, Duration::from_millis(500));
    assert_eq!(wan.lost(), 0);
    assert_rtt_ms(&wan, 40.0, "cross-domain");
    // The LAN probes never touched the emulator; the WAN ones all did.
    let st = tb.path_stats(0).expect("stats");
    assert!(
        st.a_to_b.counters.forwarded >= 20 && st.b_to_a.counters.forwarded >= 20,
        "{st:?}"
    );
    assert_eq!(st.a_to_b.counters.dropped(), 0);
}
