//! A failed policy apply changes nothing: policy A is applied to a veth in
//! a namespace made here, then policy B is applied with a fault at each
//! step of the transaction (invalid rules; a map write the kernel refuses;
//! the TC program step; a real `tc` batch that fails half-way; the shaping
//! table; the records; the final flip). After each failure the maps (dumped
//! by bpftool), the qdisc and classes (`tc -d`), the programs on the
//! interface (`bpftool net`), the pins and the record files are
//! byte-identical to before. Needs root; fails under `CI=true` without it.

use std::{collections::BTreeMap, fs::File, process::Command};

use causeway_test_support::require_root;

use causeway::datapath::{
    ApplyError, ApplyStep, AttachMode, Datapath, FaultPlan, Layout, NetnsScope, PolicyInput,
};

const SHAPED: &str = r#"
[shaping]
link_rate = "1gbit"

[[class]]
id = 3
name = "control"
shaping = { rate = "10mbit", ceil = "100mbit", priority = 0, over_limit = "drop" }

[[class]]
id = 5
name = "bulk"
shaping = { rate = "100mbit", ceil = "200mbit" }

[[rule]]
priority = 10
protocol = "udp"
dst_port = 7007
class = "control"

[[rule]]
priority = 20
src = "10.9.0.0/16"
protocol = "tcp"
dst_port = "5201-5210"
class = "bulk"
"#;

const SHAPED_B: &str = r#"
[shaping]
link_rate = "500mbit"

[[class]]
id = 4
name = "video"
shaping = { rate = "50mbit", ceil = "300mbit", over_limit = "ecn" }

[[rule]]
priority = 5
dst = "2001:db8::/32"
protocol = "udp"
class = "video"

[[rule]]
priority = 6
src = "192.168.7.0/24"
dscp = "af41"
class = "video"
"#;

pub(crate) const UNSHAPED: &str = r#"
[[class]]
id = 2
name = "gradient"

[[rule]]
priority = 1
dst = "10.1.2.0/24"
protocol = "udp"
src_port = 4000
class = "gradient"
"#;

pub(crate) const INVALID: &str = r#"
[[class]]
id = 2
name = "gradient"

[[rule]]
priority = 1
dst = "10.1.2.300/24"
class = "gradient"
"#;

/// The namespace, its veth, and the test's pin and state roots; all
/// removed on drop, also when the test panics.
pub(crate) struct Setup {
    pub(crate) ns: String,
    pub(crate) iface: String,
    pub(crate) layout: Layout,
}

impl Setup {
    pub(crate) fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{}x{n}", std::process::id());
        let ns = format!("cwundo{id}");
        let iface = format!("cwu{id}");
        run("ip", &["netns", "add", &ns]);
        let setup = Self {
            layout: Layout {
                pin_root: format!("/sys/fs/bpf/causeway-undo-{id}").into(),
                state_root: std::env::temp_dir().join(format!("causeway-undo-{id}")),
            },
            ns,
            iface,
        };
        for key in ["all", "default"] {
            let arg = format!("net.ipv6.conf.{key}.disable_ipv6=1");
            run("ip", &["netns", "exec", &setup.ns, "sysctl", "-qw", &arg]);
        }
        setup.add_veth(&setup.iface);
        setup
    }

    /// A veth pair `iface`/`iface`p in the namespace, both ends up.
    fn add_veth(&self, iface: &str) {
        let peer = format!("{iface}p");
        let ip = |args: &[&str]| {
            let mut all = vec!["-n", self.ns.as_str()];
            all.extend_from_slice(args);
            run("ip", &all);
        };
        ip(&["link", "add", iface, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", iface, "up"]);
        ip(&["link", "set", &peer, "up"]);
    }

    /// Runs `f` on a thread inside the namespace (children it spawns, `tc`
    /// and `bpftool`, inherit it).
    pub(crate) fn in_ns<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.ns);
        std::thread::spawn(move || {
            let file = File::open(&path).expect("open the namespace");
            nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }

    pub(crate) fn datapath(&self) -> Datapath {
        Datapath::new(self.layout.clone(), NetnsScope::Named(self.ns.clone()))
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = std::fs::remove_dir_all(&self.layout.pin_root);
        let _ = std::fs::remove_dir_all(&self.layout.state_root);
    }
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Maps the kernel writes by itself (counters, caches, bucket state, log
/// records and their rate limits; a ring buffer cannot be dumped anyway).
const RUNTIME_MAPS: [&str; 7] = [
    "CW_ADDR_CACHE",
    "CW_IN_COUNT",
    "CW_EG_BUCKETS",
    "CW_EG_COUNT",
    "CW_CLK_COUNT",
    "CW_LOG_RATE",
    "AYA_LOGS",
];

/// The large rule-bitmap arrays, read with aya: bpftool needs seconds for
/// each. Non-zero slots, one per line.
const BITMAP_ARRAYS: [&str; 3] = ["CW_SPORT", "CW_DPORT", "CW_PROTO_DSCP"];

fn dump_bitmaps(path: &std::path::Path) -> String {
    use aya::maps::{Array, Map, MapData};
    use bpf_maps::classifier::RuleBitmap;
    use std::fmt::Write as _;
    let data = MapData::from_pin(path).expect("open the pinned map");
    let map: Array<MapData, RuleBitmap> = Map::Array(data).try_into().expect("a bitmap array");
    let mut out = String::new();
    for (i, value) in map.iter().enumerate() {
        let value = value.expect("read a slot");
        if value != RuleBitmap::default() {
            let _ = writeln!(out, "{i}: {:x?}", value.words);
        }
    }
    out
}

/// Everything an apply may change, as text, by name.
fn state(ns: &str, iface: &str, layout: &Layout) -> BTreeMap<String, String> {
    let scope = NetnsScope::Named(ns.to_string());
    let paths = layout.iface(&scope, iface).expect("paths");
    let mut out = BTreeMap::new();
    let mut pins = Vec::new();
    for dir in [&paths.maps_dir, &paths.prog_dir, &paths.link_dir] {
        for entry in std::fs::read_dir(dir).expect("pin dir") {
            let path = entry.expect("entry").path();
            pins.push(path.display().to_string());
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if dir == &paths.maps_dir && !RUNTIME_MAPS.contains(&name) {
                let shown = path.to_str().expect("utf-8 path");
                let dump = if BITMAP_ARRAYS.contains(&name) {
                    dump_bitmaps(&path)
                } else {
                    run("bpftool", &["map", "dump", "pinned", shown])
                };
                out.insert(format!("map {name}"), dump);
            }
        }
    }
    pins.sort();
    out.insert("pins".into(), pins.join("\n"));
    for (what, args) in [
        ("qdiscs", vec!["-d", "qdisc", "show", "dev", iface]),
        ("classes", vec!["-d", "class", "show", "dev", iface]),
    ] {
        out.insert(what.into(), run("tc", &args));
    }
    out.insert(
        "programs".into(),
        run("bpftool", &["net", "show", "dev", iface]),
    );
    for entry in std::fs::read_dir(&paths.state_dir).expect("state dir") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("record");
        out.insert(
            format!("record {}", path.display()),
            String::from_utf8_lossy(&bytes).into_owned(),
        );
    }
    out
}

/// Asserts equality and names the first part and line that differ.
fn assert_same(case: &str, before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) {
    let names = |m: &BTreeMap<String, String>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(before), names(after), "{case}: parts differ");
    for (name, text) in before {
        if *text != after[name] {
            let line = text
                .lines()
                .zip(after[name].lines())
                .find(|(a, b)| a != b)
                .map_or_else(|| "(lengths differ)".into(), |(a, b)| format!("{a} -> {b}"));
            panic!("{case}: {name} changed: {line}");
        }
    }
}

fn input(name: &str, text: &str) -> PolicyInput {
    PolicyInput {
        source: name.into(),
        text: text.into(),
    }
}

/// Applies `from`, then `to` with each fault in `faults`: each must fail,
/// be restored (not left inconsistent), and leave the state as `from` left
/// it. Then `to` applies cleanly and the state changes.
fn check(setup: &Setup, from: &'static str, to: &'static str, faults: &[ApplyStep]) {
    let (dp, iface) = (setup.datapath(), setup.iface.clone());
    let (ns, layout) = (setup.ns.clone(), setup.layout.clone());
    let faults = faults.to_vec();
    setup.in_ns(move || {
        let locked = dp.lock().expect("lock");
        let ifaces = [iface.clone()];
        locked
            .apply(&ifaces, &input("a.toml", from), &FaultPlan::NONE)
            .expect("policy A applies");
        let before = state(&ns, &iface, &layout);

        let err = locked
            .apply(&ifaces, &input("bad.toml", INVALID), &FaultPlan::NONE)
            .expect_err("invalid rules are refused");
        assert!(matches!(err, ApplyError::Invalid(_)), "{err}");
        assert_same("invalid rules", &before, &state(&ns, &iface, &layout));

        for step in faults {
            let err = locked
                .apply(&ifaces, &input("b.toml", to), &FaultPlan::fail_at(step))
                .expect_err("the fault fails the apply");
            match &err {
                ApplyError::Failed { step: failed, .. } => assert_eq!(*failed, step, "{err}"),
                other => panic!("{step:?}: not restored cleanly: {other}"),
            }
            eprintln!("{step:?}: {err}");
            assert_same(&format!("{step:?}"), &before, &state(&ns, &iface, &layout));
        }

        let applied = locked
            .apply(&ifaces, &input("b.toml", to), &FaultPlan::NONE)
            .expect("policy B applies without a fault");
        assert_eq!(applied[0].iface, iface);
        let after = state(&ns, &iface, &layout);
        assert_ne!(
            before, after,
            "applying B changed nothing: the check is blind"
        );
    });
}

const ALL_STEPS: [ApplyStep; 6] = [
    ApplyStep::StageRules,
    ApplyStep::TcProgram,
    ApplyStep::Htb,
    ApplyStep::ShaperTable,
    ApplyStep::Records,
    ApplyStep::CommitRules,
];

#[test]
fn a_failed_apply_at_any_step_restores_everything() {
    require_root!();
    let setup = Setup::new();
    let (dp, iface) = (setup.datapath(), setup.iface.clone());
    setup.in_ns(move || {
        dp.lock()
            .expect("lock")
            .attach(&iface, AttachMode::Skb, None, &FaultPlan::NONE)
            .expect("attach");
    });
    // No shaping yet → shaping: the TC program and HTB are new.
    check(&setup, UNSHAPED, SHAPED, &ALL_STEPS);
    // Shaping → other shaping: HTB and the table are replaced.
    check(&setup, SHAPED, SHAPED_B, &ALL_STEPS);
    // Shaping → none: HTB is removed (TC stays, as before).
    let unshaped_steps: Vec<ApplyStep> = ALL_STEPS
        .into_iter()
        .filter(|s| *s != ApplyStep::TcProgram)
        .collect();
    check(&setup, SHAPED_B, UNSHAPED, &unshaped_steps);

    let (dp, iface, layout) = (setup.datapath(), setup.iface.clone(), setup.layout.clone());
    let ns = setup.ns.clone();
    setup.in_ns(move || {
        let done = dp
            .lock()
            .expect("lock")
            .detach(&iface, true)
            .expect("detach");
        assert!(!done.htb_removed, "the last policy had no shaping");
        let paths = layout.iface(&NetnsScope::Named(ns), &iface).expect("paths");
        assert!(!paths.pin_dir.exists() && !paths.state_dir.exists());
        assert_eq!(run("tc", &["class", "show", "dev", &iface]), "");
    });
}

#[test]
fn a_failed_attach_with_a_policy_leaves_nothing() {
    require_root!();
    let setup = Setup::new();
    let (dp, iface, layout) = (setup.datapath(), setup.iface.clone(), setup.layout.clone());
    let ns = setup.ns.clone();
    setup.in_ns(move || {
        let paths = layout.iface(&NetnsScope::Named(ns), &iface).expect("paths");
        let qdiscs = run("tc", &["-d", "qdisc", "show", "dev", &iface]);
        for step in [ApplyStep::TcProgram, ApplyStep::Htb, ApplyStep::Records] {
            let err = dp
                .lock()
                .expect("lock")
                .attach(
                    &iface,
                    AttachMode::Skb,
                    Some(&input("a.toml", SHAPED)),
                    &FaultPlan::fail_at(step),
                )
                .expect_err("the fault fails the attach");
            assert!(matches!(err, ApplyError::Failed { .. }), "{step:?}: {err}");
            assert!(!paths.pin_dir.exists(), "{step:?}: pins remain");
            assert!(!paths.state_dir.exists(), "{step:?}: records remain");
            let programs = run("bpftool", &["net", "show", "dev", &iface]);
            assert!(!programs.contains("causeway"), "{step:?}: {programs}");
            assert_eq!(
                run("tc", &["-d", "qdisc", "show", "dev", &iface]),
                qdiscs,
                "{step:?}"
            );
        }
    });
}

#[test]
fn a_failure_on_the_second_interface_restores_the_first() {
    require_root!();
    let setup = Setup::new();
    let second = format!("{}b", setup.iface);
    setup.add_veth(&second);
    let (dp, layout, ns) = (setup.datapath(), setup.layout.clone(), setup.ns.clone());
    let ifaces = [setup.iface.clone(), second];
    setup.in_ns(move || {
        let locked = dp.lock().expect("lock");
        for iface in &ifaces {
            locked
                .attach(iface, AttachMode::Skb, None, &FaultPlan::NONE)
                .expect("attach");
        }
        locked
            .apply(&ifaces, &input("a.toml", SHAPED), &FaultPlan::NONE)
            .expect("policy A applies to both");
        let both = || {
            ifaces
                .iter()
                .map(|i| state(&ns, i, &layout))
                .collect::<Vec<_>>()
        };
        let before = both();
        // The first interface is changed completely (its rules flipped
        // live) before the second fails: its rollback flips back.
        for step in ALL_STEPS {
            let err = locked
                .apply(
                    &ifaces,
                    &input("b.toml", SHAPED_B),
                    &FaultPlan::fail_at(step).on_target(1),
                )
                .expect_err("the fault fails the apply");
            match &err {
                ApplyError::Failed { iface, step: s, .. } => {
                    assert_eq!((iface, *s), (&ifaces[1], step), "{err}")
                }
                other => panic!("{step:?}: not restored cleanly: {other}"),
            }
            for (i, (b, a)) in before.iter().zip(both()).enumerate() {
                assert_same(&format!("{step:?} on interface {i}"), b, &a);
            }
        }
    });
}
