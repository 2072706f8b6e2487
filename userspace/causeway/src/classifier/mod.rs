//! The classifier's rule model (what a validated policy becomes) and, beside
//! it, how rules are compiled into the kernel's maps and a pure reference
//! classifier that the kernel program is differential-tested against.

pub mod rule;

pub use rule::{IpPrefix, PortRange, Rule, RuleSet, RuleSetError, Verdict};
