//! Test-only fault injection for the apply transaction: a [`FaultPlan`]
//! makes one step fail after it did its real work (the worst case for the
//! undo), or, for the HTB step, makes the real `tc` batch fail half-way.
//! Without the `fault-injection` feature (and outside unit tests) a plan
//! cannot be built with a fault: [`FaultPlan::NONE`] is the only value.

use std::fmt;

use crate::{
    classifier::{ClassifierMaps, ClassifierMapsError},
    shaper::htb::{Htb, HtbError, HtbPlan},
};

/// A step of [`apply`](super::apply), in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApplyStep {
    /// Parse the policy, check the interface and its root qdisc.
    Validate,
    /// Read back what the steps below change.
    Snapshot,
    /// Write the rules into the inactive set of the classifier maps.
    StageRules,
    /// Attach (or adopt) the TC egress program.
    TcProgram,
    /// Install (or remove) Causeway's HTB hierarchy.
    Htb,
    /// Write the shaping table and flip it live.
    ShaperTable,
    /// Write the policy record, drop the recorded rate changes.
    Records,
    /// Flip the staged rules live.
    CommitRules,
}

impl fmt::Display for ApplyStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Validate => "validating",
            Self::Snapshot => "reading the current state",
            Self::StageRules => "writing the rules",
            Self::TcProgram => "attaching the TC egress program",
            Self::Htb => "installing the root qdisc (HTB, or fq for paced classes)",
            Self::ShaperTable => "writing the shaping table",
            Self::Records => "writing the records",
            Self::CommitRules => "making the rules live",
        })
    }
}

/// Which step of an apply fails on purpose (tests only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    fail_at: Option<ApplyStep>,
    /// Which interface of a multi-interface apply fails (0: the first).
    target: usize,
}

impl FaultPlan {
    /// No fault: what every caller outside the tests passes.
    pub const NONE: Self = Self {
        fail_at: None,
        target: 0,
    };

    /// Makes `step` fail.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn fail_at(step: ApplyStep) -> Self {
        Self {
            fail_at: Some(step),
            target: 0,
        }
    }

    /// Makes the fault hit the `index`-th interface of the apply (counting
    /// from 0) instead of the first.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn on_target(self, index: usize) -> Self {
        Self {
            target: index,
            ..self
        }
    }

    /// The plan for the `index`-th interface of an apply.
    pub(crate) fn for_target(&self, index: usize) -> Self {
        if index == self.target {
            *self
        } else {
            Self::NONE
        }
    }

    /// Whether `step` is to fail.
    pub(crate) fn hits(&self, step: ApplyStep) -> bool {
        self.fail_at == Some(step)
    }
}

/// The error an injected fault reports.
#[derive(Debug, thiserror::Error)]
#[error("fault injected at {0} (test)")]
pub struct InjectedFault(pub ApplyStep);

/// The HTB step: installs `plan`, or, with the fault, makes the real `tc`
/// batch fail after it built the hierarchy.
pub(crate) fn install_htb(htb: &Htb, plan: &HtbPlan, faults: &FaultPlan) -> Result<(), HtbError> {
    #[cfg(any(test, feature = "fault-injection"))]
    if faults.hits(ApplyStep::Htb) {
        return htb.install_failing(plan);
    }
    let _ = faults;
    htb.install(plan)
}

/// After the rules were staged: with the fault, one more map write that
/// the kernel refuses.
pub(crate) fn after_staging(
    maps: &mut ClassifierMaps,
    faults: &FaultPlan,
) -> Result<(), ClassifierMapsError> {
    #[cfg(any(test, feature = "fault-injection"))]
    if faults.hits(ApplyStep::StageRules) {
        return maps.write_rejected_entry();
    }
    let _ = (maps, faults);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_planned_step_fails() {
        assert!(!FaultPlan::NONE.hits(ApplyStep::Htb));
        let plan = FaultPlan::fail_at(ApplyStep::Records);
        assert!(plan.hits(ApplyStep::Records));
        assert!(!plan.hits(ApplyStep::CommitRules));
        let second = FaultPlan::fail_at(ApplyStep::Htb).on_target(1);
        assert!(!second.for_target(0).hits(ApplyStep::Htb));
        assert!(second.for_target(1).hits(ApplyStep::Htb));
        assert_eq!(
            InjectedFault(ApplyStep::Htb).to_string(),
            "fault injected at installing the root qdisc (HTB, or fq for paced classes) (test)"
        );
    }
}
