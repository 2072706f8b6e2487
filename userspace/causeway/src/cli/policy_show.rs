//! `policy show [--json]`: the policy applied to each interface, its live
//! classifier state and its measured shaping, as text or as one JSON
//! document (the [`PolicyShow`] schema, stable: fields are only added).

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use causeway::{
    classifier::{PortRange, Rule, Verdict},
    datapath::{rules, state, state::PolicyRecord},
    policy::Policy,
};

use super::{shaper::ShapingView, Context};

/// What `policy show --json` prints.
#[derive(Debug, Serialize)]
pub struct PolicyShow {
    pub interfaces: Vec<IfacePolicy>,
}

/// One attached interface.
#[derive(Debug, Serialize)]
pub struct IfacePolicy {
    pub iface: String,
    /// The namespace scope (`host` or `netns:NAME`).
    pub scope: String,
    /// The classifier maps' live generation, rule count and rule set.
    pub generation: u64,
    pub rule_count: u32,
    pub active_set: u32,
    /// `null` when no policy was applied (every frame is class `default`).
    pub policy: Option<AppliedPolicy>,
}

/// The recorded policy of an interface.
#[derive(Debug, Serialize)]
pub struct AppliedPolicy {
    /// The file it was applied from.
    pub source: String,
    /// The generation the apply produced; differs from the live one when
    /// something else changed the maps since.
    pub applied_generation: u64,
    pub classes: Vec<ClassView>,
    /// In priority order (first match wins).
    pub rules: Vec<RuleView>,
    /// `null` without shaping in the policy.
    pub shaping: Option<ShapingView>,
}

#[derive(Debug, Serialize)]
pub struct ClassView {
    pub id: u8,
    pub name: String,
}

/// One rule; absent (`null`) fields match anything.
#[derive(Debug, Serialize)]
pub struct RuleView {
    pub priority: u32,
    /// IP protocol number.
    pub protocol: Option<u8>,
    /// A prefix, `10.0.0.0/8` or `fd00::/8`.
    pub src: Option<String>,
    /// Inclusive port range `[lo, hi]`.
    pub src_ports: Option<[u16; 2]>,
    pub dst: Option<String>,
    pub dst_ports: Option<[u16; 2]>,
    /// One DSCP value, or a list of them.
    pub dscp: Option<DscpView>,
    pub class: String,
    /// `pass` or `drop`.
    pub verdict: &'static str,
}

/// A rule's DSCP values: a number when there is one, else a list.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum DscpView {
    One(u8),
    Many(Vec<u8>),
}

impl RuleView {
    fn new(policy: &Policy, r: &Rule) -> Self {
        let ports = |p: Option<PortRange>| p.map(|p| [p.lo(), p.hi()]);
        Self {
            priority: r.priority,
            protocol: r.proto,
            src: r.src.map(|p| p.to_string()),
            src_ports: ports(r.src_ports),
            dst: r.dst.map(|p| p.to_string()),
            dst_ports: ports(r.dst_ports),
            dscp: r.dscp.map(|set| {
                let values: Vec<u8> = set.values().collect();
                match values.as_slice() {
                    [one] => DscpView::One(*one),
                    _ => DscpView::Many(values),
                }
            }),
            class: policy.classes.name_of(r.class),
            verdict: match r.verdict {
                Verdict::Pass => "pass",
                Verdict::Drop => "drop",
            },
        }
    }
}

pub fn run(ctx: &Context, iface: Option<&str>, json: bool) -> Result<()> {
    let mut report = PolicyShow {
        interfaces: Vec::new(),
    };
    for iface in ctx.targets(iface)? {
        let (shown, policy) = collect(ctx, &iface)?;
        if json {
            report.interfaces.push(shown);
        } else {
            print_text(&shown, policy.as_ref());
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

fn collect(ctx: &Context, iface: &str) -> Result<(IfacePolicy, Option<Policy>)> {
    let paths = ctx.layout.iface(&ctx.scope, iface)?;
    if !paths.pin_dir.exists() {
        bail!("{iface} is not attached in the {}", ctx.scope);
    }
    let live = rules::config(&paths.maps_dir)
        .with_context(|| format!("cannot read the classifier config of {iface}"))?;
    let record: Option<PolicyRecord> = state::read_json(&paths.policy_record())?;
    let mut shown = IfacePolicy {
        iface: iface.to_string(),
        scope: ctx.scope.to_string(),
        generation: live.generation,
        rule_count: live.rule_count,
        active_set: live.active_set,
        policy: None,
    };
    let Some(record) = record else {
        return Ok((shown, None));
    };
    let policy = Policy::parse(&record.text, &record.source)
        .with_context(|| format!("the recorded policy of {iface} no longer parses"))?;
    shown.policy = Some(AppliedPolicy {
        source: record.source,
        applied_generation: record.generation,
        classes: policy
            .classes
            .iter()
            .map(|c| ClassView {
                id: c.id,
                name: c.name.clone(),
            })
            .collect(),
        rules: policy
            .rules
            .rules()
            .iter()
            .map(|r| RuleView::new(&policy, r))
            .collect(),
        shaping: super::shaper::measure(ctx, iface)?,
    });
    Ok((shown, Some(policy)))
}

fn print_text(shown: &IfacePolicy, policy: Option<&Policy>) {
    println!(
        "{} ({}): generation {}, {} rules live in set {}",
        shown.iface, shown.scope, shown.generation, shown.rule_count, shown.active_set
    );
    let (Some(applied), Some(policy)) = (&shown.policy, policy) else {
        println!("  no policy applied: every frame is class 'default'");
        return;
    };
    println!(
        "  from {} (applied at generation {})",
        applied.source, applied.applied_generation
    );
    if applied.applied_generation != shown.generation {
        println!(
            "  warning: the maps are at generation {}, changed by something else since",
            shown.generation
        );
    }
    for line in policy.describe().lines() {
        println!("  {line}");
    }
    match &applied.shaping {
        Some(s) => super::shaper::print_shaping(s),
        None => println!("  no shaping"),
    }
}
