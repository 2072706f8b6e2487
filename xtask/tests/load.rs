//! `cargo xtask load` / `unload` end to end on a veth in a namespace: load
//! builds the binary if needed, attaches XDP, applies a shaping policy (so
//! TC egress attaches too: TCX or clsact, as the kernel allows) and unload
//! leaves no program on the interface.

use std::process::{Command, Output};

use causeway_test_support::{netns::Netns, require_root};
use serde_json::Value;

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .expect("run xtask")
}

/// XDP programs on `iface` inside `ns` (`bpftool net`).
fn xdp_programs(ns: &Netns, iface: &str) -> usize {
    let out = ns.exec(&["bpftool", "-j", "net", "show", "dev", iface]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("bpftool net JSON");
    v[0]["xdp"].as_array().map_or(0, Vec::len)
}

/// The id of the pinned TC egress program of `iface`, if it is loaded.
fn tc_program(ns: &Netns, iface: &str) -> Option<u64> {
    let pin = format!(
        "/sys/fs/bpf/causeway/netns-{}/{iface}/prog/causeway_tc_egress",
        ns.name()
    );
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show", "pinned", &pin])
        .output()
        .ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["id"].as_u64()
}

fn loaded(prog: u64) -> bool {
    Command::new("bpftool")
        .args(["prog", "show", "id", &prog.to_string()])
        .output()
        .is_ok_and(|o| o.status.success())
}

const POLICY: &str = r#"
[shaping]
link_rate = "100mbit"

[[class]]
id = 1
name = "bulk"
shaping = { rate = "50mbit", ceil = "100mbit" }

[[rule]]
priority = 10
protocol = "udp"
dst_port = 5201
class = "bulk"
action = "pass"
"#;

#[test]
fn load_attaches_with_a_policy_and_unload_leaves_nothing() {
    require_root!();
    let ns = Netns::new("cwx");
    ns.ip(&[
        "link", "add", "wan0", "type", "veth", "peer", "name", "wan0p",
    ]);
    ns.ip(&["link", "set", "wan0", "up"]);
    let policy = std::env::temp_dir().join(format!("cw-xtask-load-{}.toml", std::process::id()));
    std::fs::write(&policy, POLICY).expect("write policy");
    let policy_arg = policy.to_str().expect("utf-8 path");

    let out = xtask(&[
        "load",
        "--iface",
        "wan0",
        "--netns",
        ns.name(),
        "--policy",
        policy_arg,
        "--mode",
        "skb",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "load failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("wan0") && stdout.contains("live"),
        "status after load:\n{stdout}"
    );
    assert_eq!(xdp_programs(&ns, "wan0"), 1, "XDP attached");
    let tc = tc_program(&ns, "wan0").expect("TC egress loaded and pinned");

    let out = xtask(&["unload", "--iface", "wan0", "--netns", ns.name()]);
    assert!(
        out.status.success(),
        "unload failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(xdp_programs(&ns, "wan0"), 0, "no XDP program after unload");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while loaded(tc) {
        assert!(
            std::time::Instant::now() < deadline,
            "TC program {tc} still loaded after unload"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = xtask(&["unload", "--iface", "wan0", "--netns", ns.name()]);
    assert!(
        !out.status.success(),
        "a second unload has nothing to detach"
    );
    std::fs::remove_file(&policy).expect("remove policy");
}
