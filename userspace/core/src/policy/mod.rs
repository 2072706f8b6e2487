//! The policy file: TOML → validated [`Policy`] (a class table and a
//! [`RuleSet`]), refused as a whole with the file, line and column of the
//! first problem.
//!
//! ```toml
//! [[class]]
//! id = 1
//! name = "gradient"
//!
//! [[rule]]
//! priority = 10
//! src = "10.2.0.0/16"        # prefix, or a bare address
//! protocol = "udp"           # name or number
//! dst_port = "5000-5100"     # port or "lo-hi"
//! dscp = "af41"              # 0..=63 or a name, or a list: [34, "ef"]
//! class = "gradient"
//! action = "pass"            # or "drop"
//! ```
//!
//! Before the rules: `unclassified = "pass" | "drop"` (top level, default
//! pass) for frames the parser cannot fully read, and an `[admission]`
//! table (`prefixes = [...]`, `ports = [...]`): frames to those ports pass
//! only from those source prefixes.
//!
//! [`EXAMPLE`] is a complete policy.

mod class;
mod document;
mod error;
mod field;
mod quantity;
pub mod shaping;
mod validate;

use std::{fmt::Write as _, path::Path};

pub use class::{ClassTable, TrafficClass, DEFAULT_CLASS_NAME};
pub use error::{ClassProblem, PolicyError, Position, Problem, RuleProblem};

use crate::classifier::{IpPrefix, PortRange, Rule, RuleSet, UnclassifiedAction, Verdict};

/// A complete example policy (`src/policy/example.toml`).
pub const EXAMPLE: &str = include_str!("example.toml");

/// A validated policy: what `policy apply` writes to the maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub classes: ClassTable,
    pub rules: RuleSet,
    /// Egress shaping, when the policy has a `[shaping]` table.
    pub shaping: Option<shaping::ShapingPolicy>,
}

impl Policy {
    /// Parses and validates policy text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, PolicyError> {
        validate::parse(text, origin)
    }

    /// Reads, parses and validates a policy file.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// A human-readable listing of the classes and the rules in priority order.
    pub fn describe(&self) -> String {
        let mut out = String::from("classes:\n");
        for class in self.classes.iter() {
            let _ = writeln!(out, "  {:>2}  {}", class.id, class.name);
        }
        let _ = writeln!(out, "rules ({}, first match wins):", self.rules.len());
        for rule in self.rules.rules() {
            let _ = writeln!(out, "  {}", self.describe_rule(rule));
        }
        if self.rules.unclassified() == UnclassifiedAction::Drop {
            out += "unclassified frames: drop\n";
        }
        if let Some(admission) = self.rules.admission() {
            let ports: Vec<String> = admission
                .ports()
                .iter()
                .map(|r| match (r.lo(), r.hi()) {
                    (lo, hi) if lo == hi => lo.to_string(),
                    (lo, hi) => format!("{lo}-{hi}"),
                })
                .collect();
            let _ = writeln!(
                out,
                "admission: ports {} only from {} prefixes",
                ports.join(","),
                admission.prefixes().len()
            );
        }
        if let Some(shaping) = &self.shaping {
            out += &shaping.describe(&self.classes);
        }
        out
    }

    /// One rule on one line: `prio 10: udp 10.2.0.0/16 -> any dport 5000-5100 => gradient`.
    pub fn describe_rule(&self, rule: &Rule) -> String {
        let prefix = |p: Option<IpPrefix>| p.map_or_else(|| "any".to_string(), |p| p.to_string());
        let ports = |p: Option<PortRange>| match p {
            None => "any".to_string(),
            Some(r) if r.lo() == r.hi() => r.lo().to_string(),
            Some(r) => format!("{}-{}", r.lo(), r.hi()),
        };
        let proto = rule
            .proto
            .map_or_else(|| "any".to_string(), field::protocol_name);
        let dscp = rule
            .dscp
            .map_or_else(|| "any".to_string(), |d| d.to_string());
        let verdict = match rule.verdict {
            Verdict::Pass => "pass",
            Verdict::Drop => "drop",
        };
        format!(
            "prio {:>5}: proto {proto} src {} sport {} dst {} dport {} dscp {dscp} => {} ({verdict})",
            rule.priority,
            prefix(rule.src),
            ports(rule.src_ports),
            prefix(rule.dst),
            ports(rule.dst_ports),
            self.classes.name_of(rule.class),
        )
    }
}

#[cfg(test)]
mod tests;
