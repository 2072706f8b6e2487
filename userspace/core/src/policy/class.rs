//! The class table: up to `MAX_CLASSES` named traffic classes with ids.
//!
//! Class 0 is always `default`: the class of frames that match no rule.
//! Per-class settings beyond the name (shaping, marking) are added as fields
//! of [`TrafficClass`] and of the raw `[[class]]` table in `document.rs`.

use bpf_maps::classifier::{DEFAULT_CLASS, MAX_CLASSES};
use serde::Serialize;

/// The name of class 0.
pub const DEFAULT_CLASS_NAME: &str = "default";

/// One traffic class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TrafficClass {
    /// Index into the kernel's per-class maps, `< MAX_CLASSES`.
    pub id: u8,
    pub name: String,
}

impl TrafficClass {
    /// The implicit class 0.
    pub fn default_class() -> Self {
        Self {
            id: DEFAULT_CLASS as u8,
            name: DEFAULT_CLASS_NAME.to_string(),
        }
    }
}

/// Classes sorted by id; ids and names are unique and class 0 is `default`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ClassTable {
    classes: Vec<TrafficClass>,
}

impl ClassTable {
    /// Builds the table from classes whose ids and names the caller has
    /// checked; adds `default` (id 0) when it is missing.
    pub(super) fn from_checked(mut classes: Vec<TrafficClass>) -> Self {
        if !classes.iter().any(|c| u32::from(c.id) == DEFAULT_CLASS) {
            classes.push(TrafficClass::default_class());
        }
        classes.sort_by_key(|c| c.id);
        debug_assert!(classes.len() <= MAX_CLASSES as usize);
        Self { classes }
    }

    /// The table of a host without a policy: `default` only.
    pub fn default_only() -> Self {
        Self::from_checked(Vec::new())
    }

    /// Classes in id order.
    pub fn iter(&self) -> impl Iterator<Item = &TrafficClass> {
        self.classes.iter()
    }

    pub fn len(&self) -> usize {
        self.classes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    pub fn by_name(&self, name: &str) -> Option<&TrafficClass> {
        self.classes.iter().find(|c| c.name == name)
    }

    pub fn by_id(&self, id: u8) -> Option<&TrafficClass> {
        self.classes.iter().find(|c| c.id == id)
    }

    /// The name of class `id`, or `class-<id>` when the table has none.
    pub fn name_of(&self, id: u8) -> String {
        self.by_id(id)
            .map_or_else(|| format!("class-{id}"), |c| c.name.clone())
    }

    /// Names in id order, for error messages.
    pub fn names(&self) -> String {
        let names: Vec<&str> = self.classes.iter().map(|c| c.name.as_str()).collect();
        names.join(", ")
    }
}

/// Whether `name` is a valid class name: 1..=32 of `[a-z0-9_-]`, starting
/// with a letter.
pub fn is_valid_class_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_added_and_lookups_work() {
        let table = ClassTable::from_checked(vec![TrafficClass {
            id: 3,
            name: "bulk".into(),
        }]);
        assert_eq!(table.len(), 2);
        assert_eq!(table.iter().next().unwrap().name, "default");
        assert_eq!(table.by_name("bulk").unwrap().id, 3);
        assert_eq!(table.name_of(3), "bulk");
        assert_eq!(table.name_of(7), "class-7");
        assert_eq!(table.names(), "default, bulk");
    }

    #[test]
    fn class_names() {
        assert!(is_valid_class_name("gradient"));
        assert!(is_valid_class_name("tier-2_bulk"));
        assert!(!is_valid_class_name(""));
        assert!(!is_valid_class_name("Gradient"));
        assert!(!is_valid_class_name("2fast"));
        assert!(!is_valid_class_name("a b"));
        assert!(!is_valid_class_name(&"a".repeat(33)));
    }
}
