//! Unit tests of the HTB plan, its `tc` batch and ownership parsing.

use super::*;

fn leaf(class: u8, rate: u64, ceil: u64, prio: u8) -> HtbLeaf {
    HtbLeaf {
        class,
        rate_bits: rate,
        ceil_bits: ceil,
        prio,
        burst_bytes: 64 * 1024,
    }
}

#[test]
fn plans_are_validated() {
    let ok = HtbPlan {
        link_bits: 1_000,
        leaves: vec![leaf(0, 500, 1_000, 1), leaf(3, 500, 1_000, 0)],
        root: RootQdisc::Htb,
    };
    assert!(ok.validate().is_ok());
    let over = HtbPlan {
        link_bits: 1_000,
        leaves: vec![leaf(0, 600, 1_000, 1), leaf(3, 500, 1_000, 0)],
        root: RootQdisc::Htb,
    };
    assert!(matches!(
        over.validate(),
        Err(HtbPlanError::Oversubscribed {
            sum_bits: 1_100,
            ..
        })
    ));
    let ceil = HtbPlan {
        link_bits: 1_000,
        leaves: vec![leaf(0, 600, 2_000, 1)],
        root: RootQdisc::Htb,
    };
    assert!(matches!(
        ceil.validate(),
        Err(HtbPlanError::CeilingAboveLink { .. })
    ));
    let inverted = HtbPlan {
        link_bits: 1_000,
        leaves: vec![leaf(0, 600, 500, 1)],
        root: RootQdisc::Htb,
    };
    assert!(matches!(
        inverted.validate(),
        Err(HtbPlanError::RateAboveCeiling { .. })
    ));
    let no_default = HtbPlan {
        link_bits: 1_000,
        leaves: vec![leaf(3, 600, 600, 1)],
        root: RootQdisc::Htb,
    };
    assert!(matches!(
        no_default.validate(),
        Err(HtbPlanError::NoDefaultLeaf)
    ));
}

#[test]
fn batch_names_our_handles() {
    let plan = HtbPlan {
        link_bits: 1_000_000_000,
        leaves: vec![
            leaf(0, 1_000_000, 1_000_000_000, 3),
            leaf(3, 10_000_000, 100_000_000, 0),
        ],
        root: RootQdisc::Htb,
    };
    let batch = plan.batch("eth9");
    assert!(batch.starts_with("qdisc add dev eth9 root handle ca: htb default 10\n"));
    assert!(batch.contains("classid ca:1 htb rate 1000000000bit"));
    assert!(
        batch.contains("parent ca:1 classid ca:13 htb rate 10000000bit ceil 100000000bit prio 0")
    );
    assert_eq!(leaf_classid(3), 0x00ca_0013);
}

#[test]
fn ownership_is_read_from_tc_json() {
    let ours = r#"[{"kind":"htb","handle":"ca:","root":true,"options":{}}]"#;
    assert_eq!(root_owner(ours), Ok(RootOwner::Causeway));
    let default = r#"[{"kind":"noqueue","handle":"0:","root":true,"refcnt":2,"options":{}}]"#;
    assert_eq!(root_owner(default), Ok(RootOwner::Default));
    let other_htb = r#"[{"kind":"htb","handle":"1:","root":true}]"#;
    assert_eq!(
        root_owner(other_htb),
        Ok(RootOwner::Foreign {
            kind: "htb".into(),
            handle: "1:".into()
        })
    );
    assert_eq!(root_owner("[]"), Ok(RootOwner::Default));
    assert!(root_owner("not json").is_err());
}
