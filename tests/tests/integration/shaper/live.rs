//! `causeway policy set-rate` through the real binary, on a running TCP
//! flow: the new rate is in force within one second, the flow survives, and
//! refused changes (unknown class, zero or absurd rate, burst below one
//! frame, class without shaping) change nothing.

use causeway_test_support::require_root;
use std::time::{Duration, Instant};

use causeway_test_support::netns::VethLink;
use causeway_tests::causeway_cli::{causeway, causeway_ok, Attachment};
use causeway_tests::shaper_net::*;

const POLICY: &str = r#"
[shaping]
link_rate = "1gbit"

[[class]]
id = 0
name = "default"

[[class]]
id = 3
name = "control"
shaping = { rate = "10mbit", ceil = "100mbit", priority = 0, over_limit = "drop" }

[[class]]
id = 5
name = "bulk"
shaping = { rate = "100mbit", ceil = "200mbit" }

[[class]]
id = 7
name = "unshaped"

[[rule]]
priority = 10
protocol = "udp"
dst_port = 7007
class = "control"

[[rule]]
priority = 20
protocol = "tcp"
dst_port = 5201
class = "bulk"
"#;

/// HTB's sent-bytes rate of the bulk leaf over `window`, bit/s.
fn rate_over(link: &VethLink, window: Duration) -> f64 {
    let (b0, t0) = (htb_sent_bytes(&link.a, &link.a_if, BULK), Instant::now());
    std::thread::sleep(window);
    let b1 = htb_sent_bytes(&link.a, &link.a_if, BULK);
    (b1 - b0) as f64 * 8.0 / t0.elapsed().as_secs_f64()
}

#[test]
fn set_rate_applies_within_a_second_without_dropping_the_flow() {
    require_root!();
    let link = VethLink::new(63);
    link.a.exec(&["sysctl", "-qw", "net.ipv4.tcp_ecn=1"]);
    let dir = std::env::temp_dir().join(format!("causeway-shaper-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, POLICY).expect("write policy");
    let policy = policy.to_str().expect("utf-8 path");
    let ns = link.a.name().to_string();
    let _attached = Attachment::new(&ns, &link.a_if, &["--policy", policy]);

    let _server = Iperf3Server::start(&link.b);
    let client = iperf3_client(&link.a, &link.b_addr, 8);
    std::thread::sleep(Duration::from_secs(2));
    let before = rate_over(&link, Duration::from_millis(1000));

    let changed_at = Instant::now();
    let out = causeway_ok(&[
        "--netns", &ns, "policy", "set-rate", "bulk", "20mbit", "--iface", &link.a_if,
    ]);
    assert!(out.contains("now at most 20.0 Mbit/s"), "{out}");
    // Give the queue built at 200 Mbit/s time to drain (<= 0.5 s at 20 Mbit/s
    // for HTB's 1000-frame leaf queue is not guaranteed, so measure the
    // second half of the first second after the change).
    let settle = Duration::from_millis(500).saturating_sub(changed_at.elapsed());
    std::thread::sleep(settle);
    let after = rate_over(&link, Duration::from_millis(500));
    let in_force_after = changed_at.elapsed();

    // Refusals: nothing may change.
    for args in [
        vec!["nope", "10mbit"],
        vec!["bulk", "0"],
        vec!["bulk", "5tbit"],
        vec!["bulk", "2gbit"],
        vec!["bulk", "10mbit", "--burst", "1000"],
        vec!["unshaped", "10mbit"],
        vec!["bulk", "fast"],
    ] {
        let mut full = vec!["--netns", ns.as_str(), "policy", "set-rate"];
        full.extend(&args);
        full.extend(["--iface", link.a_if.as_str()]);
        let out = causeway(&full);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "set-rate {args:?} was accepted");
        assert!(
            stderr.contains("error"),
            "set-rate {args:?}: no clear error: {stderr}"
        );
    }
    let later = rate_over(&link, Duration::from_millis(1000));
    let show = causeway_ok(&["--netns", &ns, "policy", "show", "--iface", &link.a_if]);

    let out = client.wait_with_output().expect("iperf3 client");
    assert!(
        out.status.success(),
        "the TCP flow did not survive the change"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3 JSON");
    let intervals = report["intervals"].as_array().expect("intervals");
    let last = intervals.last().expect("an interval")["sum"]["bytes"]
        .as_u64()
        .unwrap_or(0);
    eprintln!(
        "bulk rate: before {:.1} Mbit/s, 0.5-1.0 s after set-rate {:.1} Mbit/s (measured until {:.2} s), later {:.1} Mbit/s",
        before / 1e6,
        after / 1e6,
        in_force_after.as_secs_f64(),
        later / 1e6
    );
    eprintln!("{show}");
    assert!(
        before > 60e6,
        "the flow did not run above the new rate before the change: {before:.0}"
    );
    assert!(
        (after / 20e6 - 1.0).abs() < 0.1,
        "0.5-1.0 s after set-rate: {:.1} Mbit/s, not 20",
        after / 1e6
    );
    assert!(
        (later / 20e6 - 1.0).abs() < 0.05,
        "later: {:.1} Mbit/s, not 20 (a refused change applied?)",
        later / 1e6
    );
    assert!(last > 0, "the flow stalled after the change");
    assert!(
        show.contains("20.0 Mbit/s"),
        "policy show does not show the new rate:\n{show}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
