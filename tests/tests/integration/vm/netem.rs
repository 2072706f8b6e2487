//! The kernel's netem as the WAN, on the profile the userspace emulator's
//! `wan40` uses (20 ms each way, 200 Mbit/s, no loss): two namespaces joined
//! by a veth with netem on both ends, and the RTT checked against the
//! profile — the same assertion as `netsim::rtt` makes of the emulator, so
//! the two emulators cross-check each other (numbers in docs/KERNELS.md).
//! netem is missing from the development host's kernel, so this runs in the
//! VM stage (`cargo xtask vm-test`), where Debian's kernels have it.

use causeway_test_support::{netns::Netns, require_root};

use super::fact;

/// netem's arguments for one direction of the wan40 profile; `limit` holds
/// well over the bandwidth-delay product (200 Mbit/s × 40 ms ≈ 700 frames).
const WAN40: &[&str] = &["delay", "20ms", "rate", "200mbit", "limit", "10000"];

/// The RTTs (ms) of `ping -c count` from `ns` to `ip`, sorted, and how
/// many replies were missing.
fn ping(ns: &Netns, ip: &str, count: usize) -> (Vec<f64>, usize) {
    let out = ns.exec(&["ping", "-n", "-c", &count.to_string(), "-i", "0.2", ip]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "ping failed:\n{text}");
    let mut rtts: Vec<f64> = text
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.trim_end_matches(" ms").trim().parse().ok())
        .collect();
    rtts.sort_by(f64::total_cmp);
    let lost = count.saturating_sub(rtts.len());
    (rtts, lost)
}

#[test]
#[ignore = "needs sch_netem (not in the host kernel): runs in the VM stage, cargo xtask vm-test"]
fn netem_wan40_rtt_matches_the_profile() {
    require_root!();
    let a = Netns::new("cwna");
    let b = Netns::new("cwnb");
    a.ip(&[
        "link",
        "add",
        "wan0",
        "type",
        "veth",
        "peer",
        "name",
        "wan0",
        "netns",
        b.name(),
    ]);
    for (ns, addr) in [(&a, "10.99.0.1/24"), (&b, "10.99.0.2/24")] {
        ns.ip(&["addr", "add", addr, "dev", "wan0"]);
        ns.ip(&["link", "set", "wan0", "up"]);
        let mut args = vec!["tc", "qdisc", "add", "dev", "wan0", "root", "netem"];
        args.extend_from_slice(WAN40);
        let out = ns.exec(&args);
        assert!(
            out.status.success(),
            "netem: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (rtts, lost) = ping(&a, "10.99.0.2", 30);
    assert_eq!(lost, 0, "no loss in the profile");
    let (min, median, max) = (rtts[0], rtts[rtts.len() / 2], rtts[rtts.len() - 1]);
    fact(
        "netem-wan40-rtt-ms",
        format!(
            "min={min:.2} median={median:.2} max={max:.2} n={}",
            rtts.len()
        ),
    );
    // Each direction adds 20 ms and netem never delivers early, so the
    // minimum is at least 40 ms; a guest under TCG only adds to it. The
    // emulator's test holds its median to 40 ± 1 ms on the host, but under
    // TCG on a loaded host the median drifts with the load (45.3 ms seen at
    // load ~12, one outlier past 130 ms), so the profile is checked on the
    // minimum (41.0 ms seen on every run) and the median only for gross error.
    assert!(min >= 40.0 - 0.5, "RTT {min} ms below the profile's 40 ms");
    assert!(
        min <= 43.0,
        "minimum RTT {min} ms: more delay than the profile's 40 ms"
    );
    assert!(
        median <= 60.0,
        "median RTT {median} ms far above the profile's 40 ms"
    );
}
