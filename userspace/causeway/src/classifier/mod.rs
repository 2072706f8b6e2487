//! The classifier: the pure rule model, compiler and reference classifier
//! live in `causeway_core::classifier` (re-exported here); this module adds
//! the atomic writes of compiled rules into the kernel's maps (`maps`).

pub use causeway_core::classifier::*;

mod map_writes;
pub mod maps;

pub use maps::{ClassifierMaps, ClassifierMapsError};
