//! The policy an interface was last given, read back from its records:
//! the policy text (`policy.json`) and the rate changes made since
//! (`shaping-overrides.json`). Apply uses it to put the previous HTB
//! hierarchy back when it undoes; `policy show` and `set-rate` start from it.

use super::{
    layout::IfacePaths,
    state::{self, PolicyRecord},
    DatapathError,
};
use crate::{
    policy::{shaping::ShapingPolicy, Policy},
    shaper::live::{self, RateOverrides},
};

/// The recorded policy of one interface.
#[derive(Clone, Debug)]
pub struct RecordedPolicy {
    pub record: PolicyRecord,
    pub policy: Policy,
    pub overrides: RateOverrides,
}

impl RecordedPolicy {
    /// Reads the records of `paths`; `None` when no policy was applied.
    pub fn read(paths: &IfacePaths) -> Result<Option<Self>, DatapathError> {
        let Some(record) = state::read_json::<PolicyRecord>(&paths.policy_record())? else {
            return Ok(None);
        };
        let policy = Policy::parse(&record.text, &record.source).map_err(|source| {
            DatapathError::RecordedPolicy {
                path: paths.policy_record(),
                source: Box::new(source),
            }
        })?;
        let overrides = state::read_json(&paths.shaping_overrides_record())?.unwrap_or_default();
        Ok(Some(Self {
            record,
            policy,
            overrides,
        }))
    }

    /// The shaping in force: the policy's, with the recorded rate changes.
    pub fn effective_shaping(&self) -> Option<ShapingPolicy> {
        self.policy
            .shaping
            .as_ref()
            .map(|s| live::effective(s, &self.overrides))
    }
}
