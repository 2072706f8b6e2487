//! The two paths of `dual` have different RTTs, and the path is selectable by
//! destination address (hosts) and by fwmark (gateway).

use causeway_test_support::require_root;
use std::time::Duration;

use causeway_netsim::probe::{set_mark, set_tos};
use causeway_netsim::{Profile, Testbed};
use causeway_tests::netsim_support::{assert_rtt_ms, echo_in, rtts, socket_in, two_hosts};

fn forwarded(tb: &Testbed, path: usize) -> u64 {
    tb.path_stats(path)
        .expect("stats")
        .a_to_b
        .counters
        .forwarded
}

#[test]
fn dual_paths_differ_and_are_selectable() {
    require_root!("dual_paths_differ_and_are_selectable");
    let tb = two_hosts(Profile::Dual);
    let (a, b) = (tb.host(0, 0), tb.host(1, 0));
    let _echo = echo_in(&tb, b);
    let sock = socket_in(&tb, &a.netns);
    let t = Duration::from_millis(500);

    // By destination address, from a host.
    let default = rtts(&sock, b.ip, 10, t);
    let p0 = rtts(&sock, b.ip_via(0).expect("path 0 address"), 10, t);
    let (f0, f1) = (forwarded(&tb, 0), forwarded(&tb, 1));
    let p1 = rtts(&sock, b.ip_via(1).expect("path 1 address"), 10, t);
    assert!(
        forwarded(&tb, 1) >= f1 + 10,
        "path 1 carried the probes to its address"
    );
    assert!(forwarded(&tb, 0) - f0 < 3, "path 0 stayed idle meanwhile");
    for (name, s, want) in [
        ("default", &default, 40.0),
        ("path 0", &p0, 40.0),
        ("path 1", &p1, 60.0),
    ] {
        assert_eq!(s.lost(), 0, "{name}");
        assert_rtt_ms(s, want, name);
    }

    // By fwmark, from the gateway: the same destination, two paths.
    let gw = tb.gateway_netns(0).to_string();
    let plain = socket_in(&tb, &gw);
    let marked = socket_in(&tb, &gw);
    set_mark(&marked, tb.paths()[1].mark).expect("SO_MARK");
    let s_plain = rtts(&plain, b.ip, 10, t);
    let s_marked = rtts(&marked, b.ip, 10, t);
    assert_rtt_ms(&s_plain, 40.0, "unmarked from the gateway");
    assert_rtt_ms(&s_marked, 60.0, "marked for path 1 from the gateway");

    // By DSCP, from a host: the same destination address, the TOS byte of path 1.
    let tos = tb.paths()[1].tos.expect("path 1 has a DSCP");
    let dscp_sock = socket_in(&tb, &a.netns);
    set_tos(&dscp_sock, tos).expect("IP_TOS");
    let before = forwarded(&tb, 1);
    let s = rtts(&dscp_sock, b.ip, 10, t);
    assert_eq!(s.lost(), 0);
    assert!(
        forwarded(&tb, 1) >= before + 10,
        "DSCP {} took path 1",
        tos >> 2
    );
    // Out on path 1 (30 ms), back on the default path (20 ms): the echo is unmarked.
    assert_rtt_ms(&s, 50.0, "DSCP-selected (30 + 20 ms)");
}
