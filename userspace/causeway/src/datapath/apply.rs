//! Applying a policy to attached interfaces, as one transaction:
//!
//! ```text
//! validate (parse; every interface live; no foreign root qdisc)
//!   → per interface: snapshot → stage rules (inactive set)
//!     → TC egress program (with shaping) → HTB → shaping table
//!     → records → flip the rules live
//! ```
//! Every step pushes its undo entry before it runs ([`super::undo`]); a
//! failure at any step, on any interface, rolls back every step already
//! taken on every interface, so the rules maps, the TC attachment, the HTB
//! hierarchy, the shaping table and the records are what they were.
//! The rules go live last: no frame is classified by rules that a failure
//! takes back (unless a later interface fails; its rollback then flips the
//! earlier ones back).

use super::{
    fault::{ApplyStep, FaultPlan, InjectedFault},
    layout::IfacePaths,
    load::LoadError,
    recorded::RecordedPolicy,
    state::{self, PolicyRecord, RecordSnapshot},
    tc::{self, TcAttached},
    undo::{HtbBefore, Undo, UndoLog},
    DatapathError,
};
use crate::{
    classifier::{ClassifierMaps, ClassifierMapsError},
    policy::{Policy, PolicyError},
    shaper::{
        htb::{Htb, HtbError},
        PlanError, ShaperMapError, ShaperMaps, ShapingTable,
    },
};

/// Policy text and where it came from (kept verbatim in the record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyInput {
    /// The file it came from, as given on the command line.
    pub source: String,
    pub text: String,
}

impl PolicyInput {
    /// Parses and validates it.
    pub fn parse(&self) -> Result<Policy, PolicyError> {
        Policy::parse(&self.text, &self.source)
    }
}

/// What [`apply`](super::Locked::apply) did on one interface.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Applied {
    pub iface: String,
    /// The classifier generation now live.
    pub generation: u64,
    pub rules: usize,
    /// When the policy shapes: what was installed.
    pub shaping: Option<ShapingApplied>,
    /// The TC egress program, when the policy shapes.
    pub tc: Option<TcAttached>,
}

/// The shaping [`Applied`] installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ShapingApplied {
    /// HTB root rate, bit/s.
    pub link_bits: u64,
    /// Classes with a shaping table.
    pub classes: usize,
}

/// Why a policy was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Invalid(Box<PolicyError>),
    #[error(transparent)]
    Datapath(Box<DatapathError>),
    #[error("{iface} is not attached in the {scope}; nothing was changed (attach it first)")]
    NotAttached { iface: String, scope: String },
    #[error(
        "{iface} in the {scope} has stale pins ({why}); nothing was changed (run attach or detach)"
    )]
    Stale {
        iface: String,
        scope: String,
        why: String,
    },
    #[error("{iface} has a root qdisc {kind} {handle} that Causeway did not install; remove it first (nothing was changed)")]
    ForeignQdisc {
        iface: String,
        kind: String,
        handle: String,
    },
    #[error(
        "cannot apply {source_name} to {iface} (everything was restored as it was): {step} failed"
    )]
    Failed {
        source_name: String,
        iface: String,
        step: ApplyStep,
        #[source]
        cause: Box<StepError>,
    },
    #[error("cannot apply {source_name} to {iface}, and restoring failed too ({undo}): detach and attach the interface; {step} failed")]
    Inconsistent {
        source_name: String,
        iface: String,
        step: ApplyStep,
        #[source]
        cause: Box<StepError>,
        undo: String,
    },
}

/// The failure of one step.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Datapath(#[from] DatapathError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Classifier(#[from] ClassifierMapsError),
    #[error(transparent)]
    Htb(#[from] HtbError),
    #[error(transparent)]
    Shaper(#[from] ShaperMapError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Injected(#[from] InjectedFault),
}

/// An interface that passed validation.
pub(crate) struct Target {
    pub iface: String,
    pub ifindex: u32,
    pub paths: IfacePaths,
}

/// Refuses, before anything is changed, a policy with shaping for an
/// interface whose root qdisc Causeway does not own.
pub(crate) fn check_qdisc(iface: &str, policy: &Policy) -> Result<(), ApplyError> {
    if policy.shaping.is_none() {
        return Ok(());
    }
    let owner = Htb::new(iface, None).owner().map_err(|source| {
        ApplyError::Datapath(Box::new(DatapathError::Htb {
            iface: iface.to_string(),
            source: Box::new(source),
        }))
    })?;
    if let crate::shaper::htb::RootOwner::Foreign { kind, handle } = owner {
        return Err(ApplyError::ForeignQdisc {
            iface: iface.to_string(),
            kind,
            handle,
        });
    }
    Ok(())
}

type StepResult<T> = Result<T, (ApplyStep, StepError)>;

fn at<T, E: Into<StepError>>(step: ApplyStep, r: Result<T, E>) -> StepResult<T> {
    r.map_err(|e| (step, e.into()))
}

fn fault(faults: &FaultPlan, step: ApplyStep) -> StepResult<()> {
    if faults.hits(step) {
        return Err((step, InjectedFault(step).into()));
    }
    Ok(())
}

/// Whether the rules are still to be written, or already live (a fresh
/// attachment wrote them before its program was attached).
#[derive(Clone, Copy, Debug)]
pub(crate) enum RulesState {
    ToApply,
    Live { generation: u64 },
}

/// Applies `policy` to one validated interface, pushing undo entries to
/// `log`. The caller rolls `log` back on error.
pub(crate) fn apply_one(
    target: &Target,
    input: &PolicyInput,
    policy: &Policy,
    rules: RulesState,
    faults: &FaultPlan,
    log: &mut UndoLog,
) -> StepResult<Applied> {
    use ApplyStep::{CommitRules, Records, ShaperTable, Snapshot, StageRules, TcProgram};
    let paths = &target.paths;
    let maps_dir = &paths.maps_dir;
    let htb = Htb::new(&target.iface, None);
    let table = match &policy.shaping {
        Some(s) => at(ApplyStep::Validate, s.shaping_table())?,
        None => ShapingTable::default(),
    };

    // An unreadable old record only means undo cannot rebuild the old HTB.
    let recorded = RecordedPolicy::read(paths).ok().flatten();
    let htb_before = at(Snapshot, HtbBefore::capture(&htb, recorded.as_ref()))?;
    let mut shaper = at(Snapshot, ShaperMaps::from_pins(maps_dir))?;
    let shaper_before = at(Snapshot, shaper.snapshot())?;
    let records = [paths.policy_record(), paths.shaping_overrides_record()]
        .map(|p| RecordSnapshot::capture(&p));
    let mut classifier = None;
    let mut generation = match rules {
        RulesState::Live { generation } => generation,
        RulesState::ToApply => 0,
    };
    if let RulesState::ToApply = rules {
        let mut maps = at(Snapshot, ClassifierMaps::from_pin_dir(maps_dir))?;
        let snapshot = at(Snapshot, maps.snapshot())?;
        log.push(Undo::Rules {
            maps_dir: maps_dir.clone(),
            snapshot: Box::new(snapshot),
        });
        let staged = at(StageRules, maps.stage(&policy.rules))?;
        at(StageRules, super::fault::after_staging(&mut maps, faults))?;
        generation = staged.next.generation;
        classifier = Some((maps, staged));
    }

    let mut tc_attached = None;
    if policy.shaping.is_some() {
        if tc::live(paths, target.ifindex).is_none() {
            log.push(Undo::TcProgram {
                paths: paths.clone(),
                iface: target.iface.clone(),
            });
        }
        tc_attached = Some(at(
            TcProgram,
            tc::ensure(paths, &target.iface, target.ifindex),
        )?);
        fault(faults, TcProgram)?;
    }

    log.push(Undo::Htb {
        htb: htb.clone(),
        before: htb_before,
    });
    match &policy.shaping {
        Some(s) => at(
            ApplyStep::Htb,
            super::fault::install_htb(&htb, &s.htb_plan(), faults),
        )?,
        None => {
            at(ApplyStep::Htb, htb.remove())?;
            fault(faults, ApplyStep::Htb)?;
        }
    }

    log.push(Undo::ShaperTable {
        maps_dir: maps_dir.clone(),
        snapshot: Box::new(shaper_before),
    });
    at(ShaperTable, shaper.apply(&table))?;
    fault(faults, ShaperTable)?;

    for record in records {
        log.push(Undo::Record(at(Records, record)?));
    }
    at(
        Records,
        state::write_json(
            &paths.policy_record(),
            &PolicyRecord {
                source: input.source.clone(),
                text: input.text.clone(),
                generation,
                applied_at_unix: state::now_unix(),
            },
        ),
    )?;
    fault(faults, Records)?;
    at(
        Records,
        state::remove_if_present(&paths.shaping_overrides_record()),
    )?;

    if let Some((mut maps, staged)) = classifier {
        fault(faults, CommitRules)?;
        at(CommitRules, maps.commit(&staged))?;
    }
    Ok(Applied {
        iface: target.iface.clone(),
        generation,
        rules: policy.rules.len(),
        shaping: policy.shaping.as_ref().map(|s| ShapingApplied {
            link_bits: s.link_bits,
            classes: s.classes.len(),
        }),
        tc: tc_attached,
    })
}

/// Turns a failed step into the error to report, after rolling `log` back.
pub(crate) fn fail(
    input: &PolicyInput,
    iface: &str,
    (step, cause): (ApplyStep, StepError),
    log: UndoLog,
) -> ApplyError {
    let source_name = input.source.clone();
    let iface = iface.to_string();
    let cause = Box::new(cause);
    match log.rollback() {
        Ok(()) => ApplyError::Failed {
            source_name,
            iface,
            step,
            cause,
        },
        Err(undo) => ApplyError::Inconsistent {
            source_name,
            iface,
            step,
            cause,
            undo,
        },
    }
}
