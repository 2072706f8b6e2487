//! Three domains form a full mesh of routed WAN paths; each pair talks over its own path.

use causeway_test_support::require_root;
use std::time::Duration;

use causeway_netsim::Profile;
use causeway_tests::netsim_support::{assert_rtt_ms, echo_in, rtts, socket_in, testbed};

#[test]
fn three_domains_full_mesh() {
    require_root!("three_domains_full_mesh");
    let tb = testbed(3, 1, Profile::Wan40);
    assert_eq!(tb.paths().len(), 3, "one path per pair of domains");
    let echoes: Vec<_> = (0..3).map(|d| echo_in(&tb, tb.host(d, 0))).collect();
    for (from, to) in [(0, 1), (0, 2), (1, 2), (2, 0)] {
        let path = tb
            .paths()
            .iter()
            .find(|p| (p.domain_a, p.domain_b) == (from.min(to), from.max(to)))
            .expect("a path for the pair")
            .index;
        let before = tb.path_stats(path).expect("stats");
        let sock = socket_in(&tb, &tb.host(from, 0).netns);
        let s = rtts(&sock, tb.host(to, 0).ip, 10, Duration::from_millis(500));
        assert_eq!(s.lost(), 0, "d{from} -> d{to}");
        assert_rtt_ms(&s, 40.0, &format!("d{from} -> d{to}"));
        let after = tb.path_stats(path).expect("stats");
        let moved = |st: &causeway_netsim::EmulatorStats| {
            st.a_to_b.counters.forwarded + st.b_to_a.counters.forwarded
        };
        assert!(
            moved(&after) >= moved(&before) + 10,
            "d{from} -> d{to} used path {path}"
        );
    }
    drop(echoes);
}
