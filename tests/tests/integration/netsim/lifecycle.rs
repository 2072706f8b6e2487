//! A testbed comes up and goes down cleanly, twice in a row with the same names,
//! and leaves no namespace or interface behind.

use causeway_netsim::{Profile, Testbed};
use causeway_test_support::require_root;
use causeway_tests::netsim_support::{echo_in, median_ms, namespaces_with, rtts, socket_in};
use std::time::Duration;

/// Links of the root namespace (the testbed must never create any there).
fn root_links() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.split(": ")
                .nth(1)
                .map(|n| n.split('@').next().unwrap_or(n).to_string())
        })
        .collect()
}

#[test]
fn up_and_down_twice_leaves_nothing_behind() {
    require_root!("up_and_down_twice_leaves_nothing_behind");
    let tag = format!("lc{}", std::process::id());
    let prefix = format!("cw-{tag}-");
    let links_before = root_links();
    for round in 0..2 {
        let tb = Testbed::builder()
            .tag(&tag)
            .domains(2)
            .hosts_per_domain(2)
            .wan(Profile::Wan40)
            .build()
            .expect("build");
        let made = namespaces_with(&prefix);
        assert_eq!(
            made.len(),
            2 + 4 + 1,
            "round {round}: gateways, hosts, one emulator: {made:?}"
        );
        assert_eq!(
            root_links(),
            links_before,
            "round {round}: nothing may be created in the root namespace"
        );
        // Processes run inside a host see its addresses (and only those).
        let addrs = tb
            .run_ok(
                tb.host(1, 1),
                "ip",
                &["-4", "-o", "addr", "show", "dev", "eth0"],
            )
            .expect("ip addr");
        assert!(
            addrs.contains(&format!("{}/24", tb.host(1, 1).ip)),
            "{addrs}"
        );
        assert!(
            tb.run_ok(tb.host(1, 1), "false", &[]).is_err(),
            "a failing command is an error"
        );
        // It works: a cross-domain probe gets through.
        let _echo = echo_in(&tb, tb.host(1, 1));
        let sock = socket_in(&tb, &tb.host(0, 0).netns);
        let s = rtts(&sock, tb.host(1, 1).ip, 3, Duration::from_millis(500));
        assert_eq!(s.lost(), 0, "round {round}");
        assert!(
            median_ms(&s) > 39.0,
            "round {round}: RTT {} ms",
            median_ms(&s)
        );
        drop(sock);
        drop(_echo);
        tb.teardown().expect("teardown");
        assert_eq!(
            namespaces_with(&prefix),
            Vec::<String>::new(),
            "round {round}: namespaces left"
        );
        assert_eq!(
            root_links(),
            links_before,
            "round {round}: root links changed"
        );
    }
}
