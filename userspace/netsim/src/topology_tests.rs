use std::collections::HashSet;

use super::*;
use crate::profile::Profile;

#[test]
fn two_domains_dual_paths_addresses_and_names() {
    let plan = Plan::new("t1", 2, 2, &Profile::Dual.paths()).unwrap();
    assert_eq!(plan.hosts.len(), 4);
    assert_eq!(plan.paths.len(), 2);
    let h = &plan.hosts[3];
    assert_eq!((h.domain, h.index, h.netns.as_str()), (1, 1, "cw-t1-d1h1"));
    assert_eq!(h.ip.to_string(), "10.1.0.11");
    assert_eq!(h.ip_via(1).unwrap().to_string(), "10.1.2.11");
    assert!(plan.paths[0].default && !plan.paths[1].default);
    assert_eq!(plan.paths[1].gw_b_ip.to_string(), "10.200.1.2");
    assert_eq!(plan.paths[1].mark, MARK_BASE + 1);
    let ns = plan.namespaces();
    assert_eq!(ns.len(), 2 + 4 + 2);
    assert!(ns.iter().all(|n| n.starts_with("cw-t1-")));
    assert_eq!(
        ns.iter().collect::<HashSet<_>>().len(),
        ns.len(),
        "names unique"
    );
}

#[test]
fn three_domains_get_a_full_mesh_and_unique_addresses() {
    let plan = Plan::new("abc", 3, 3, &Profile::Wan40.paths()).unwrap();
    assert_eq!(plan.paths.len(), 3);
    let pairs: Vec<(usize, usize)> = plan
        .paths
        .iter()
        .map(|p| (p.domain_a, p.domain_b))
        .collect();
    assert_eq!(pairs, vec![(0, 1), (0, 2), (1, 2)]);
    let mut all = HashSet::new();
    for h in &plan.hosts {
        assert!(all.insert(h.ip));
        for (_, a) in &h.path_ips {
            assert!(all.insert(*a));
        }
        assert_eq!(h.path_ips.len(), 2, "each domain touches two paths");
    }
}

#[test]
fn every_command_is_scoped_to_a_testbed_namespace_and_names_fit() {
    let plan = Plan::new("x9", 2, 3, &Profile::Dual.paths()).unwrap();
    let ns: HashSet<String> = plan.namespaces().into_iter().collect();
    for cmd in plan.ip_commands() {
        assert_eq!(cmd[0], "-n", "{cmd:?} would run in the root namespace");
        assert!(ns.contains(&cmd[1]), "{cmd:?}");
        for w in cmd.windows(2) {
            if w[0] == "netns" {
                assert!(
                    ns.contains(&w[1]),
                    "{cmd:?} moves a link out of the testbed"
                );
            }
            if matches!(w[0].as_str(), "name" | "add" | "dev") && !w[1].contains('.') {
                assert!(w[1].len() < 16, "interface name {} too long", w[1]);
            }
        }
    }
    for (n, _, _) in plan.sysctls() {
        assert!(ns.contains(&n));
    }
}

#[test]
fn routes_send_path_addresses_over_their_path() {
    let plan = Plan::new("r", 2, 1, &Profile::Dual.paths()).unwrap();
    let cmds: Vec<String> = plan.ip_commands().iter().map(|c| c.join(" ")).collect();
    let has = |s: &str| cmds.iter().any(|c| c == s);
    assert!(has("-n cw-r-d0gw route add 10.1.2.0/24 via 10.200.1.2"));
    assert!(has("-n cw-r-d0gw route add 10.1.0.0/24 via 10.200.0.2"));
    assert!(
        !has("-n cw-r-d0gw route add 10.1.0.0/24 via 10.200.1.2"),
        "only the default path carries 10.b.0.x"
    );
    assert!(has("-n cw-r-d1gw route add 10.0.1.0/24 via 10.200.0.1"));
    assert!(has(
        "-n cw-r-d0gw rule add fwmark 0x1001 lookup 101 pref 1001"
    ));
    assert!(has(
        "-n cw-r-d0h0 route add 10.1.2.0/24 via 10.0.0.1 src 10.0.2.10"
    ));
    assert!(has(
        "-n cw-r-d1gw rule add iif br0 tos 0xc lookup 101 pref 901"
    ));
    assert_eq!(plan.paths[0].tos, Some(4));
}

#[test]
fn bad_requests_are_rejected_with_the_reason() {
    let w = Profile::Wan40.paths();
    assert_eq!(
        Plan::new("UPPER", 2, 2, &w).unwrap_err(),
        PlanError::Tag("UPPER".into())
    );
    assert_eq!(Plan::new("t", 0, 2, &w).unwrap_err(), PlanError::Domains(0));
    assert_eq!(Plan::new("t", 2, 0, &w).unwrap_err(), PlanError::Hosts(0));
    assert_eq!(Plan::new("t", 2, 2, &[]).unwrap_err(), PlanError::NoPath);
    let many = Plan::new("t", 5, 1, &w).unwrap();
    assert_eq!(
        (many.paths[5].tos, many.paths[6].tos),
        (Some(0x1c), None),
        "only DSCP 1 and 3-7 fit a rule"
    );
    assert!(matches!(
        Plan::new("t", 30, 1, &w).unwrap_err(),
        PlanError::TooManyPaths(435)
    ));
    let bad = LinkParams { loss: 3.0, ..w[0] };
    assert!(matches!(
        Plan::new("t", 2, 1, &[bad]).unwrap_err(),
        PlanError::Params { index: 0, .. }
    ));
}

/// The collective library tags its connections AF11, AF21 and CS5; a routing
/// rule reads a TOS byte under `RULE_TOS_MASK`, so none of those may look like
/// a path's TOS there, or the library's traffic to a peer's default address
/// would leave the default path (on `dual`, bulk data went over the 100 Mbit/s
/// path instead of the 200 Mbit/s one).
#[test]
fn the_library_s_dscps_keep_the_default_path() {
    use causeway_core::traffic::TrafficKind;
    for kind in [
        TrafficKind::Bulk,
        TrafficKind::Latency,
        TrafficKind::Control,
    ] {
        let tos = kind.tos() & RULE_TOS_MASK;
        assert!(
            PATH_TOS.iter().all(|&p| p & RULE_TOS_MASK != tos),
            "{kind:?} (TOS {:#x}) reads as a path's TOS {tos:#x}",
            kind.tos()
        );
    }
    for (i, &t) in PATH_TOS.iter().enumerate() {
        assert_eq!(t & RULE_TOS_MASK, t, "path {i}'s TOS survives the mask");
    }
}
