//! Policy parsing and validation: the example, and one test per refusal,
//! each checking the problem and the line it is reported at.

use super::*;

const CLASSES: &str = r#"
[[class]]
id = 0
name = "default"

[[class]]
id = 1
name = "gradient"

[[class]]
id = 2
name = "control"
"#;

fn with_classes(rules: &str) -> String {
    format!("{CLASSES}{rules}")
}

fn refused(text: &str) -> (Problem, Position) {
    match Policy::parse(text, "test.toml") {
        Ok(p) => panic!("accepted: {p:?}"),
        Err(e) => {
            assert!(e.to_string().starts_with("test.toml:"), "{e}");
            (e.problem().cloned().unwrap(), e.position().unwrap())
        }
    }
}

fn rule_problem(text: &str) -> (usize, usize, RuleProblem, Position) {
    match refused(text) {
        (Problem::Rule { index, line, kind }, at) => (index, line, kind, at),
        other => panic!("not a rule problem: {other:?}"),
    }
}

#[test]
fn example_policy_is_valid() {
    let policy = Policy::parse(EXAMPLE, "example.toml").unwrap();
    assert_eq!(policy.classes.len(), 6);
    assert_eq!(policy.rules.len(), 6);
    let first = &policy.rules.rules()[0];
    assert_eq!(
        (first.priority, first.dscp, first.proto),
        (10, Some(crate::classifier::DscpSet::one(46)), Some(17))
    );
    assert_eq!(policy.classes.name_of(first.class), "clock");
    let drop = policy
        .rules
        .rules()
        .iter()
        .find(|r| r.priority == 90)
        .unwrap();
    assert_eq!(drop.verdict, Verdict::Drop);
    let text = policy.describe();
    assert!(
        text.contains("prio    20: proto udp src 10.2.0.0/16 sport any dst any dport 5000-5100 dscp any => gradient (pass)"),
        "{text}"
    );
}

#[test]
fn rules_are_sorted_by_priority_and_default_is_implicit() {
    let text = r#"
[[class]]
id = 4
name = "bulk"

[[rule]]
priority = 50
class = "bulk"

[[rule]]
priority = 5
class = "default"
protocol = 17
"#;
    let policy = Policy::parse(text, "t").unwrap();
    assert_eq!(policy.classes.names(), "default, bulk");
    let prios: Vec<u32> = policy.rules.rules().iter().map(|r| r.priority).collect();
    assert_eq!(prios, [5, 50]);
    assert_eq!(policy.rules.rules()[1].class, 4);
}

#[test]
fn unknown_class_names_the_rule_and_line() {
    let text = with_classes(
        r#"
[[rule]]
priority = 10
class = "gradiant"
"#,
    );
    let (index, line, kind, at) = rule_problem(&text);
    assert_eq!((index, line), (1, 14));
    assert_eq!(
        at,
        Position {
            line: 16,
            column: 9
        }
    );
    assert_eq!(
        kind,
        RuleProblem::UnknownClass {
            name: "gradiant".into(),
            defined: "default, gradient, control".into()
        }
    );
    let message = Policy::parse(&text, "p.toml").unwrap_err().to_string();
    assert_eq!(
        message,
        "p.toml:16:9: rule 1 (line 14): class 'gradiant' is not defined \
         (defined classes: default, gradient, control)"
    );
}

#[test]
fn duplicate_priority_names_both_rules() {
    let text = with_classes(
        r#"
[[rule]]
priority = 10
class = "gradient"

[[rule]]
priority = 10
class = "control"
protocol = "tcp"
"#,
    );
    let (index, line, kind, at) = rule_problem(&text);
    assert_eq!((index, line, at.line), (2, 18, 19));
    assert_eq!(
        kind,
        RuleProblem::DuplicatePriority {
            priority: 10,
            first: 1,
            first_line: 14
        }
    );
}

#[test]
fn bad_prefixes() {
    for (value, needle) in [
        ("10.1.2.3/16", "host bits are set"),
        ("10.0.0.0/40", "longer than 32 bits"),
        ("fd00::/200", "longer than 128 bits"),
        ("fd00::/300", "not a number between 0 and 128"),
        ("10.0.0/8", "not an IPv4 or IPv6 address"),
    ] {
        let text = with_classes(&format!(
            "\n[[rule]]\npriority = 1\nclass = \"gradient\"\nsrc = \"{value}\"\n"
        ));
        let (_, _, kind, at) = rule_problem(&text);
        assert_eq!(at.line, 17, "{value}");
        assert!(kind.to_string().contains(needle), "{value}: {kind}");
    }
}

#[test]
fn mixed_families_and_ports_without_transport() {
    let text = with_classes(
        "\n[[rule]]\npriority = 1\nclass = \"gradient\"\nsrc = \"10.0.0.0/8\"\ndst = \"fd00::/8\"\n",
    );
    let (_, _, kind, at) = rule_problem(&text);
    assert!(matches!(kind, RuleProblem::MixedFamilies { .. }), "{kind}");
    assert_eq!(at.line, 18);
    let text = with_classes(
        "\n[[rule]]\npriority = 1\nclass = \"gradient\"\nprotocol = \"icmp\"\ndst_port = 80\n",
    );
    let (_, _, kind, _) = rule_problem(&text);
    assert_eq!(kind, RuleProblem::PortsWithoutTransport { protocol: 1 });
}

#[test]
fn reversed_port_range() {
    let text = with_classes(
        "\n[[rule]]\npriority = 1\nclass = \"gradient\"\nprotocol = \"udp\"\ndst_port = \"5100-5000\"\n",
    );
    let (_, _, kind, at) = rule_problem(&text);
    assert_eq!(
        kind,
        RuleProblem::ReversedPortRange {
            field: "dst_port",
            lo: 5100,
            hi: 5000
        }
    );
    assert_eq!(
        at,
        Position {
            line: 18,
            column: 12
        }
    );
}

#[test]
fn unknown_fields_and_wrong_types_are_syntax_errors_with_positions() {
    let text = with_classes("\n[[rule]]\npriority = 1\nclass = \"gradient\"\ndst_prot = 80\n");
    let (problem, at) = refused(&text);
    assert!(
        matches!(&problem, Problem::Syntax(m) if m.contains("unknown field `dst_prot`")),
        "{problem}"
    );
    assert_eq!(at.line, 17);

    let text = with_classes("\n[[rule]]\npriority = \"ten\"\nclass = \"gradient\"\n");
    let (problem, at) = refused(&text);
    assert!(
        matches!(&problem, Problem::Syntax(m) if m.contains("invalid type")),
        "{problem}"
    );
    assert_eq!(
        at,
        Position {
            line: 15,
            column: 12
        }
    );

    let (problem, at) = refused("[[class]]\nid = 1\nname = \"x\"\ncolour = \"red\"\n");
    assert!(matches!(&problem, Problem::Syntax(m) if m.contains("unknown field `colour`")));
    assert_eq!(at.line, 4);

    let (problem, _) = refused("[[rule]]\npriority = 1\n");
    assert!(matches!(&problem, Problem::Syntax(m) if m.contains("missing field `class`")));

    let (problem, at) = refused("[[class]\nid = 1\n");
    assert!(matches!(problem, Problem::Syntax(_)));
    assert_eq!(at.line, 1);
}

#[test]
fn empty_files_and_files_without_classes() {
    assert_eq!(refused("").0, Problem::Empty);
    assert_eq!(refused("# only a comment\n\n").0, Problem::Empty);
    let (problem, at) = refused("\n\n[[rule]]\npriority = 1\nclass = \"default\"\n");
    assert_eq!(problem, Problem::NoClasses);
    assert_eq!(at.line, 3);
}

/// A class table's text and a check of the problem it must cause.
type ClassCase = (String, fn(&ClassProblem) -> bool);

#[test]
fn class_table_refusals() {
    let class = |id: i64, name: &str| format!("[[class]]\nid = {id}\nname = \"{name}\"\n\n");
    let cases: Vec<ClassCase> = vec![
        (class(16, "big"), |k| {
            matches!(k, ClassProblem::IdOutOfRange { id: 16, .. })
        }),
        (class(-1, "neg"), |k| {
            matches!(k, ClassProblem::IdOutOfRange { id: -1, .. })
        }),
        (class(0, "zero"), |k| {
            matches!(k, ClassProblem::ZeroNotDefault { .. })
        }),
        (class(3, "default"), |k| {
            matches!(k, ClassProblem::DefaultNotZero { id: 3 })
        }),
        (class(1, "Bad Name"), |k| {
            matches!(k, ClassProblem::BadName { .. })
        }),
        (class(1, "a") + &class(1, "b"), |k| {
            matches!(
                k,
                ClassProblem::DuplicateId {
                    id: 1,
                    first: 1,
                    first_line: 1
                }
            )
        }),
        (class(1, "a") + &class(2, "a"), |k| {
            matches!(k, ClassProblem::DuplicateName { first: 1, .. })
        }),
    ];
    for (text, expected) in cases {
        match refused(&text).0 {
            Problem::Class { kind, .. } => assert!(expected(&kind), "{text}: {kind}"),
            other => panic!("{text}: {other}"),
        }
    }
}

#[test]
fn limits_on_classes_and_rules() {
    let mut text = String::new();
    for id in 0..17 {
        let name = if id == 0 {
            "default".to_string()
        } else {
            format!("c{id}")
        };
        text += &format!("[[class]]\nid = {}\nname = \"{name}\"\n", id.min(15));
    }
    let (problem, at) = refused(&text);
    assert_eq!(problem, Problem::TooManyClasses { count: 17, max: 16 });
    assert_eq!(at.line, 49);

    let mut text = CLASSES.to_string();
    for priority in 0..257 {
        text += &format!("[[rule]]\npriority = {priority}\nclass = \"gradient\"\n");
    }
    let (problem, _) = refused(&text);
    assert_eq!(
        problem,
        Problem::TooManyRules {
            count: 257,
            max: 256
        }
    );
    // Exactly the maximum is fine.
    let mut text = CLASSES.to_string();
    for priority in 0..256 {
        text += &format!("[[rule]]\npriority = {priority}\nclass = \"gradient\"\n");
    }
    assert_eq!(Policy::parse(&text, "t").unwrap().rules.len(), 256);
}

#[test]
fn load_reports_missing_files() {
    let err = Policy::load(Path::new("/nonexistent/causeway.toml")).unwrap_err();
    assert!(matches!(err, PolicyError::Read { .. }));
    assert!(err.to_string().contains("/nonexistent/causeway.toml"));
}

#[test]
fn a_file_cut_after_a_key_names_the_key() {
    let cut = EXAMPLE
        .find("priority = 30")
        .map(|at| &EXAMPLE[..at + "priority =".len()])
        .expect("the example has a rule with priority 30");
    let err = Policy::parse(cut, "cut.toml").expect_err("a cut file is refused");
    assert_eq!(
        err.to_string(),
        "cut.toml:49:11: `priority` has no value: write one after `=`"
    );
    // The same with more lines after it (toml reports a token it wanted).
    let text = format!("{cut}\nclass = \"bulk\"\n");
    let err = Policy::parse(&text, "cut.toml").expect_err("a missing value is refused");
    assert_eq!(
        err.to_string(),
        "cut.toml:49:11: `priority` has no value: write one after `=`"
    );
}

#[test]
fn syntax_errors_are_one_line_and_never_empty() {
    for text in [
        "[[class]",
        "[[class]]\nid = [1,",
        "[[class]]\nname = \"x",
        "=",
    ] {
        let err = Policy::parse(text, "t.toml").expect_err("malformed TOML is refused");
        let Some(Problem::Syntax(message)) = err.problem() else {
            panic!("{text:?}: not a syntax problem: {err}");
        };
        assert!(!message.trim().is_empty(), "{text:?}: empty message");
        assert!(!message.contains('\n'), "{text:?}: {message:?}");
    }
}

#[test]
fn unclassified_action_admission_and_dscp_lists() {
    use crate::classifier::{DscpSet, UnclassifiedAction};
    let text = format!(
        "unclassified = \"drop\"\n{CLASSES}{}",
        r#"
[[rule]]
priority = 1
dscp = [34, "ef"]
protocol = "icmpv6"
class = "control"

[admission]
ports = ["5000-5100", 3190]
prefixes = ["10.2.0.0/16", "fd00:2::/32", "192.0.2.7"]
"#
    );
    let policy = Policy::parse(&text, "t.toml").expect("valid");
    assert_eq!(policy.rules.unclassified(), UnclassifiedAction::Drop);
    let rule = policy.rules.rules()[0];
    assert_eq!(rule.dscp, Some(DscpSet::new(&[34, 46]).unwrap()));
    assert_eq!(rule.proto, Some(58));
    let admission = policy.rules.admission().expect("admission");
    assert_eq!(admission.prefixes().len(), 3);
    assert!(admission.protects(3190) && admission.protects(5000) && !admission.protects(80));
    assert!(policy
        .describe()
        .contains("admission: ports 5000-5100,3190 only from 3 prefixes"));
    assert!(policy.describe().contains("unclassified frames: drop"));

    // Without the keys: pass, no admission.
    let plain = Policy::parse(&with_classes(""), "t.toml").expect("valid");
    assert_eq!(plain.rules.unclassified(), UnclassifiedAction::Pass);
    assert!(plain.rules.admission().is_none());

    let (problem, at) = refused(&format!("unclassified = \"maybe\"\n{CLASSES}"));
    assert!(
        matches!(problem, Problem::BadUnclassified { .. }),
        "{problem:?}"
    );
    assert_eq!(at.line, 1);
    let (problem, at) = refused(&with_classes(
        "\n[admission]\nports = [80]\nprefixes = [\"10.0.0.1/8\"]\n",
    ));
    assert!(
        matches!(&problem, Problem::Admission(why) if why.contains("host bits")),
        "{problem:?}"
    );
    assert_eq!(at.line, 16);
    let (problem, _) = refused(&with_classes("\n[admission]\nports = []\nprefixes = []\n"));
    assert!(
        matches!(&problem, Problem::Admission(why) if why.contains("no port")),
        "{problem:?}"
    );
    let (problem, _) = refused(&with_classes(
        "\n[[rule]]\npriority = 1\nclass = \"gradient\"\ndscp = []\n",
    ));
    assert!(matches!(problem, Problem::Rule { .. }), "{problem:?}");
}
