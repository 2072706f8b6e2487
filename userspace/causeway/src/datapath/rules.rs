//! The classifier maps of an attachment, reached through their pins.

use std::path::Path;

use bpf_maps::classifier::ClassifierConfig;

use super::DatapathError;
use crate::classifier::{ClassifierMaps, RuleSet};

/// Writes `rules` to the pinned maps in `maps_dir` (inactive set, then the
/// flip); returns the new generation.
pub fn apply(maps_dir: &Path, rules: &RuleSet) -> Result<u64, DatapathError> {
    let mut maps = open(maps_dir)?;
    maps.apply(rules)
        .map_err(|source| DatapathError::Classifier {
            dir: maps_dir.to_path_buf(),
            source: Box::new(source),
        })
}

/// The live classifier configuration (active set, rule count, generation).
pub fn config(maps_dir: &Path) -> Result<ClassifierConfig, DatapathError> {
    open(maps_dir)?
        .config()
        .map_err(|source| DatapathError::Classifier {
            dir: maps_dir.to_path_buf(),
            source: Box::new(source),
        })
}

fn open(maps_dir: &Path) -> Result<ClassifierMaps, DatapathError> {
    ClassifierMaps::from_pin_dir(maps_dir).map_err(|source| DatapathError::Classifier {
        dir: maps_dir.to_path_buf(),
        source: Box::new(source),
    })
}
