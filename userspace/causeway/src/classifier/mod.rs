//! The classifier: the pure rule model, compiler and reference classifier
//! live in `causeway_core::classifier` (re-exported here); this module adds
//! the atomic writes of compiled rules into the kernel's maps (`maps`) and
//! their undo (`rollback`).

pub use causeway_core::classifier::*;

mod map_writes;
pub mod maps;
pub mod rollback;

pub use maps::{ClassifierMaps, ClassifierMapsError, StagedRules};
pub use rollback::RulesSnapshot;
