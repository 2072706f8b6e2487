//! The classifier's rule model (what a validated policy becomes) and, beside
//! it, how rules are compiled into the kernel's maps (`compile`), written to
//! them atomically (`maps`), and a pure reference classifier (`reference`)
//! that the kernel program is differential-tested against.

pub mod compile;
mod map_writes;
pub mod maps;
pub mod reference;
pub mod rollback;
pub mod rule;

pub use maps::{ClassifierMaps, ClassifierMapsError, StagedRules};
pub use rollback::RulesSnapshot;
pub use rule::{IpPrefix, PortRange, Rule, RuleSet, RuleSetError, Verdict};
