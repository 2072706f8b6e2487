//! Attach modes per kernel through the real `causeway` binary: XDP generic
//! and native on a veth, and TC egress as a TCX link (Linux 6.6+) or a
//! `bpf` filter on a `clsact` qdisc (older kernels), chosen by the data
//! path and shown by `causeway status`; detach leaves no filter, qdisc or
//! link behind. Also prints the verifier's counts per program.

use causeway_test_support::{netns::Netns, require_root};
use causeway_tests::causeway_cli::{causeway_ok, Attachment};
use serde_json::Value;
use std::{
    process::Command,
    time::{Duration, Instant},
};

use super::{fact, kernel_version};

fn veth_host() -> (Netns, String) {
    let ns = Netns::new("cwk");
    let iface = "wan0".to_string();
    ns.ip(&[
        "link", "add", &iface, "type", "veth", "peer", "name", "wan0p",
    ]);
    ns.ip(&["link", "set", &iface, "up"]);
    ns.ip(&["link", "set", "wan0p", "up"]);
    (ns, iface)
}

fn status_of(ns: &str, iface: &str) -> Value {
    let out = causeway_ok(&["--netns", ns, "status", "--json"]);
    let all: Value = serde_json::from_str(&out).expect("status JSON");
    all.as_array()
        .and_then(|a| a.iter().find(|s| s["iface"] == iface).cloned())
        .unwrap_or_else(|| panic!("{iface} not in status: {all}"))
}

fn json(ns: &Netns, args: &[&str]) -> Value {
    let out = ns.exec(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// `args` run in the root namespace, as JSON.
fn root_json(args: &[&str]) -> Value {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// The XDP mode the kernel reports for `iface` (`bpftool net`).
fn xdp_mode(ns: &Netns, iface: &str) -> String {
    let v = json(ns, &["bpftool", "-j", "net", "show", "dev", iface]);
    v[0]["xdp"][0]["mode"]
        .as_str()
        .unwrap_or("none")
        .to_string()
}

#[test]
fn xdp_generic_and_native_attach_on_veth() {
    require_root!();
    let (ns, iface) = veth_host();
    for (mode, kernel_name) in [("skb", "generic"), ("driver", "driver")] {
        let attached = Attachment::new(ns.name(), &iface, &["--mode", mode]);
        assert_eq!(xdp_mode(&ns, &iface), kernel_name, "mode {mode}");
        assert_eq!(status_of(ns.name(), &iface)["health"], "live");
        fact(&format!("xdp-{mode}-on-veth"), "attaches");
        drop(attached);
        assert_eq!(xdp_mode(&ns, &iface), "none", "detach of mode {mode}");
    }
}

#[test]
fn tc_egress_is_tcx_from_6_6_and_clsact_before_and_detach_removes_it() {
    require_root!();
    let (ns, iface) = veth_host();
    let tcx = kernel_version() >= (6, 6);
    let attached = Attachment::new(ns.name(), &iface, &[]);
    let policy = std::env::temp_dir().join(format!("cw-kernel-policy-{}.toml", std::process::id()));
    std::fs::write(&policy, SHAPING_POLICY).expect("write policy");
    causeway_ok(&[
        "--netns",
        ns.name(),
        "policy",
        "apply",
        "--iface",
        &iface,
        policy.to_str().expect("utf-8"),
    ]);
    std::fs::remove_file(&policy).expect("remove policy");

    let s = status_of(ns.name(), &iface);
    let want = if tcx { "tcx" } else { "clsact" };
    assert_eq!(s["tc_mode"], want, "{s}");
    fact("tc-egress-mode", want);
    // The kernel's view: the pinned TC program runs as a TCX link, or as a
    // clsact filter (bpftool 7.1 does not list TCX under `net`: links it is).
    let pin = format!(
        "/sys/fs/bpf/causeway/netns-{}/{iface}/prog/causeway_tc_egress",
        ns.name()
    );
    let (prog, as_tcx, links) = pinned_tc_program(&pin);
    let as_filter = egress_filter_runs(&ns, &iface, prog);
    assert_eq!(
        (as_tcx, as_filter),
        (tcx, !tcx),
        "prog {prog}: links {links}"
    );
    let xdp = s["prog_id"].as_u64().expect("XDP program id in status");
    verifier_counts(&[xdp, prog]);

    drop(attached); // causeway detach
    assert!(
        !egress_filter_runs(&ns, &iface, prog),
        "the filter stays after detach"
    );
    assert_gone(&ns, &iface, prog);
}

/// After a TC detach: no clsact qdisc left on `iface`, and program `prog`
/// unloaded within 10 s.
fn assert_gone(ns: &Netns, iface: &str, prog: u64) {
    let qdiscs = json(ns, &["tc", "-j", "qdisc", "show", "dev", iface]);
    let clsact_left = qdiscs
        .as_array()
        .is_some_and(|a| a.iter().any(|q| q["kind"] == "clsact"));
    assert!(!clsact_left, "clsact qdisc left: {qdiscs}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Command::new("bpftool")
        .args(["prog", "show", "id", &prog.to_string()])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        assert!(
            Instant::now() < deadline,
            "TC program {prog} still loaded after detach"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The id of the TC program pinned at `pin`, whether a TCX link runs it,
/// and every link (for messages). bpftool runs outside the namespace: `ip
/// netns exec` mounts a fresh /sys without the bpffs that holds the pins.
fn pinned_tc_program(pin: &str) -> (u64, bool, Value) {
    let prog = root_json(&["bpftool", "-j", "prog", "show", "pinned", pin])["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("the program pinned at {pin} has an id"));
    let links = root_json(&["bpftool", "-j", "link", "show"]);
    const BPF_LINK_TYPE_TCX: u64 = 11;
    let as_tcx = links.as_array().is_some_and(|a| {
        a.iter().any(|l| {
            l["prog_id"].as_u64() == Some(prog) && l["type"].as_u64() == Some(BPF_LINK_TYPE_TCX)
        })
    });
    (prog, as_tcx, links)
}

fn egress_filter_runs(ns: &Netns, iface: &str, prog: u64) -> bool {
    filter_runs(ns, iface, "egress", prog)
}

/// Whether a `bpf` filter running `prog` is on `iface`'s `hook` (egress, ingress).
fn filter_runs(ns: &Netns, iface: &str, hook: &str, prog: u64) -> bool {
    let filters = json(ns, &["tc", "-j", "filter", "show", "dev", iface, hook]);
    filters.as_array().is_some_and(|a| {
        a.iter()
            .any(|f| f["options"]["prog"]["id"].as_u64() == Some(prog))
    })
}

/// The path-steering program (`causeway paths attach`) at TC ingress: a
/// TCX link from 6.6, a clsact ingress filter before; detach removes it,
/// its qdisc and its pins.
#[test]
fn path_steering_attaches_at_ingress_as_tcx_or_clsact_and_detach_removes_it() {
    require_root!();
    let (ns, iface) = veth_host();
    let tcx = kernel_version() >= (6, 6);
    let out = causeway_ok(&[
        "--netns",
        ns.name(),
        "paths",
        "attach",
        "--iface",
        &iface,
        "--path",
        "0=0x1000",
        "--path",
        "1=0x1001",
    ]);
    let want = if tcx { "tcx" } else { "clsact" };
    assert!(out.contains(want), "{out}");
    fact("tc-ingress-steer-mode", want);
    let pin = format!(
        "/sys/fs/bpf/causeway/steer/netns-{}/{iface}/prog/causeway_tc_steer",
        ns.name()
    );
    let (prog, as_tcx, links) = pinned_tc_program(&pin);
    assert_eq!(
        (as_tcx, filter_runs(&ns, &iface, "ingress", prog)),
        (tcx, !tcx),
        "prog {prog}: links {links}"
    );
    verifier_counts(&[prog]);
    let shown = causeway_ok(&["--netns", ns.name(), "paths", "show", "--json"]);
    assert!(shown.contains("\"mark\": 4097"), "{shown}");

    causeway_ok(&["--netns", ns.name(), "paths", "detach", "--iface", &iface]);
    assert!(!filter_runs(&ns, &iface, "ingress", prog));
    assert!(!std::path::Path::new(&pin).exists(), "pin left: {pin}");
    assert_gone(&ns, &iface, prog);
}

/// Prints translated/jited sizes and verified instructions of the programs
/// `ids` (read with aya: bpftool 7.1 does not print the count).
fn verifier_counts(ids: &[u64]) {
    for info in aya::programs::loaded_programs().flatten() {
        if !ids.contains(&u64::from(info.id())) {
            continue;
        }
        let Some(name) = info.name_as_str() else {
            continue;
        };
        fact(
            &format!("prog-{name}"),
            format!(
                "xlated={} jited={} verified_insns={}",
                info.size_translated().unwrap_or(0),
                info.size_jitted(),
                info.verified_instruction_count().unwrap_or(0)
            ),
        );
    }
}

const SHAPING_POLICY: &str = r#"
[shaping]
link_rate = "100mbit"

[[class]]
id = 1
name = "bulk"
shaping = { rate = "50mbit", ceil = "100mbit", over_limit = "drop" }

[[rule]]
priority = 10
protocol = "udp"
dst_port = 5201
class = "bulk"
action = "pass"
"#;
