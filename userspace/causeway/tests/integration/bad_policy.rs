//! Invalid policy files are refused by the real `causeway` binary with a
//! message naming the file, line, column and problem, and change nothing:
//! every pinned map of the attachment is byte-identical before and after
//! (dumped with `bpftool map dump pinned`), and so is the policy record.
//!
//! Needs root (namespaces, BPF); skips visibly otherwise.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use causeway_test_support::{netns, require_root};

use aya::maps::{Array, LpmTrie, Map, MapData, PerCpuArray};
use bpf_maps::{
    classifier::{
        ClassifierConfig, Ipv4LpmData, Ipv6LpmData, RuleAction, RuleBitmap, MAP_CLASSIFIER_CONFIG,
        MAP_DST_PORT, MAP_DST_V4, MAP_DST_V6, MAP_PROTO_DSCP, MAP_RULE_ACTIONS, MAP_SRC_PORT,
        MAP_SRC_V4, MAP_SRC_V6,
    },
    counters::{IngressCounters, MAP_INGRESS_COUNTERS},
};

const BIN: &str = env!("CARGO_BIN_EXE_causeway");

/// Lines 1-8: classes `default` (0) and `gradient` (1); rules start at line 9.
const HEADER: &str =
    "[[class]]\nid = 0\nname = \"default\"\n\n[[class]]\nid = 1\nname = \"gradient\"\n\n";

/// (case, file text, what stderr must contain: position and problem).
fn bad_files() -> Vec<(&'static str, String, Vec<&'static str>)> {
    let rule = |body: &str| format!("{HEADER}{body}");
    vec![
        (
            "unknown-class",
            rule("[[rule]]\npriority = 10\nclass = \"gradiant\"\n"),
            vec![":11:9: rule 1 (line 9): class 'gradiant' is not defined (defined classes: default, gradient)"],
        ),
        (
            "overlapping-priority",
            rule("[[rule]]\npriority = 10\nclass = \"gradient\"\n\n[[rule]]\npriority = 10\nclass = \"default\"\nprotocol = \"udp\"\n"),
            vec![":14:12: rule 2 (line 13): priority 10 is already used by rule 1 (line 9)"],
        ),
        (
            "prefix-host-bits",
            rule("[[rule]]\npriority = 10\nclass = \"gradient\"\nsrc = \"10.1.2.3/16\"\n"),
            vec![":12:7: rule 1 (line 9): src = \"10.1.2.3/16\": host bits are set", "10.1.0.0/16"],
        ),
        (
            "prefix-length",
            rule("[[rule]]\npriority = 10\nclass = \"gradient\"\ndst = \"10.0.0.0/40\"\n"),
            vec![":12:7: rule 1 (line 9): dst = \"10.0.0.0/40\": prefix length 40 is longer than 32 bits"],
        ),
        (
            "port-range-reversed",
            rule("[[rule]]\npriority = 10\nclass = \"gradient\"\nprotocol = \"udp\"\ndst_port = \"5100-5000\"\n"),
            vec![":13:12: rule 1 (line 9): dst_port: port range 5100-5000 is reversed"],
        ),
        (
            "unknown-field",
            rule("[[rule]]\npriority = 10\nclass = \"gradient\"\ndst_prot = 80\n"),
            vec![":12:", "unknown field `dst_prot`"],
        ),
        (
            "wrong-type",
            rule("[[rule]]\npriority = \"ten\"\nclass = \"gradient\"\n"),
            vec![":10:12: ", "invalid type: string \"ten\""],
        ),
        (
            "empty",
            String::new(),
            vec![":1:1: the policy is empty"],
        ),
        (
            "no-classes",
            "# rules only\n[[rule]]\npriority = 1\nclass = \"default\"\n".to_string(),
            vec![":2:1: the policy defines no classes"],
        ),
        (
            "duplicate-class-name",
            rule("[[class]]\nid = 2\nname = \"gradient\"\n"),
            vec![":11:8: class 3 (line 9): name 'gradient' is already used by class 2 (line 5)"],
        ),
    ]
}

fn causeway(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run causeway")
}

fn ok(args: &[&str]) -> String {
    let out = causeway(args);
    assert!(
        out.status.success(),
        "causeway {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The contents of every pinned map, in name order: the classifier maps
/// and the ingress counters read entry by entry with aya (`bpftool` takes
/// seconds for the 65,537-slot port arrays), any other map with
/// `bpftool -j map dump pinned`.
fn dump_maps(maps_dir: &Path) -> Vec<(String, String)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(maps_dir)
        .expect("maps dir")
        .map(|e| e.expect("entry").path())
        .collect();
    paths.sort();
    let dumped: Vec<(String, String)> = paths
        .iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            let contents = dump_with_aya(&name, path).unwrap_or_else(|| {
                let out = netns::run(
                    "bpftool",
                    &["-j", "map", "dump", "pinned", path.to_str().unwrap()],
                );
                String::from_utf8_lossy(&out.stdout).into_owned()
            });
            (name, contents)
        })
        .collect();
    let aya_dumped = dumped
        .iter()
        .filter(|(n, _)| CLASSIFIER_MAPS.contains(&n.as_str()))
        .count();
    assert_eq!(
        aya_dumped,
        CLASSIFIER_MAPS.len(),
        "classifier maps missing in {maps_dir:?}"
    );
    dumped
}

const CLASSIFIER_MAPS: [&str; 10] = [
    MAP_CLASSIFIER_CONFIG,
    MAP_SRC_V4,
    MAP_DST_V4,
    MAP_SRC_V6,
    MAP_DST_V6,
    MAP_PROTO_DSCP,
    MAP_SRC_PORT,
    MAP_DST_PORT,
    MAP_RULE_ACTIONS,
    MAP_INGRESS_COUNTERS,
];

/// Every entry of a classifier map, `Debug`-formatted (the types have no
/// padding, so equal text means equal bytes); `None` for other maps.
fn dump_with_aya(name: &str, path: &Path) -> Option<String> {
    fn array<V: aya::Pod + std::fmt::Debug>(path: &Path) -> String {
        let map = Array::<_, V>::try_from(Map::Array(MapData::from_pin(path).unwrap())).unwrap();
        map.iter().map(|v| format!("{:?}\n", v.unwrap())).collect()
    }
    fn lpm<K: aya::Pod + std::fmt::Debug>(path: &Path) -> String {
        let map =
            LpmTrie::<_, K, RuleBitmap>::try_from(Map::LpmTrie(MapData::from_pin(path).unwrap()))
                .unwrap();
        let mut entries: Vec<String> = map
            .iter()
            .map(|e| {
                let (k, v) = e.unwrap();
                format!("{}/{:?} => {v:?}\n", k.prefix_len(), k.data())
            })
            .collect();
        entries.sort();
        entries.concat()
    }
    Some(match name {
        MAP_CLASSIFIER_CONFIG => array::<ClassifierConfig>(path),
        MAP_SRC_V4 | MAP_DST_V4 => lpm::<Ipv4LpmData>(path),
        MAP_SRC_V6 | MAP_DST_V6 => lpm::<Ipv6LpmData>(path),
        MAP_PROTO_DSCP | MAP_SRC_PORT | MAP_DST_PORT => array::<RuleBitmap>(path),
        MAP_RULE_ACTIONS => array::<RuleAction>(path),
        MAP_INGRESS_COUNTERS => {
            let map = PerCpuArray::<_, IngressCounters>::try_from(Map::PerCpuArray(
                MapData::from_pin(path).unwrap(),
            ))
            .unwrap();
            map.iter()
                .map(|v| format!("{:?}\n", &*v.unwrap()))
                .collect()
        }
        // A ring buffer has no entries to dump (bpftool refuses it): the
        // programs' log records, which no policy change writes.
        bpf_maps::log::MAP_LOG_RECORDS => String::new(),
        _ => return None,
    })
}

/// Detaches on drop, even when an assertion fails.
struct Detach<'a>(&'a str, &'a str);

impl Drop for Detach<'_> {
    fn drop(&mut self) {
        let _ = causeway(&["--netns", self.0, "detach", "--iface", self.1]);
    }
}

#[test]
fn invalid_policies_are_refused_and_change_nothing() {
    require_root!("invalid_policies_are_refused_and_change_nothing");
    let ns = netns::Netns::new("cwp");
    let iface = netns::unique_name("dp");
    // A veth pair inside one namespace, without addresses (and IPv6 off):
    // nothing arrives on it, so even the counters stay still.
    let peer = netns::unique_name("dq");
    ns.ip(&["link", "add", &iface, "type", "veth", "peer", "name", &peer]);
    ns.ip(&["link", "set", &iface, "up"]);
    ns.ip(&["link", "set", &peer, "up"]);
    let dir = std::env::temp_dir().join(format!("causeway-bad-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(&good, causeway::policy::EXAMPLE).unwrap();

    ok(&[
        "--netns",
        ns.name(),
        "attach",
        "--iface",
        &iface,
        "--mode",
        "skb",
        "--policy",
        good.to_str().unwrap(),
    ]);
    let _detach = Detach(ns.name(), &iface);
    let maps_dir = PathBuf::from(format!(
        "/sys/fs/bpf/causeway/netns-{}/{iface}/maps",
        ns.name()
    ));
    let record = PathBuf::from(format!(
        "/run/causeway/netns-{}/{iface}/policy.json",
        ns.name()
    ));
    let maps_before = dump_maps(&maps_dir);
    let record_before = std::fs::read_to_string(&record).unwrap();
    let show_before = ok(&["--netns", ns.name(), "policy", "show", "--iface", &iface]);
    assert!(show_before.contains("generation 1"), "{show_before}");

    for (case, text, needles) in bad_files() {
        let file = dir.join(format!("{case}.toml"));
        std::fs::write(&file, &text).unwrap();
        let path = file.to_str().unwrap();
        for args in [
            vec![
                "--netns",
                ns.name(),
                "policy",
                "apply",
                "--iface",
                &iface,
                path,
            ],
            vec!["--netns", ns.name(), "policy", "apply", path],
            vec!["policy", "check", path],
        ] {
            let out = causeway(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{case}: {args:?} succeeded");
            assert!(
                stderr.contains(path),
                "{case}: the message does not name the file: {stderr}"
            );
            for needle in &needles {
                assert!(
                    stderr.contains(needle),
                    "{case}: expected `{needle}` in: {stderr}"
                );
            }
        }
        assert_eq!(
            dump_maps(&maps_dir),
            maps_before,
            "{case}: the maps changed"
        );
        assert_eq!(
            std::fs::read_to_string(&record).unwrap(),
            record_before,
            "{case}: the record changed"
        );
    }
    let show_after = ok(&["--netns", ns.name(), "policy", "show", "--iface", &iface]);
    assert_eq!(show_after, show_before);

    // The same maps do change when a valid policy is applied: the dump can
    // see a change, so the equalities above mean something.
    let other = dir.join("other.toml");
    std::fs::write(
        &other,
        format!("{HEADER}[[rule]]\npriority = 1\nprotocol = \"tcp\"\nclass = \"gradient\"\n"),
    )
    .unwrap();
    let applied = ok(&[
        "--netns",
        ns.name(),
        "policy",
        "apply",
        "--iface",
        &iface,
        other.to_str().unwrap(),
    ]);
    assert!(applied.contains("generation 2"), "{applied}");
    assert_ne!(dump_maps(&maps_dir), maps_before);
    std::fs::remove_dir_all(&dir).unwrap();
}
