//! Turns the raw TOML document into a validated [`Policy`], refusing the
//! first problem found with its line and column.

use std::collections::HashMap;

use bpf_maps::classifier::{DEFAULT_CLASS, MAX_CLASSES, MAX_RULES};
use toml::Spanned;

use crate::classifier::{Admission, Rule, RuleSet, UnclassifiedAction, Verdict};

use super::{
    class::{is_valid_class_name, ClassTable, TrafficClass, DEFAULT_CLASS_NAME},
    document::{self, RawAdmission, RawClass, RawPolicy, RawRule},
    error::{ClassProblem, PolicyError, Position, Problem, RuleProblem},
    field, shaping, Policy,
};

/// Parses and validates `text`; `origin` (usually the file name) prefixes
/// every error.
pub(super) fn parse(text: &str, origin: &str) -> Result<Policy, PolicyError> {
    let fail = |offset: usize, problem: Problem| PolicyError::Invalid {
        origin: origin.to_string(),
        at: Position::of_offset(text, offset),
        problem,
    };
    let raw: RawPolicy = toml::from_str(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        fail(offset, Problem::Syntax(document::syntax_message(text, &e)))
    })?;
    if raw.classes.is_empty() && raw.rules.is_empty() {
        return Err(fail(0, Problem::Empty));
    }
    if raw.classes.is_empty() {
        return Err(fail(raw.rules[0].span().start, Problem::NoClasses));
    }
    let line = |offset: usize| Position::of_offset(text, offset).line;
    let classes = check_classes(&raw.classes, &line).map_err(|(offset, p)| fail(offset, p))?;
    let rules = check_rules(&raw.rules, &classes, &line).map_err(|(offset, p)| fail(offset, p))?;
    // Every limit RuleSet checks was checked above with a position; a
    // failure here would be a gap in those checks, reported at the top.
    let unclassified = match &raw.unclassified {
        None => UnclassifiedAction::Pass,
        Some(v) => match v.get_ref().to_ascii_lowercase().as_str() {
            "pass" => UnclassifiedAction::Pass,
            "drop" => UnclassifiedAction::Drop,
            _ => {
                return Err(fail(
                    v.span().start,
                    Problem::BadUnclassified {
                        value: v.get_ref().clone(),
                    },
                ))
            }
        },
    };
    let admission = raw
        .admission
        .as_ref()
        .map(|a| check_admission(a).map_err(|(offset, why)| fail(offset, Problem::Admission(why))))
        .transpose()?;
    let rules = RuleSet::new(rules)
        .map_err(|e| fail(0, Problem::Syntax(format!("rule set refused: {e}"))))?
        .with_unclassified(unclassified)
        .with_admission(admission);
    let class_shaping: Vec<_> = raw
        .classes
        .iter()
        .zip(classes_in_file_order(&raw.classes))
        .map(|(c, id)| (id, c.get_ref().shaping.as_ref()))
        .collect();
    let shaping = shaping::check(raw.shaping.as_ref(), &class_shaping, &classes).map_err(
        |(offset, index, kind)| match index {
            None => fail(offset, Problem::LinkShaping(kind)),
            Some(i) => fail(
                offset,
                Problem::ClassShaping {
                    index: i + 1,
                    line: line(raw.classes[i].span().start),
                    kind,
                },
            ),
        },
    )?;
    Ok(Policy {
        classes,
        rules,
        shaping,
    })
}

/// The `[admission]` table; the error is (offset, what is wrong).
fn check_admission(raw: &Spanned<RawAdmission>) -> Result<Admission, (usize, String)> {
    let table = raw.get_ref();
    let prefixes = table
        .prefixes
        .iter()
        .map(|p| {
            field::prefix("prefixes", p.get_ref()).map_err(|e| (p.span().start, e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ports = table
        .ports
        .iter()
        .map(|p| field::ports("ports", p.get_ref()).map_err(|e| (p.span().start, e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    Admission::new(prefixes, ports).map_err(|e| (raw.span().start, e.to_string()))
}

/// Class ids in `[[class]]` order (checked by `check_classes`).
fn classes_in_file_order(raw: &[Spanned<RawClass>]) -> Vec<u8> {
    raw.iter()
        .map(|c| u8::try_from(*c.get_ref().id.get_ref()).unwrap_or(u8::MAX))
        .collect()
}

type Failure = (usize, Problem);

fn check_classes(
    raw: &[Spanned<RawClass>],
    line: &dyn Fn(usize) -> usize,
) -> Result<ClassTable, Failure> {
    if raw.len() > MAX_CLASSES as usize {
        return Err((
            raw[MAX_CLASSES as usize].span().start,
            Problem::TooManyClasses {
                count: raw.len(),
                max: MAX_CLASSES as usize,
            },
        ));
    }
    let mut by_id: HashMap<u8, usize> = HashMap::new();
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    let mut classes = Vec::with_capacity(raw.len());
    for (i, spanned) in raw.iter().enumerate() {
        let class = spanned.get_ref();
        let at = |offset: usize, kind: ClassProblem| {
            (
                offset,
                Problem::Class {
                    index: i + 1,
                    line: line(spanned.span().start),
                    kind,
                },
            )
        };
        let id_raw = *class.id.get_ref();
        let id = u8::try_from(id_raw)
            .ok()
            .filter(|id| u32::from(*id) < MAX_CLASSES)
            .ok_or_else(|| {
                at(
                    class.id.span().start,
                    ClassProblem::IdOutOfRange {
                        id: id_raw,
                        max: MAX_CLASSES - 1,
                    },
                )
            })?;
        let name = class.name.get_ref().as_str();
        let name_at = class.name.span().start;
        if !is_valid_class_name(name) {
            return Err(at(name_at, ClassProblem::BadName { name: name.into() }));
        }
        if u32::from(id) == DEFAULT_CLASS && name != DEFAULT_CLASS_NAME {
            return Err(at(
                name_at,
                ClassProblem::ZeroNotDefault { name: name.into() },
            ));
        }
        if name == DEFAULT_CLASS_NAME && u32::from(id) != DEFAULT_CLASS {
            return Err(at(
                class.id.span().start,
                ClassProblem::DefaultNotZero { id },
            ));
        }
        if let Some(&first) = by_id.get(&id) {
            let first_line = line(raw[first].span().start);
            return Err(at(
                class.id.span().start,
                ClassProblem::DuplicateId {
                    id,
                    first: first + 1,
                    first_line,
                },
            ));
        }
        if let Some(&first) = by_name.get(name) {
            let first_line = line(raw[first].span().start);
            return Err(at(
                name_at,
                ClassProblem::DuplicateName {
                    name: name.into(),
                    first: first + 1,
                    first_line,
                },
            ));
        }
        by_id.insert(id, i);
        by_name.insert(name, i);
        classes.push(TrafficClass {
            id,
            name: name.to_string(),
        });
    }
    Ok(ClassTable::from_checked(classes))
}

fn check_rules(
    raw: &[Spanned<RawRule>],
    classes: &ClassTable,
    line: &dyn Fn(usize) -> usize,
) -> Result<Vec<Rule>, Failure> {
    if raw.len() > MAX_RULES {
        return Err((
            raw[MAX_RULES].span().start,
            Problem::TooManyRules {
                count: raw.len(),
                max: MAX_RULES,
            },
        ));
    }
    let mut priorities: HashMap<u32, usize> = HashMap::new();
    let mut rules = Vec::with_capacity(raw.len());
    for (i, spanned) in raw.iter().enumerate() {
        let at = |offset: usize, kind: RuleProblem| {
            (
                offset,
                Problem::Rule {
                    index: i + 1,
                    line: line(spanned.span().start),
                    kind,
                },
            )
        };
        let rule = check_rule(spanned.get_ref(), classes).map_err(|(o, k)| at(o, k))?;
        if let Some(&first) = priorities.get(&rule.priority) {
            return Err(at(
                spanned.get_ref().priority.span().start,
                RuleProblem::DuplicatePriority {
                    priority: rule.priority,
                    first: first + 1,
                    first_line: line(raw[first].span().start),
                },
            ));
        }
        priorities.insert(rule.priority, i);
        rules.push(rule);
    }
    Ok(rules)
}

/// Checks one rule's fields; the error carries the offset of the field.
fn check_rule(raw: &RawRule, classes: &ClassTable) -> Result<Rule, (usize, RuleProblem)> {
    fn opt<T, U>(
        value: &Option<Spanned<T>>,
        parse: impl FnOnce(&T) -> Result<U, RuleProblem>,
    ) -> Result<Option<U>, (usize, RuleProblem)> {
        value
            .as_ref()
            .map(|v| parse(v.get_ref()).map_err(|p| (v.span().start, p)))
            .transpose()
    }
    let class_name = raw.class.get_ref();
    let class = classes.by_name(class_name).ok_or_else(|| {
        (
            raw.class.span().start,
            RuleProblem::UnknownClass {
                name: class_name.clone(),
                defined: classes.names(),
            },
        )
    })?;
    let src = opt(&raw.src, |s: &String| field::prefix("src", s))?;
    let dst = opt(&raw.dst, |s: &String| field::prefix("dst", s))?;
    if let (Some(s), Some(d), Some(dst_raw)) = (src, dst, raw.dst.as_ref()) {
        if s.is_ipv4() != d.is_ipv4() {
            let family = |v4: bool| if v4 { "IPv4" } else { "IPv6" };
            return Err((
                dst_raw.span().start,
                RuleProblem::MixedFamilies {
                    src_family: family(s.is_ipv4()),
                    dst_family: family(d.is_ipv4()),
                },
            ));
        }
    }
    let proto = opt(&raw.protocol, field::protocol)?;
    let src_ports = opt(&raw.src_port, |v| field::ports("src_port", v))?;
    let dst_ports = opt(&raw.dst_port, |v| field::ports("dst_port", v))?;
    if let (Some(p), Some(protocol)) = (proto, raw.protocol.as_ref()) {
        if (src_ports.is_some() || dst_ports.is_some()) && p != 6 && p != 17 {
            return Err((
                protocol.span().start,
                RuleProblem::PortsWithoutTransport { protocol: p },
            ));
        }
    }
    let dscp = opt(&raw.dscp, field::dscp_set)?;
    let verdict = opt(&raw.action, |s: &String| field::action(s))?.unwrap_or(Verdict::Pass);
    Ok(Rule {
        priority: *raw.priority.get_ref(),
        src,
        dst,
        proto,
        src_ports,
        dst_ports,
        dscp,
        class: class.id,
        verdict,
    })
}
