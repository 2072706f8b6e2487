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

/// The RTTs (ms) of `ping -c count` from `ns` to `ip`: (min, avg, max, loss %).
fn ping(ns: &Netns, ip: &str, count: u32) -> (f64, f64, f64, f64) {
    let out = ns.exec(&[
        "ping",
        "-q",
        "-n",
        "-c",
        &count.to_string(),
        "-i",
        "0.2",
        ip,
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "ping failed:\n{text}");
    let loss = text
        .split(',')
        .find(|p| p.contains("packet loss"))
        .and_then(|p| p.trim().split('%').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or(100.0);
    let stats = text
        .lines()
        .find(|l| l.contains("min/avg/max"))
        .and_then(|l| l.split('=').nth(1))
        .unwrap_or_else(|| panic!("no ping summary in:\n{text}"));
    let v: Vec<f64> = stats
        .trim()
        .split(['/', ' '])
        .filter_map(|x| x.parse().ok())
        .collect();
    (v[0], v[1], v[2], loss)
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
    let (min, avg, max, loss) = ping(&a, "10.99.0.2", 20);
    fact(
        "netem-wan40-rtt-ms",
        format!("min={min:.2} avg={avg:.2} max={max:.2} loss={loss}%"),
    );
    assert_eq!(loss, 0.0, "no loss in the profile");
    // Each direction adds 20 ms; the emulator's test allows 40 ± 1 ms for
    // its median. A guest under TCG adds timer slack: the floor is exact
    // (netem never delivers early), the average gets 5 ms.
    assert!(min >= 40.0 - 0.5, "RTT {min} ms below the profile's 40 ms");
    assert!(avg <= 45.0, "average RTT {avg} ms too far above 40 ms");
}
