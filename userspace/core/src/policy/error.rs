//! Policy errors: each names the file, the line and column, and what is wrong.

use std::{fmt, path::PathBuf};

/// A 1-based line and column in a policy file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl Position {
    /// The start of the file.
    pub const START: Self = Self { line: 1, column: 1 };

    /// The line and column of byte `offset` in `text` (columns count characters).
    pub fn of_offset(text: &str, offset: usize) -> Self {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Self { line, column }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Why a policy file was refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read policy file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}:{at}: {problem}")]
    Invalid {
        /// The file name (or another label for the text).
        origin: String,
        at: Position,
        problem: Problem,
    },
}

impl PolicyError {
    /// The problem found in the text, if the text could be read.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Self::Invalid { problem, .. } => Some(problem),
            Self::Read { .. } => None,
        }
    }

    /// Where the problem is, if the text could be read.
    pub fn position(&self) -> Option<Position> {
        match self {
            Self::Invalid { at, .. } => Some(*at),
            Self::Read { .. } => None,
        }
    }
}

/// What is wrong with a policy's text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// TOML syntax, an unknown field, a missing field or a value of the
    /// wrong type (toml's own message).
    #[error("{0}")]
    Syntax(String),
    #[error("the policy is empty: define at least one [[class]] and the [[rule]]s that use it")]
    Empty,
    #[error("the policy defines no classes: add at least one [[class]] table")]
    NoClasses,
    #[error("{count} classes, at most {max} are allowed")]
    TooManyClasses { count: usize, max: usize },
    #[error("{count} rules, at most {max} are allowed")]
    TooManyRules { count: usize, max: usize },
    #[error("class {index} (line {line}): {kind}")]
    Class {
        /// 1-based position of the `[[class]]` table in the file.
        index: usize,
        line: usize,
        kind: ClassProblem,
    },
    #[error("[shaping]: {0}")]
    LinkShaping(super::shaping::ShapingProblem),
    #[error("class {index} (line {line}): shaping: {kind}")]
    ClassShaping {
        /// 1-based position of the `[[class]]` table in the file.
        index: usize,
        line: usize,
        kind: super::shaping::ShapingProblem,
    },
    #[error("unclassified = \"{value}\": expected \"pass\" or \"drop\"")]
    BadUnclassified { value: String },
    #[error("[admission]: {0}")]
    Admission(String),
    #[error("rule {index} (line {line}): {kind}")]
    Rule {
        /// 1-based position of the `[[rule]]` table in the file.
        index: usize,
        line: usize,
        kind: RuleProblem,
    },
}

/// What is wrong with one `[[class]]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClassProblem {
    #[error("id {id} is out of range: class ids are 0..={max}")]
    IdOutOfRange { id: i64, max: u32 },
    #[error("id {id} is already used by class {first} (line {first_line})")]
    DuplicateId {
        id: u8,
        first: usize,
        first_line: usize,
    },
    #[error("name '{name}' is already used by class {first} (line {first_line})")]
    DuplicateName {
        name: String,
        first: usize,
        first_line: usize,
    },
    #[error("name '{name}' is not valid: use 1 to 32 characters out of a-z, 0-9, '_' and '-', starting with a letter")]
    BadName { name: String },
    #[error("class id 0 is the default class (frames that match no rule): it must be named 'default', not '{name}'")]
    ZeroNotDefault { name: String },
    #[error("class 'default' must have id 0, not {id}")]
    DefaultNotZero { id: u8 },
}

/// What is wrong with one `[[rule]]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleProblem {
    #[error("class '{name}' is not defined (defined classes: {defined})")]
    UnknownClass { name: String, defined: String },
    #[error("priority {priority} is already used by rule {first} (line {first_line}); every rule needs its own priority")]
    DuplicatePriority {
        priority: u32,
        first: usize,
        first_line: usize,
    },
    #[error("{field} = \"{value}\": {reason}")]
    BadPrefix {
        field: &'static str,
        value: String,
        reason: String,
    },
    #[error("{field}: port range {lo}-{hi} is reversed (write {hi}-{lo})")]
    ReversedPortRange {
        field: &'static str,
        lo: u16,
        hi: u16,
    },
    #[error("{field}: {reason}")]
    BadPort { field: &'static str, reason: String },
    #[error("protocol: {reason}")]
    BadProtocol { reason: String },
    #[error("dscp: {reason}")]
    BadDscp { reason: String },
    #[error("action '{value}' is not known: use \"pass\" or \"drop\"")]
    BadAction { value: String },
    #[error("src is {src_family} but dst is {dst_family}: a rule matches one IP family")]
    MixedFamilies {
        src_family: &'static str,
        dst_family: &'static str,
    },
    #[error("ports need protocol tcp or udp (or no protocol), not {protocol}")]
    PortsWithoutTransport { protocol: u8 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_map_to_lines_and_columns() {
        let text = "a = 1\nbb = 2\n\nccc";
        assert_eq!(
            Position::of_offset(text, 0),
            Position { line: 1, column: 1 }
        );
        assert_eq!(
            Position::of_offset(text, 4),
            Position { line: 1, column: 5 }
        );
        assert_eq!(
            Position::of_offset(text, 6),
            Position { line: 2, column: 1 }
        );
        assert_eq!(
            Position::of_offset(text, 15),
            Position { line: 4, column: 2 }
        );
        // Past the end clamps; inside a multi-byte character rounds down.
        assert_eq!(
            Position::of_offset(text, 999),
            Position { line: 4, column: 4 }
        );
        assert_eq!(
            Position::of_offset("é=1", 1),
            Position { line: 1, column: 1 }
        );
    }
}
