//! The undo log of an apply transaction: one entry per step, pushed
//! *before* the step runs (a step can fail half-way), each holding what was
//! there before, as read back from the kernel and the disk. Rolling back
//! runs the entries in reverse.

use std::path::PathBuf;

use super::{
    attach, layout::IfacePaths, recorded::RecordedPolicy, state::RecordSnapshot, tc, DatapathError,
};
use crate::{
    classifier::{ClassifierMaps, RulesSnapshot},
    shaper::{
        htb::{Htb, HtbError, HtbPlan, RootOwner},
        ShaperMaps, ShaperSnapshot,
    },
};

/// The HTB state of an interface before a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HtbBefore {
    /// No Causeway hierarchy (a kernel default, or a foreign root qdisc,
    /// which apply never touches): undo removes Causeway's.
    NotOurs,
    /// Causeway's hierarchy, built from this plan (the recorded policy with
    /// its rate changes): undo installs it again. `None` when the records
    /// do not describe it; undo then removes Causeway's.
    Ours(Option<HtbPlan>),
}

impl HtbBefore {
    pub fn capture(htb: &Htb, recorded: Option<&RecordedPolicy>) -> Result<Self, HtbError> {
        Ok(match htb.owner()? {
            RootOwner::Causeway => Self::Ours(
                recorded
                    .and_then(RecordedPolicy::effective_shaping)
                    .map(|s| s.htb_plan()),
            ),
            RootOwner::Default | RootOwner::Foreign { .. } => Self::NotOurs,
        })
    }

    fn restore(&self, htb: &Htb) -> Result<(), HtbError> {
        match self {
            Self::Ours(Some(plan)) => htb.install(plan),
            Self::Ours(None) | Self::NotOurs => htb.remove().map(|_| ()),
        }
    }
}

/// One step to undo.
pub(crate) enum Undo {
    /// Put the classifier config and inactive set back.
    Rules {
        maps_dir: PathBuf,
        snapshot: Box<RulesSnapshot>,
    },
    /// Detach a TC egress program this transaction attached.
    TcProgram { paths: IfacePaths, iface: String },
    /// Put the HTB hierarchy back.
    Htb { htb: Htb, before: HtbBefore },
    /// Put the shaper control and configuration sets back.
    ShaperTable {
        maps_dir: PathBuf,
        snapshot: Box<ShaperSnapshot>,
    },
    /// Put a record file back.
    Record(RecordSnapshot),
    /// Remove an attachment this transaction made (pins and records).
    Attachment { paths: IfacePaths },
}

impl Undo {
    fn run(&self) -> Result<(), String> {
        match self {
            Self::Rules { maps_dir, snapshot } => ClassifierMaps::from_pin_dir(maps_dir)
                .and_then(|mut maps| maps.restore(snapshot))
                .map_err(|e| format!("restoring the rules in {}: {e}", maps_dir.display())),
            Self::TcProgram { paths, iface } => {
                tc::remove(paths, iface).map_err(|e| format!("detaching TC again: {e}"))
            }
            Self::Htb { htb, before } => before
                .restore(htb)
                .map_err(|e| format!("restoring the HTB hierarchy: {e}")),
            Self::ShaperTable { maps_dir, snapshot } => ShaperMaps::from_pins(maps_dir)
                .and_then(|mut maps| maps.restore(snapshot))
                .map_err(|e| format!("restoring the shaping table: {e}")),
            Self::Record(record) => record.restore().map_err(|e| e.to_string()),
            Self::Attachment { paths } => attach::remove_pins(paths)
                .map_err(|e: DatapathError| format!("removing the new attachment: {e}")),
        }
    }
}

/// The undo entries of a transaction, newest last.
#[derive(Default)]
pub(crate) struct UndoLog {
    entries: Vec<Undo>,
}

impl UndoLog {
    pub fn push(&mut self, undo: Undo) {
        self.entries.push(undo);
    }

    /// Undoes every entry, newest first; runs all of them even when one
    /// fails, and returns what failed.
    pub fn rollback(self) -> Result<(), String> {
        let failures: Vec<String> = self
            .entries
            .iter()
            .rev()
            .filter_map(|u| u.run().err())
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }
}
