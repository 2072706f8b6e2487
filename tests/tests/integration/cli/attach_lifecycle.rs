//! Attach, re-attach, restart-style adoption and detach through the real
//! `causeway` binary leave exactly one program and link while attached and
//! nothing at all afterwards — checked with the kernel's own view
//! (`bpftool net`, `bpftool link`, `bpftool prog`, `bpftool map`) and with
//! the bpffs and state directories.

use causeway_test_support::{bpf::XDP_CLASSIFIER, require_root};
use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use causeway_test_support::netns::{run, unique_name, Netns};
use causeway_tests::causeway_cli::{causeway, causeway_ok, Attachment};
use serde_json::Value;

/// A namespace holding a veth pair (both ends), named `<ns>`/`<iface>`.
struct Host {
    ns: Netns,
    iface: String,
}

fn host_with_iface(iface: &str) -> Host {
    let ns = Netns::new("cwl");
    ns.ip(&[
        "link",
        "add",
        iface,
        "type",
        "veth",
        "peer",
        "name",
        &format!("{iface}p"),
    ]);
    ns.ip(&["link", "set", iface, "up"]);
    Host {
        ns,
        iface: iface.to_string(),
    }
}

fn bpftool(args: &[&str]) -> Option<Value> {
    let out = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .output()
        .expect("run bpftool");
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("bpftool prints JSON"))
}

/// XDP programs the kernel has on `iface` (`bpftool net` inside the namespace).
fn xdp_on(ns: &Netns, iface: &str) -> Vec<(u64, String)> {
    let out = ns.exec(&["bpftool", "-j", "net", "show", "dev", iface]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("bpftool net JSON");
    v[0]["xdp"]
        .as_array()
        .expect("xdp list")
        .iter()
        .map(|x| {
            (
                x["id"].as_u64().unwrap(),
                x["mode"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Links of any kind whose program is `prog_id`.
fn links_of(prog_id: u64) -> usize {
    bpftool(&["link", "show"])
        .expect("bpftool link show")
        .as_array()
        .expect("link list")
        .iter()
        .filter(|l| l["prog_id"].as_u64() == Some(prog_id))
        .count()
}

/// `status --json` for one namespace: (health, prog id, link id) per iface.
fn status(ns: &str) -> Vec<Value> {
    let out = causeway_ok(&["--netns", ns, "status", "--json"]);
    serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn ids(ns: &str, iface: &str) -> (u64, u64) {
    let all = status(ns);
    let s = all
        .iter()
        .find(|s| s["iface"] == iface)
        .unwrap_or_else(|| panic!("{iface} not in status: {all:?}"));
    assert_eq!(s["health"], "live", "{s}");
    (
        s["prog_id"].as_u64().unwrap(),
        s["link_id"].as_u64().unwrap(),
    )
}

fn pin_dir(ns: &str, iface: &str) -> PathBuf {
    PathBuf::from(format!("/sys/fs/bpf/causeway/netns-{ns}/{iface}"))
}

/// The kernel frees programs and maps after an RCU grace period: wait.
fn wait_gone(what: &str, id: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while bpftool(&[what, "show", "id", &id.to_string()]).is_some() {
        assert!(Instant::now() < deadline, "{what} {id} still exists");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_all_gone(ns: &Netns, iface: &str, prog: u64, link: u64, maps: &[u64]) {
    assert!(xdp_on(ns, iface).is_empty());
    assert!(
        bpftool(&["link", "show", "id", &link.to_string()]).is_none(),
        "link {link} remains"
    );
    wait_gone("prog", prog);
    for map in maps {
        wait_gone("map", *map);
    }
    assert!(!pin_dir(ns.name(), iface).exists());
    assert!(!PathBuf::from(format!("/sys/fs/bpf/causeway/netns-{}", ns.name())).exists());
    assert!(!PathBuf::from(format!("/run/causeway/netns-{}", ns.name())).exists());
    assert!(status(ns.name()).is_empty());
}

#[test]
fn reattach_is_idempotent_and_detach_leaves_nothing() {
    require_root!("reattach_is_idempotent_and_detach_leaves_nothing");
    let h = host_with_iface(&unique_name("lc"));
    let ns = h.ns.name().to_string();
    let attached = Attachment::new(&ns, &h.iface, &["--mode", "driver"]);
    let (prog, link) = ids(&ns, &h.iface);
    assert_eq!(status(&ns)[0]["same_build"], true);
    assert_eq!(xdp_on(&h.ns, &h.iface), [(prog, "driver".to_string())]);
    assert_eq!(links_of(prog), 1);
    let info = bpftool(&["prog", "show", "id", &prog.to_string()]).expect("prog exists");
    assert_eq!(info["name"], XDP_CLASSIFIER);
    let maps: Vec<u64> = info["map_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_u64().unwrap())
        .collect();
    assert!(!maps.is_empty());

    // Attaching again (same mode, or auto) adopts the pinned attachment.
    for extra in [&["--mode", "driver"][..], &[]] {
        let mut args = vec!["--netns", &ns, "attach", "--iface", &h.iface];
        args.extend_from_slice(extra);
        let out = causeway_ok(&args);
        assert!(out.contains("already attached"), "{out}");
        assert_eq!(ids(&ns, &h.iface), (prog, link));
        assert_eq!(xdp_on(&h.ns, &h.iface), [(prog, "driver".to_string())]);
        assert_eq!(links_of(prog), 1);
    }
    // Another mode is refused, and changes nothing.
    let out = causeway(&[
        "--netns", &ns, "attach", "--iface", &h.iface, "--mode", "skb",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("detach it before attaching in mode skb"));
    assert_eq!(ids(&ns, &h.iface), (prog, link));

    // A later process finds the maps through the pins.
    let policy =
        std::env::temp_dir().join(format!("causeway-lifecycle-{}.toml", std::process::id()));
    std::fs::write(&policy, causeway::policy::EXAMPLE).unwrap();
    let out = causeway_ok(&["--netns", &ns, "policy", "apply", policy.to_str().unwrap()]);
    assert!(out.contains("generation 1"), "{out}");
    let s = status(&ns);
    assert_eq!(
        (s[0]["generation"].as_u64(), s[0]["rule_count"].as_u64()),
        (Some(1), Some(6))
    );
    std::fs::remove_file(&policy).unwrap();

    drop(attached); // causeway detach
    assert_all_gone(&h.ns, &h.iface, prog, link, &maps);
    let out = causeway(&["--netns", &ns, "detach", "--iface", &h.iface]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not attached"));
}

#[test]
fn pins_of_a_deleted_interface_are_replaced_or_removed() {
    require_root!("pins_of_a_deleted_interface_are_replaced_or_removed");
    let h = host_with_iface(&unique_name("st"));
    let ns = h.ns.name().to_string();
    let _attached = Attachment::new(&ns, &h.iface, &["--mode", "skb"]);
    let (old_prog, old_link) = ids(&ns, &h.iface);

    // The interface goes away: the kernel detaches the link, the pins stay.
    h.ns.ip(&["link", "del", &h.iface]);
    let s = status(&ns);
    assert!(
        s[0]["health"].as_str().unwrap().contains("defunct"),
        "{s:?}"
    );

    // Same name again: attach replaces the stale pins with a new attachment.
    h.ns.ip(&[
        "link",
        "add",
        &h.iface,
        "type",
        "veth",
        "peer",
        "name",
        &format!("{}p", h.iface),
    ]);
    h.ns.ip(&["link", "set", &h.iface, "up"]);
    let out = causeway_ok(&[
        "--netns", &ns, "attach", "--iface", &h.iface, "--mode", "skb",
    ]);
    assert!(out.contains("removed stale pins"), "{out}");
    let (prog, link) = ids(&ns, &h.iface);
    assert_ne!((prog, link), (old_prog, old_link));
    wait_gone("prog", old_prog);
    assert_eq!(xdp_on(&h.ns, &h.iface), [(prog, "generic".to_string())]);

    // Gone again, and detached afterwards: detach still removes everything.
    h.ns.ip(&["link", "del", &h.iface]);
    let out = causeway_ok(&["--netns", &ns, "detach", "--iface", &h.iface]);
    assert!(out.contains(&h.iface), "{out}");
    wait_gone("prog", prog);
    assert!(!pin_dir(&ns, &h.iface).exists());
    assert!(status(&ns).is_empty());
}

#[test]
fn equal_interface_names_in_two_namespaces_do_not_clash() {
    require_root!("equal_interface_names_in_two_namespaces_do_not_clash");
    let name = unique_name("eq");
    let (h1, h2) = (host_with_iface(&name), host_with_iface(&name));
    let a1 = Attachment::new(h1.ns.name(), &name, &[]);
    let _a2 = Attachment::new(h2.ns.name(), &name, &[]);
    let (p1, _) = ids(h1.ns.name(), &name);
    let (p2, _) = ids(h2.ns.name(), &name);
    assert_ne!(p1, p2);
    assert_eq!(xdp_on(&h1.ns, &name)[0].0, p1);
    assert_eq!(xdp_on(&h2.ns, &name)[0].0, p2);
    // Without --netns, status lists both.
    let all = causeway_ok(&["status", "--json"]);
    let all: Value = serde_json::from_str(&all).unwrap();
    let ours = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["iface"] == name.as_str())
        .count();
    assert_eq!(ours, 2);
    drop(a1);
    wait_gone("prog", p1);
    assert_eq!(ids(h2.ns.name(), &name).0, p2);
    assert_eq!(xdp_on(&h2.ns, &name)[0].0, p2);
}

/// Detaches with custom roots, unmounts the bpffs and removes the
/// directories, also when the test fails.
struct CustomRoots {
    base: PathBuf,
    ns: String,
    iface: String,
}

impl CustomRoots {
    fn args<'a>(&'a self, pins: &'a str, state: &'a str) -> Vec<&'a str> {
        vec![
            "--pin-root",
            pins,
            "--state-dir",
            state,
            "--netns",
            &self.ns,
        ]
    }
}

impl Drop for CustomRoots {
    fn drop(&mut self) {
        let pins = self.base.join("pins");
        let state = self.base.join("state");
        let (pins, state) = (pins.to_str().unwrap(), state.to_str().unwrap());
        let mut args = self.args(pins, state);
        args.extend(["detach", "--iface", &self.iface]);
        let _ = causeway(&args);
        let _ = Command::new("umount").arg(pins).status();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[test]
fn a_pin_root_outside_sys_gets_its_own_bpffs() {
    require_root!("a_pin_root_outside_sys_gets_its_own_bpffs");
    let h = host_with_iface(&unique_name("pr"));
    let roots = CustomRoots {
        base: std::env::temp_dir().join(format!("causeway-roots-{}", std::process::id())),
        ns: h.ns.name().to_string(),
        iface: h.iface.clone(),
    };
    let pins_dir = roots.base.join("pins");
    let state_dir = roots.base.join("state");
    let (pins, state) = (pins_dir.to_str().unwrap(), state_dir.to_str().unwrap());
    let mut attach = roots.args(pins, state);
    attach.extend(["attach", "--iface", &h.iface]);
    causeway_ok(&attach);

    // A bpffs was mounted at the custom root (/tmp is not one), and the
    // pins are there, not under /sys/fs/bpf.
    let fs = nix::sys::statfs::statfs(&pins_dir).unwrap();
    assert_eq!(fs.filesystem_type(), nix::sys::statfs::BPF_FS_MAGIC);
    let scope = format!("netns-{}", h.ns.name());
    assert!(pins_dir
        .join(&scope)
        .join(&h.iface)
        .join("link")
        .join(XDP_CLASSIFIER)
        .exists());
    assert!(state_dir
        .join(&scope)
        .join(&h.iface)
        .join("attach.json")
        .exists());
    assert!(!pin_dir(h.ns.name(), &h.iface).exists());
    assert!(status(h.ns.name()).is_empty());
    let mut st = roots.args(pins, state);
    st.extend(["status", "--json"]);
    let listed: Value = serde_json::from_str(&causeway_ok(&st)).unwrap();
    let prog = listed[0]["prog_id"]
        .as_u64()
        .expect("listed under the custom root");
    assert_eq!(xdp_on(&h.ns, &h.iface)[0].0, prog);

    let mut detach = roots.args(pins, state);
    detach.extend(["detach", "--iface", &h.iface]);
    causeway_ok(&detach);
    wait_gone("prog", prog);
    assert!(!pins_dir.join(&scope).exists());
    assert!(!state_dir.join(&scope).exists());
}

#[test]
fn pins_of_a_deleted_namespace_can_still_be_removed() {
    require_root!("pins_of_a_deleted_namespace_can_still_be_removed");
    let h = host_with_iface(&unique_name("gn"));
    let ns = h.ns.name().to_string();
    let _attached = Attachment::new(&ns, &h.iface, &[]);
    let (prog, _) = ids(&ns, &h.iface);
    run("ip", &["netns", "del", &ns]);

    // The kernel destroys the namespace's devices in the background; the
    // link then becomes defunct. status works without the namespace.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = status(&ns);
        if s[0]["health"].as_str().unwrap().contains("defunct") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "link never became defunct: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Attaching needs the namespace and says so; detaching does not.
    let out = causeway(&["--netns", &ns, "attach", "--iface", &h.iface]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot enter network namespace"));
    causeway_ok(&["--netns", &ns, "detach", "--iface", &h.iface]);
    wait_gone("prog", prog);
    assert!(!pin_dir(&ns, &h.iface).exists());
    assert!(status(&ns).is_empty());
}

/// `attach --policy` with a paced (EDT) class: `fq` at the root where the
/// kernel has it (the VM stage's guests), and where it does not (the
/// development host) a refusal that names `fq` and leaves nothing behind.
#[test]
fn a_paced_policy_gets_fq_or_a_clean_refusal() {
    require_root!("a_paced_policy_gets_fq_or_a_clean_refusal");
    let iface = unique_name("cwe");
    let host = host_with_iface(&iface);
    let dir = std::env::temp_dir().join(format!("causeway-edt-attach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("policy.toml");
    std::fs::write(
        &file,
        r#"
[shaping]
link_rate = "1gbit"
[[class]]
id = 5
name = "bulk"
shaping = { rate = "20mbit", pacing = "edt", edt_horizon_ms = 200 }
[[rule]]
priority = 20
protocol = "tcp"
dst_port = 5201
class = "bulk"
"#,
    )
    .expect("write policy");
    let policy = file.to_str().expect("utf-8 path");
    let args = [
        "--netns",
        host.ns.name(),
        "attach",
        "--iface",
        &iface,
        "--policy",
        policy,
    ];
    let out = causeway(&args);
    let root = String::from_utf8_lossy(
        &host
            .ns
            .exec(&["tc", "qdisc", "show", "dev", &iface, "root"])
            .stdout,
    )
    .into_owned();
    if out.status.success() {
        let _attached = Attachment {
            netns: host.ns.name().to_string(),
            iface: iface.clone(),
        };
        assert!(root.starts_with("qdisc fq ca: root"), "{root}");
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("no fq qdisc (CONFIG_NET_SCH_FQ)"),
            "{stderr}"
        );
        assert!(!root.contains("ca:"), "a refused attach left {root}");
        assert!(xdp_on(&host.ns, &iface).is_empty(), "XDP left behind");
        let status = causeway_ok(&["--netns", host.ns.name(), "status", "--json"]);
        assert!(!status.contains(&iface), "{status}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
