//! Causeway's HTB on a real interface: it refuses to replace a qdisc it did
//! not install, and removing it removes exactly what it installed.

use causeway_test_support::require_root;
use std::process::Command;

use causeway::shaper::htb::{Htb, HtbError, HtbLeaf, HtbPlan, RootOwner, RootQdisc};
use causeway_test_support::netns::VethLink;

fn root_qdisc(link: &VethLink) -> String {
    let out = Command::new("tc")
        .args([
            "-n",
            link.a.name(),
            "qdisc",
            "show",
            "dev",
            &link.a_if,
            "root",
        ])
        .output()
        .expect("tc qdisc show");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn tc(link: &VethLink, args: &[&str]) {
    let status = Command::new("tc")
        .args(["-n", link.a.name()])
        .args(args)
        .status()
        .expect("tc");
    assert!(status.success(), "tc {args:?}");
}

fn plan() -> HtbPlan {
    let leaf = |class, rate_bits| HtbLeaf {
        class,
        rate_bits,
        ceil_bits: 100_000_000,
        prio: 4,
        burst_bytes: 65_536,
    };
    HtbPlan {
        link_bits: 100_000_000,
        leaves: vec![leaf(0, 50_000_000), leaf(5, 40_000_000)],
        root: RootQdisc::Htb,
    }
}

#[test]
fn foreign_qdiscs_are_left_alone_and_ours_is_removed_cleanly() {
    require_root!("foreign_qdiscs_are_left_alone_and_ours_is_removed_cleanly");
    let link = VethLink::new(65);
    let htb = Htb::new(&link.a_if, Some(link.a.name()));
    assert_eq!(htb.owner().expect("owner"), RootOwner::Default);

    // Someone else's TBF, then someone else's HTB with another handle.
    for foreign in [
        vec![
            "root", "handle", "1:", "tbf", "rate", "1mbit", "burst", "32kbit", "latency", "400ms",
        ],
        vec!["root", "handle", "1:", "htb", "default", "1"],
    ] {
        let mut add = vec!["qdisc", "add", "dev", link.a_if.as_str()];
        add.extend(&foreign);
        tc(&link, &add);
        let before = root_qdisc(&link);
        assert!(matches!(
            htb.install(&plan()),
            Err(HtbError::ForeignQdisc { .. })
        ));
        assert_eq!(
            root_qdisc(&link),
            before,
            "a refused install changed the qdisc"
        );
        assert!(
            !htb.remove().expect("remove"),
            "remove claimed a foreign qdisc"
        );
        assert_eq!(root_qdisc(&link), before, "remove touched a foreign qdisc");
        tc(&link, &["qdisc", "del", "dev", &link.a_if, "root"]);
    }

    htb.install(&plan()).expect("install");
    assert_eq!(htb.owner().expect("owner"), RootOwner::Causeway);
    assert!(
        root_qdisc(&link).starts_with("qdisc htb ca: root"),
        "{}",
        root_qdisc(&link)
    );
    let faster = HtbLeaf {
        class: 5,
        rate_bits: 10_000_000,
        ceil_bits: 20_000_000,
        prio: 4,
        burst_bytes: 65_536,
    };
    htb.change_leaf(&faster).expect("change leaf");
    let classes = Command::new("tc")
        .args([
            "-n",
            link.a.name(),
            "class",
            "show",
            "dev",
            &link.a_if,
            "classid",
            "ca:15",
        ])
        .output()
        .expect("tc class show");
    assert!(
        String::from_utf8_lossy(&classes.stdout).contains("ceil 20Mbit"),
        "leaf not changed"
    );
    // Installing again replaces our own hierarchy.
    htb.install(&plan()).expect("reinstall");
    assert!(htb.remove().expect("remove"));
    assert_eq!(htb.owner().expect("owner"), RootOwner::Default);
    assert!(!root_qdisc(&link).contains("htb"), "{}", root_qdisc(&link));
    assert!(
        !htb.remove().expect("second remove"),
        "nothing left to remove"
    );
}

/// The guests of the VM stage have `fq`, the development host does not:
/// both outcomes are checked, whichever this kernel gives.
#[test]
fn a_paced_plan_installs_fq_or_is_refused_cleanly_without_it() {
    require_root!("a_paced_plan_installs_fq_or_is_refused_cleanly_without_it");
    let link = VethLink::new(66);
    let htb = Htb::new(&link.a_if, Some(link.a.name()));
    let paced = HtbPlan {
        root: RootQdisc::Fq,
        ..plan()
    };
    let before = root_qdisc(&link);
    match htb.install(&paced) {
        Ok(()) => {
            assert_eq!(htb.owner().expect("owner"), RootOwner::Causeway);
            assert!(
                root_qdisc(&link).starts_with("qdisc fq ca: root"),
                "{}",
                root_qdisc(&link)
            );
            // Ours either way: HTB replaces it, and removal takes it away.
            htb.install(&plan()).expect("HTB over our fq");
            htb.install(&paced).expect("fq over our HTB");
            assert!(htb.remove().expect("remove"));
            assert_eq!(htb.owner().expect("owner"), RootOwner::Default);
        }
        Err(e) => {
            assert!(matches!(e, HtbError::FqUnavailable { .. }), "{e:?}");
            assert!(e.to_string().contains("CONFIG_NET_SCH_FQ"), "{e}");
            assert_eq!(root_qdisc(&link), before, "a refused install left a qdisc");
        }
    }
}
