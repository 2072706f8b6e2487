use super::*;
use crate::policy::{Policy, PolicyError, Problem};
use crate::shaper::{
    bucket::BucketError,
    config::ShapingError,
    htb::{leaf_classid, HtbPlanError},
};

const BASE: &str = r#"
[shaping]
link_rate = "1gbit"

[[class]]
id = 3
name = "control"
shaping = { rate = "10mbit", ceil = "100mbit", priority = 0, over_limit = "drop", dscp = "cs6" }

[[class]]
id = 5
name = "bulk"
shaping = { rate = "500mbit", ceil = "1gbit", burst = "128kb" }

[[class]]
id = 6
name = "scavenger"
shaping = { rate = "1mbit", ceil = "1gbit", over_limit = "demote", demote_to = "bulk" }

[[rule]]
priority = 10
protocol = "tcp"
class = "bulk"
"#;

fn parse(text: &str) -> Result<Policy, PolicyError> {
    Policy::parse(text, "test.toml")
}

fn problem(text: &str) -> (usize, Problem) {
    let e = parse(text).expect_err("policy must be refused");
    (
        e.position().expect("position").line,
        e.problem().expect("problem").clone(),
    )
}

#[test]
fn full_shaping_parses_into_plan_and_table() {
    let p = parse(BASE).expect("valid").shaping.expect("shaping");
    assert_eq!((p.link_bits, p.mtu), (1_000_000_000, 1500));
    let control = p.class(3).expect("control");
    assert_eq!(
        (control.rate_bits, control.ceil_bits, control.prio),
        (10_000_000, 100_000_000, 0)
    );
    assert_eq!(
        (control.over, control.dscp, control.burst_bytes),
        (OverAction::Drop, Some(48), default_burst(100_000_000))
    );
    let bulk = p.class(5).expect("bulk");
    assert_eq!(
        (bulk.burst_bytes, bulk.prio, bulk.over),
        (128 * 1024, DEFAULT_PRIO, OverAction::EcnMark)
    );
    assert_eq!(p.class(6).expect("scavenger").over, OverAction::Demote(5));

    let plan = p.htb_plan();
    assert!(plan.validate().is_ok());
    let default = plan.leaf(0).expect("default leaf");
    assert_eq!(
        default.rate_bits,
        1_000_000_000 - 10_000_000 - 500_000_000 - 1_000_000
    );
    assert_eq!(plan.leaf(3).expect("control leaf").prio, 0);

    let entries = p.shaping_table().expect("table").map_entries();
    assert_eq!(entries[3].priority, leaf_classid(3));
    assert_eq!(
        entries[3].rate_bytes_per_sec,
        100_000_000 / 8,
        "the bucket polices the ceiling"
    );
    assert_eq!(entries[6].demote_class, 5);
    assert_eq!(entries[0].flags, 0, "class 0 is not shaped by the program");
}

#[test]
fn control_and_clock_default_to_strict_priority() {
    let text = BASE.replacen("priority = 0, ", "", 1);
    let p = parse(&text).expect("valid").shaping.expect("shaping");
    assert_eq!(p.class(3).expect("control").prio, 0);
    assert_eq!(p.class(5).expect("bulk").prio, DEFAULT_PRIO);
}

#[test]
fn check_lists_the_shaping() {
    let text = parse(BASE).expect("valid").describe();
    assert!(
        text.contains("shaping (link 1000000000 bit/s, mtu 1500):"),
        "{text}"
    );
    assert!(
        text.contains("  control: rate 10000000 bit/s, ceil 100000000 bit/s"),
        "{text}"
    );
    assert!(text.contains("over limit demote to bulk"), "{text}");
}

#[test]
fn policies_without_shaping_have_none() {
    let text = "[[class]]\nid = 1\nname = \"a\"\n";
    assert_eq!(parse(text).expect("valid").shaping, None);
}

/// (text to replace, replacement, line of the error, expected problem).
type Case = (&'static str, &'static str, usize, fn(&Problem) -> bool);

#[test]
fn bad_values_are_refused_with_their_line() {
    let cases: Vec<Case> = vec![
        ("ceil = \"100mbit\"", "ceil = \"1mbit\"", 8, |p| {
            matches!(
                p,
                Problem::ClassShaping {
                    index: 1,
                    kind: ShapingProblem::Plan(PlanError::Htb(HtbPlanError::RateAboveCeiling {
                        class: 3,
                        ..
                    })),
                    ..
                }
            )
        }),
        ("rate = \"500mbit\"", "rate = \"fast\"", 13, |p| {
            matches!(
                p,
                Problem::ClassShaping {
                    kind: ShapingProblem::BadRate { field: "rate", .. },
                    ..
                }
            )
        }),
        ("burst = \"128kb\"", "burst = \"1000\"", 13, |p| {
            matches!(
                p,
                Problem::ClassShaping {
                    kind: ShapingProblem::Plan(PlanError::Bucket {
                        class: 5,
                        source: BucketError::BurstBelowFrame { .. }
                    }),
                    ..
                }
            )
        }),
        (
            "ceil = \"1gbit\", burst",
            "ceil = \"2gbit\", burst",
            13,
            |p| {
                matches!(
                    p,
                    Problem::ClassShaping {
                        index: 2,
                        kind: ShapingProblem::Plan(PlanError::Htb(
                            HtbPlanError::CeilingAboveLink { class: 5, .. }
                        )),
                        ..
                    }
                )
            },
        ),
        ("priority = 0", "priority = 9", 8, |p| {
            matches!(
                p,
                Problem::ClassShaping {
                    kind: ShapingProblem::Plan(PlanError::Htb(HtbPlanError::PrioOutOfRange {
                        class: 3,
                        prio: 9
                    })),
                    ..
                }
            )
        }),
        (
            "demote_to = \"bulk\"",
            "demote_to = \"scavenger\"",
            18,
            |p| {
                matches!(
                    p,
                    Problem::ClassShaping {
                        kind: ShapingProblem::Plan(PlanError::Table(ShapingError::DemoteToSelf {
                            class: 6
                        })),
                        ..
                    }
                )
            },
        ),
        ("demote_to = \"bulk\"", "demote_to = \"nope\"", 18, |p| {
            matches!(
                p,
                Problem::ClassShaping {
                    kind: ShapingProblem::BadDemoteTarget { .. },
                    ..
                }
            )
        }),
        ("over_limit = \"drop\"", "over_limit = \"shout\"", 8, |p| {
            matches!(
                p,
                Problem::ClassShaping {
                    kind: ShapingProblem::BadAction(_),
                    ..
                }
            )
        }),
        (
            "link_rate = \"1gbit\"",
            "link_rate = \"500mbit\"",
            13,
            |p| {
                matches!(
                    p,
                    Problem::ClassShaping {
                        kind: ShapingProblem::Plan(PlanError::Htb(
                            HtbPlanError::CeilingAboveLink { class: 5, .. }
                        )),
                        ..
                    }
                )
            },
        ),
        ("rate = \"500mbit\"", "rate = \"999mbit\"", 3, |p| {
            matches!(
                p,
                Problem::LinkShaping(ShapingProblem::Plan(PlanError::Htb(
                    HtbPlanError::Oversubscribed {
                        sum_bits: 1_010_000_000,
                        ..
                    }
                )))
            )
        }),
    ];
    for (from, to, line, check) in cases {
        let text = BASE.replacen(from, to, 1);
        let (at, p) = problem(&text);
        assert!(check(&p), "{to}: unexpected problem {p}");
        assert_eq!(at, line, "{to}: {p}");
    }
    let no_link = BASE.replacen("[shaping]\nlink_rate = \"1gbit\"\n", "", 1);
    assert!(matches!(
        problem(&no_link).1,
        Problem::ClassShaping {
            kind: ShapingProblem::NoLink,
            ..
        }
    ));
    let unknown = BASE.replacen("priority = 0,", "prio = 0,", 1);
    assert!(matches!(problem(&unknown).1, Problem::Syntax(_)));
}

#[test]
fn plan_rules_point_at_the_setting_they_name() {
    // Guaranteed rates that fill the link leave nothing for the unshaped
    // default class: reported at link_rate.
    let full = BASE.replacen("rate = \"500mbit\"", "rate = \"989mbit\"", 1);
    let (line, p) = problem(&full);
    assert_eq!(line, 3, "{p}");
    assert_eq!(
        p,
        Problem::LinkShaping(ShapingProblem::Plan(PlanError::NoRoomForDefault {
            sum_bits: 1_000_000_000,
            link_bits: 1_000_000_000
        }))
    );
    // A demotion to a class that exists but has no shaping: at demote_to.
    let unshaped = format!(
        "{}\n[[class]]\nid = 7\nname = \"plain\"\n",
        BASE.replacen("demote_to = \"bulk\"", "demote_to = \"plain\"", 1)
    );
    let (line, p) = problem(&unshaped);
    assert_eq!(line, 18, "{p}");
    assert!(
        matches!(
            &p,
            Problem::ClassShaping {
                index: 3,
                kind: ShapingProblem::Plan(PlanError::Table(ShapingError::DemoteToUnknown {
                    class: 6,
                    target: 7
                })),
                ..
            }
        ),
        "{p}"
    );
    // An MTU out of range: at mtu.
    let mtu = BASE.replacen(
        "link_rate = \"1gbit\"",
        "link_rate = \"1gbit\"\nmtu = 60",
        1,
    );
    let (line, p) = problem(&mtu);
    assert_eq!(line, 4, "{p}");
    assert_eq!(
        p,
        Problem::LinkShaping(ShapingProblem::Plan(PlanError::MtuOutOfRange(60)))
    );
}

#[test]
fn default_burst_covers_a_tcp_backlog_and_10ms() {
    assert_eq!(default_burst(10_000_000), 256 * 1024);
    assert_eq!(default_burst(10_000_000_000), 12_500_000);
}

#[test]
fn rates_and_sizes_parse() {
    assert_eq!(parse_rate_str("100mbit"), Ok(100_000_000));
    assert_eq!(parse_rate_str("1.5Gbit"), Ok(1_500_000_000));
    assert_eq!(parse_rate_str("64000"), Ok(64_000));
    assert_eq!(parse_rate_str(" 10kbit "), Ok(10_000));
    assert!(parse_rate_str("0").is_err());
    assert!(parse_rate_str("-5mbit").is_err());
    assert!(parse_rate_str("1e30gbit").is_err());
    assert!(parse_rate_str("mbit").is_err());
    assert_eq!(parse_size_str("64kb"), Ok(65_536));
    assert_eq!(parse_size_str("1MiB"), Ok(1 << 20));
    assert_eq!(parse_size_str("1514"), Ok(1514));
    assert!(parse_size_str("0").is_err());
    assert!(parse_size_str("99999999999999999999mb").is_err());
}

const PACED: &str = r#"
[shaping]
link_rate = "1gbit"

[[class]]
id = 5
name = "bulk"
shaping = { rate = "100mbit", pacing = "edt", edt_horizon_ms = 50 }

[[class]]
id = 6
name = "scavenger"
shaping = { rate = "20mbit", pacing = "edt" }
"#;

#[test]
fn edt_pacing_parses_with_drop_and_a_default_horizon() {
    let p = parse(PACED).expect("valid").shaping.expect("shaping");
    assert!(p.uses_edt());
    let bulk = p.class(5).expect("bulk");
    assert_eq!(
        (bulk.pacing, bulk.over, bulk.ceil_bits),
        (
            PacingMode::Edt {
                horizon_ns: 50_000_000
            },
            OverAction::Drop,
            100_000_000
        )
    );
    assert_eq!(
        p.class(6).expect("scavenger").pacing,
        PacingMode::Edt {
            horizon_ns: DEFAULT_EDT_HORIZON_NS
        }
    );
    let classes = parse(PACED).expect("valid").classes;
    assert!(p
        .describe(&classes)
        .contains("bulk: paced (edt, fq) at 100000000 bit/s, horizon 50 ms, over limit drop"));
}

#[test]
fn bad_edt_combinations_are_refused_at_their_line() {
    let cases: [Case; 7] = [
        (
            "pacing = \"edt\" }",
            "pacing = \"fast\" }",
            13,
            |p| matches!(p, Problem::ClassShaping { kind: ShapingProblem::BadPacing(s), .. } if s == "fast"),
        ),
        ("edt_horizon_ms = 50", "edt_horizon_ms = 0", 8, |p| {
            matches!(
                p,
                Problem::ClassShaping {
                    kind: ShapingProblem::BadHorizon(0),
                    ..
                }
            )
        }),
        (
            "pacing = \"edt\", edt_horizon_ms = 50",
            "edt_horizon_ms = 50",
            8,
            |p| {
                matches!(
                    p,
                    Problem::ClassShaping {
                        kind: ShapingProblem::HorizonWithoutEdt,
                        ..
                    }
                )
            },
        ),
        (
            "pacing = \"edt\" }",
            "pacing = \"edt\", burst = \"64kb\" }",
            13,
            |p| {
                matches!(
                    p,
                    Problem::ClassShaping {
                        kind: ShapingProblem::BurstWithEdt,
                        ..
                    }
                )
            },
        ),
        (
            "pacing = \"edt\" }",
            "pacing = \"edt\", over_limit = \"ecn\" }",
            13,
            |p| {
                matches!(
                    p,
                    Problem::ClassShaping {
                        kind: ShapingProblem::Plan(PlanError::EdtAction { class: 6 }),
                        ..
                    }
                )
            },
        ),
        (
            "pacing = \"edt\" }",
            "pacing = \"edt\", ceil = \"40mbit\" }",
            13,
            |p| {
                matches!(
                    p,
                    Problem::ClassShaping {
                        kind: ShapingProblem::Plan(PlanError::EdtCeiling { class: 6 }),
                        ..
                    }
                )
            },
        ),
        (
            "rate = \"20mbit\", pacing = \"edt\" }",
            "rate = \"20mbit\" }",
            13,
            |p| {
                matches!(
                    p,
                    Problem::ClassShaping {
                        kind: ShapingProblem::Plan(PlanError::EdtMixed { class: 6, other: 5 }),
                        ..
                    }
                )
            },
        ),
    ];
    for (from, to, line, expected) in cases {
        assert!(PACED.contains(from), "{from}");
        let text = PACED.replacen(from, to, 1);
        let (at, problem) = problem(&text);
        assert!(expected(&problem), "{to}: {problem:?}");
        assert_eq!(at, line, "{to}: {problem:?}");
    }
}
