//! The one shaping validator: each rule, and where its error points.

use super::*;
use crate::shaper::{
    bucket::BucketError,
    htb::{HtbPlanError, RootQdisc, FQ_FLOW_LIMIT},
};

const MBIT: u64 = 1_000_000;

fn class(id: u8, rate_mbit: u64, ceil_mbit: u64) -> ClassShapingPolicy {
    ClassShapingPolicy {
        class: id,
        rate_bits: rate_mbit * MBIT,
        ceil_bits: ceil_mbit * MBIT,
        burst_bytes: 128 * 1024,
        prio: DEFAULT_PRIO,
        over: OverAction::EcnMark,
        dscp: None,
        pacing: PacingMode::Police,
    }
}

fn refused(mtu: u32, classes: Vec<ClassShapingPolicy>) -> PlanError {
    ShapingPolicy::new(1000 * MBIT, mtu, classes).expect_err("plan must be refused")
}

#[test]
fn a_valid_plan_is_sorted_and_derives_both_tables() {
    let scavenger = ClassShapingPolicy {
        over: OverAction::Demote(5),
        dscp: Some(8),
        ..class(6, 1, 1000)
    };
    let plan =
        ShapingPolicy::new(1000 * MBIT, 1500, vec![scavenger, class(5, 500, 1000)]).expect("valid");
    let ids: Vec<u8> = plan.classes.iter().map(|c| c.class).collect();
    assert_eq!(ids, [5, 6]);
    let htb = plan.htb_plan();
    assert!(htb.validate().is_ok());
    assert_eq!(htb.leaf(0).expect("default leaf").rate_bits, 499 * MBIT);
    let table = plan.shaping_table().expect("table");
    let entry = table.get(6).expect("entry");
    assert_eq!(entry.over, OverAction::Demote(5));
    assert_eq!(entry.priority, Some(leaf_classid(6)));
    assert_eq!(
        entry.bucket.expect("bucket").rate_bits(),
        1000 * MBIT,
        "the bucket polices the ceiling"
    );
}

#[test]
fn mtu_and_duplicates_are_refused() {
    let e = refused(67, vec![class(5, 1, 1)]);
    assert_eq!(e, PlanError::MtuOutOfRange(67));
    assert_eq!((e.class(), e.setting()), (None, Setting::Mtu));
    assert!(ShapingPolicy::new(1000 * MBIT, 65535, vec![class(5, 1, 1)]).is_ok());
    assert_eq!(
        refused(70_000, vec![class(5, 1, 1)]),
        PlanError::MtuOutOfRange(70_000)
    );
    let e = refused(1500, vec![class(5, 1, 1), class(5, 2, 2)]);
    assert_eq!(e, PlanError::DuplicateClass { class: 5 });
    assert_eq!((e.class(), e.setting()), (Some(5), Setting::Class));
}

#[test]
fn rates_are_checked_on_the_htb_plan() {
    let e = refused(1500, vec![class(5, 20, 10)]);
    assert!(matches!(
        e,
        PlanError::Htb(HtbPlanError::RateAboveCeiling { class: 5, .. })
    ));
    assert_eq!((e.class(), e.setting()), (Some(5), Setting::Ceil));
    let e = refused(1500, vec![class(5, 20, 2000)]);
    assert!(matches!(
        e,
        PlanError::Htb(HtbPlanError::CeilingAboveLink { class: 5, .. })
    ));
    let e = refused(
        1500,
        vec![ClassShapingPolicy {
            prio: 8,
            ..class(5, 1, 1)
        }],
    );
    assert_eq!(
        e,
        PlanError::Htb(HtbPlanError::PrioOutOfRange { class: 5, prio: 8 })
    );
    assert_eq!(e.setting(), Setting::Priority);
    let e = refused(1500, vec![class(0, 600, 1000), class(5, 600, 1000)]);
    assert!(matches!(
        e,
        PlanError::Htb(HtbPlanError::Oversubscribed {
            sum_bits: 1_200_000_000,
            ..
        })
    ));
    assert_eq!((e.class(), e.setting()), (None, Setting::LinkRate));
}

#[test]
fn an_unshaped_default_class_keeps_some_of_the_link() {
    let e = refused(1500, vec![class(5, 600, 1000), class(6, 400, 1000)]);
    assert_eq!(
        e,
        PlanError::NoRoomForDefault {
            sum_bits: 1000 * MBIT,
            link_bits: 1000 * MBIT
        }
    );
    assert_eq!((e.class(), e.setting()), (None, Setting::LinkRate));
    // With class 0 shaped, the rates may use the whole link.
    assert!(ShapingPolicy::new(
        1000 * MBIT,
        1500,
        vec![class(0, 600, 1000), class(6, 400, 1000)]
    )
    .is_ok());
}

#[test]
fn buckets_and_table_rules_are_checked_by_their_models() {
    let e = refused(
        1500,
        vec![ClassShapingPolicy {
            burst_bytes: 1000,
            ..class(5, 1, 1)
        }],
    );
    assert!(matches!(
        e,
        PlanError::Bucket {
            class: 5,
            source: BucketError::BurstBelowFrame { .. }
        }
    ));
    assert_eq!(e.setting(), Setting::Burst);
    let e = refused(
        1500,
        vec![ClassShapingPolicy {
            dscp: Some(64),
            ..class(5, 1, 1)
        }],
    );
    assert_eq!(
        e,
        PlanError::Table(ShapingError::DscpOutOfRange { class: 5, dscp: 64 })
    );
    assert_eq!((e.class(), e.setting()), (Some(5), Setting::Dscp));
    let e = refused(
        1500,
        vec![ClassShapingPolicy {
            over: OverAction::Demote(7),
            ..class(5, 1, 1)
        }],
    );
    assert_eq!(
        e,
        PlanError::Table(ShapingError::DemoteToUnknown {
            class: 5,
            target: 7
        })
    );
    assert_eq!((e.class(), e.setting()), (Some(5), Setting::Demotion));
    let e = refused(1500, vec![class(16, 1, 1)]);
    assert_eq!(
        e,
        PlanError::Table(ShapingError::ClassOutOfRange { class: 16 })
    );
}

#[test]
fn a_plan_broken_after_validation_is_reported_not_dropped() {
    let plan = ShapingPolicy::new(1000 * MBIT, 1500, vec![class(5, 100, 200)]).expect("valid");
    let mut bad_dscp = plan.clone();
    bad_dscp.classes[0].dscp = Some(99);
    assert_eq!(
        bad_dscp.shaping_table(),
        Err(PlanError::Table(ShapingError::DscpOutOfRange {
            class: 5,
            dscp: 99
        }))
    );
    let mut bad_burst = plan.clone();
    bad_burst.classes[0].burst_bytes = 1;
    assert!(
        matches!(
            bad_burst.shaping_table(),
            Err(PlanError::Bucket { class: 5, .. })
        ),
        "a class must not become unlimited"
    );
    let mut oversubscribed = plan;
    oversubscribed.classes[0].rate_bits = 2000 * MBIT;
    let htb = oversubscribed.htb_plan();
    assert_eq!(htb.leaf(0).expect("default leaf").rate_bits, 0);
    assert!(htb.validate().is_err());
    assert!(oversubscribed.validate().is_err());
}

#[test]
fn strict_priority_defaults() {
    assert_eq!(default_prio("control"), 0);
    assert_eq!(default_prio("clock"), 0);
    assert_eq!(default_prio("bulk"), DEFAULT_PRIO);
}

fn paced(id: u8, mbit: u64) -> ClassShapingPolicy {
    ClassShapingPolicy {
        over: OverAction::Drop,
        pacing: PacingMode::Edt {
            horizon_ns: DEFAULT_EDT_HORIZON_NS,
        },
        ..class(id, mbit, mbit)
    }
}

#[test]
fn a_paced_plan_installs_fq_and_stamps_instead_of_steering() {
    let plan =
        ShapingPolicy::new(1000 * MBIT, 1500, vec![paced(5, 100), paced(6, 20)]).expect("valid");
    assert!(plan.uses_edt());
    let htb = plan.htb_plan();
    assert_eq!(htb.root, RootQdisc::Fq);
    assert_eq!(
        htb.batch("v0"),
        format!("qdisc add dev v0 root handle ca: fq flow_limit {FQ_FLOW_LIMIT}\n")
    );
    let table = plan.shaping_table().expect("table");
    let entry = table.get(5).expect("entry");
    let bucket = entry.bucket.expect("bucket");
    assert!(bucket.is_edt());
    assert_eq!(bucket.burst_ns(), DEFAULT_EDT_HORIZON_NS);
    assert_eq!(entry.priority, None);
    let e = table.map_entries();
    assert_ne!(e[5].flags & bpf_maps::shaper::SHAPE_FLAG_EDT, 0);
    assert_eq!(e[5].flags & bpf_maps::shaper::SHAPE_FLAG_PRIORITY, 0);
    let policed = ShapingPolicy::new(1000 * MBIT, 1500, vec![class(5, 100, 100)]).expect("ok");
    assert_eq!(policed.htb_plan().root, RootQdisc::Htb);
    assert_eq!(
        policed.shaping_table().expect("table").map_entries()[5].flags
            & bpf_maps::shaper::SHAPE_FLAG_EDT,
        0
    );
}

#[test]
fn paced_plans_refuse_what_fq_cannot_do() {
    let e = refused(1500, vec![paced(5, 100), class(6, 10, 10)]);
    assert_eq!(e, PlanError::EdtMixed { class: 6, other: 5 });
    assert_eq!((e.class(), e.setting()), (Some(6), Setting::Pacing));
    let e = refused(
        1500,
        vec![ClassShapingPolicy {
            ceil_bits: 200 * MBIT,
            ..paced(5, 100)
        }],
    );
    assert_eq!(e, PlanError::EdtCeiling { class: 5 });
    assert_eq!(e.setting(), Setting::Ceil);
    let e = refused(
        1500,
        vec![ClassShapingPolicy {
            over: OverAction::EcnMark,
            ..paced(5, 100)
        }],
    );
    assert_eq!(e, PlanError::EdtAction { class: 5 });
    let e = refused(
        1500,
        vec![ClassShapingPolicy {
            pacing: PacingMode::Edt { horizon_ns: 10 },
            ..paced(5, 100)
        }],
    );
    assert!(matches!(
        e,
        PlanError::Bucket {
            class: 5,
            source: BucketError::HorizonOutOfRange { horizon_ns: 10 }
        }
    ));
    assert_eq!(e.setting(), Setting::Pacing);
}
