//! The Kubernetes manifest of docs/deploy: parsed, its agent pod checked
//! for exactly the capabilities it needs (not privileged), the host network
//! and the host's bpffs, and its agent configuration validated by the
//! agent's own parser. Nothing runs in a cluster.

use std::collections::BTreeSet;

use causeway::agent::AgentConfig;
use serde::Deserialize;
use serde_yaml_ng::Value;

const MANIFEST: &str = include_str!("../../../../docs/deploy/agent-daemonset.yaml");

fn documents() -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(MANIFEST)
        .map(|d| Value::deserialize(d).expect("every document parses"))
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} in the manifest");
    found[0]
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("a list: {v:?}"))
        .iter()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

#[test]
fn the_agent_daemonset_has_exactly_the_capabilities_it_needs() {
    let docs = documents();
    let ds = of_kind(&docs, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], Value::Bool(true));
    let containers = pod["containers"].as_sequence().expect("containers");
    assert_eq!(containers.len(), 1, "the agent alone");
    let init = pod["initContainers"]
        .as_sequence()
        .cloned()
        .unwrap_or_default();
    for c in containers.iter().chain(&init) {
        let sc = &c["securityContext"];
        assert_ne!(sc["privileged"], Value::Bool(true), "{c:?}");
        assert_ne!(sc["allowPrivilegeEscalation"], Value::Bool(true));
    }
    let agent = &containers[0];
    let caps = &agent["securityContext"]["capabilities"];
    let want: BTreeSet<String> = ["BPF", "NET_ADMIN", "PERFMON"].map(String::from).into();
    assert_eq!(strings(&caps["add"]), want);
    assert_eq!(strings(&caps["drop"]), ["ALL".to_string()].into());
    assert_eq!(
        pod["securityContext"]["privileged"],
        Value::Null,
        "nothing privileged at pod level either"
    );

    // The host's bpffs, mounted where the agent pins (without a
    // propagation mode that needs a privileged container).
    let volume = |name: &str| {
        pod["volumes"]
            .as_sequence()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("volume {name}"))
            .clone()
    };
    let mounts = agent["volumeMounts"].as_sequence().expect("mounts");
    let bpffs = mounts
        .iter()
        .find(|m| m["mountPath"] == bpf_maps::DEFAULT_PIN_ROOT.trim_end_matches("/causeway"))
        .expect("bpffs mounted at /sys/fs/bpf");
    assert_eq!(
        volume(bpffs["name"].as_str().expect("name"))["hostPath"]["path"],
        "/sys/fs/bpf"
    );
    assert_ne!(bpffs["mountPropagation"], "Bidirectional");

    // The command reads a configuration the ConfigMap holds and the agent accepts.
    let command = strings(&agent["command"]);
    assert!(command.contains("agent") && command.contains("/etc/causeway/agent.toml"));
    let config_mount = mounts
        .iter()
        .find(|m| m["mountPath"] == "/etc/causeway")
        .expect("config mounted");
    let map_name = &volume(config_mount["name"].as_str().expect("name"))["configMap"]["name"];
    let cm = of_kind(&docs, "ConfigMap");
    assert_eq!(&cm["metadata"]["name"], map_name);
    let toml = cm["data"]["agent.toml"].as_str().expect("agent.toml");
    let cfg = AgentConfig::parse(toml).expect("the agent accepts its configuration");
    assert_eq!(cfg.interfaces.len(), 1);
    let metrics = cfg.metrics.expect("the agent serves /metrics");
    let annotated = &ds["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"];
    assert_eq!(
        annotated.as_str(),
        Some(metrics.port().to_string().as_str())
    );
}
