//! The data path as a service: what the CLI, the agent and the tests call
//! to attach, apply a policy, adopt the TC program and detach, in the
//! current network namespace. Changes go through [`Locked`], which holds
//! the state lock, so no two commands change an attachment at once.

use super::{
    apply::{self, Applied, ApplyError, PolicyInput, RulesState, Target},
    attach::{self, inspect, AttachMode, Attached, Detached, PinState},
    audit::AuditLog,
    fault::FaultPlan,
    layout::Layout,
    netns::NetnsScope,
    state::StateLock,
    status::{self, InterfaceStatus},
    tc::{self, TcAttached},
    undo::{Undo, UndoLog},
    DatapathError,
};
use crate::shaper::htb::Htb;

/// The data path of one network namespace (the current one).
#[derive(Clone, Debug)]
pub struct Datapath {
    pub layout: Layout,
    pub scope: NetnsScope,
}

/// The data path with the state lock held: the only way to change it.
pub struct Locked<'a> {
    dp: &'a Datapath,
    _lock: StateLock,
}

/// The result of [`Locked::attach`].
#[derive(Clone, Debug)]
pub struct AttachedWithPolicy {
    pub attached: Attached,
    /// What applying the policy did, when one was given.
    pub applied: Option<Applied>,
}

/// The result of [`Locked::detach`].
#[derive(Clone, Debug)]
pub struct DetachedAll {
    pub detached: Detached,
    /// Causeway's HTB qdisc was removed.
    pub htb_removed: bool,
}

impl Datapath {
    pub fn new(layout: Layout, scope: NetnsScope) -> Self {
        Self { layout, scope }
    }

    /// Waits for the state lock.
    pub fn lock(&self) -> Result<Locked<'_>, DatapathError> {
        Ok(Locked {
            dp: self,
            _lock: StateLock::acquire(&self.layout.lock_file())?,
        })
    }

    /// Every attachment of this namespace (`all_scopes`: of every one).
    pub fn status(&self, all_scopes: bool) -> Result<Vec<InterfaceStatus>, DatapathError> {
        status::status(&self.layout, (!all_scopes).then_some(&self.scope))
    }

    /// The interfaces a command addresses: `iface`, or every attached one.
    pub fn targets(&self, iface: Option<&str>) -> Result<Vec<String>, DatapathError> {
        if let Some(iface) = iface {
            return Ok(vec![iface.to_string()]);
        }
        Ok(self
            .layout
            .attachments(Some(&self.scope))?
            .into_iter()
            .map(|(_, iface)| iface)
            .collect())
    }

    /// Checks that `iface` is attached and live, and may be shaped.
    fn validate(&self, iface: &str, policy: &crate::policy::Policy) -> Result<Target, ApplyError> {
        let paths = self
            .layout
            .iface(&self.scope, iface)
            .map_err(|e| ApplyError::Datapath(Box::new(e)))?;
        let ifindex = nix::net::if_::if_nametoindex(iface).ok();
        match (inspect(&paths, ifindex), ifindex) {
            (PinState::Live(_), Some(ifindex)) => {
                apply::check_qdisc(iface, policy)?;
                Ok(Target {
                    iface: iface.to_string(),
                    ifindex,
                    paths,
                })
            }
            (PinState::Absent, _) | (PinState::Live(_), None) => Err(ApplyError::NotAttached {
                iface: iface.to_string(),
                scope: self.scope.to_string(),
            }),
            (PinState::Stale(why), _) => Err(ApplyError::Stale {
                iface: iface.to_string(),
                scope: self.scope.to_string(),
                why,
            }),
        }
    }
}

impl Locked<'_> {
    /// Applies `input` to every interface in `ifaces`, all or nothing: the
    /// policy and every interface are checked before anything changes, and
    /// a failure at any step on any interface restores all of them.
    pub fn apply(
        &self,
        ifaces: &[String],
        input: &PolicyInput,
        faults: &FaultPlan,
    ) -> Result<Vec<Applied>, ApplyError> {
        let mut audit = self.open_audit()?;
        let result = self.apply_unaudited(ifaces, input, faults);
        self.audit(&mut audit, "apply", ifaces, input, result.as_ref().err());
        result
    }

    fn open_audit(&self) -> Result<AuditLog, ApplyError> {
        AuditLog::open(&self.dp.layout.audit_log()).map_err(|e| ApplyError::Datapath(Box::new(e)))
    }

    /// Appends the outcome of a change to the audit log (opened before the
    /// change; a failure to append now is logged loudly, the change stands).
    fn audit(
        &self,
        log: &mut AuditLog,
        command: &str,
        ifaces: &[String],
        input: &PolicyInput,
        failed: Option<&ApplyError>,
    ) {
        let outcome = failed.map_or_else(|| "applied".to_string(), |e| format!("failed: {e}"));
        let r = AuditLog::record(
            command,
            self.dp.scope.to_string(),
            ifaces,
            &input.source,
            &input.text,
            outcome,
        );
        if let Err(e) = log.append(&r) {
            tracing::error!(error = %e, "policy change not recorded in the audit log");
        }
    }

    fn apply_unaudited(
        &self,
        ifaces: &[String],
        input: &PolicyInput,
        faults: &FaultPlan,
    ) -> Result<Vec<Applied>, ApplyError> {
        let policy = input
            .parse()
            .map_err(|e| ApplyError::Invalid(Box::new(e)))?;
        let targets = ifaces
            .iter()
            .map(|iface| self.dp.validate(iface, &policy))
            .collect::<Result<Vec<_>, _>>()?;
        let mut log = UndoLog::default();
        let mut done = Vec::new();
        for (index, target) in targets.iter().enumerate() {
            let faults = faults.for_target(index);
            match apply::apply_one(
                target,
                input,
                &policy,
                RulesState::ToApply,
                &faults,
                &mut log,
            ) {
                Ok(applied) => done.push(applied),
                Err(failed) => return Err(apply::fail(input, &target.iface, failed, log)),
            }
        }
        Ok(done)
    }

    /// Attaches the XDP classifier to `iface` (or adopts the live
    /// attachment) and, with a policy, applies it: a fresh attachment has
    /// its rules in the maps before the program sees a frame, and a failure
    /// later removes the whole new attachment again.
    pub fn attach(
        &self,
        iface: &str,
        mode: AttachMode,
        input: Option<&PolicyInput>,
        faults: &FaultPlan,
    ) -> Result<AttachedWithPolicy, ApplyError> {
        let Some(policy_input) = input else {
            return self.attach_unaudited(iface, mode, None, faults);
        };
        let mut audit = self.open_audit()?;
        let result = self.attach_unaudited(iface, mode, input, faults);
        let ifaces = [iface.to_string()];
        self.audit(
            &mut audit,
            "attach",
            &ifaces,
            policy_input,
            result.as_ref().err(),
        );
        result
    }

    fn attach_unaudited(
        &self,
        iface: &str,
        mode: AttachMode,
        input: Option<&PolicyInput>,
        faults: &FaultPlan,
    ) -> Result<AttachedWithPolicy, ApplyError> {
        let dp = self.dp;
        let policy = input
            .map(PolicyInput::parse)
            .transpose()
            .map_err(|e| ApplyError::Invalid(Box::new(e)))?;
        let datapath_err = |e| ApplyError::Datapath(Box::new(e));
        if let Some(policy) = &policy {
            apply::check_qdisc(iface, policy)?;
        }
        let paths = dp.layout.iface(&dp.scope, iface).map_err(datapath_err)?;
        let ifindex = nix::net::if_::if_nametoindex(iface).ok();
        let fresh = !matches!(inspect(&paths, ifindex), PinState::Live(_));
        // A fresh attachment takes the rules with it; an adopted one gets
        // them through the transaction below.
        let rules = policy.as_ref().filter(|_| fresh).map(|p| &p.rules);
        let attached =
            attach::attach(&dp.layout, &dp.scope, iface, mode, rules).map_err(datapath_err)?;
        let (Some(input), Some(policy)) = (input, &policy) else {
            return Ok(AttachedWithPolicy {
                attached,
                applied: None,
            });
        };
        let mut log = UndoLog::default();
        let rules_state = match attached.generation.filter(|_| !attached.adopted) {
            Some(generation) => {
                log.push(Undo::Attachment {
                    paths: paths.clone(),
                });
                RulesState::Live { generation }
            }
            None => RulesState::ToApply,
        };
        let target = Target {
            iface: iface.to_string(),
            ifindex: attached.ifindex,
            paths,
        };
        match apply::apply_one(&target, input, policy, rules_state, faults, &mut log) {
            Ok(applied) => Ok(AttachedWithPolicy {
                attached: Attached {
                    generation: Some(applied.generation),
                    ..attached
                },
                applied: Some(applied),
            }),
            Err(failed) => Err(apply::fail(input, iface, failed, log)),
        }
    }

    /// Adopts the pinned TC egress program of an attached interface, or
    /// attaches it.
    pub fn ensure_tc(&self, iface: &str, ifindex: u32) -> Result<TcAttached, DatapathError> {
        let paths = self.dp.layout.iface(&self.dp.scope, iface)?;
        Ok(tc::ensure(&paths, iface, ifindex)?)
    }

    /// Removes everything of `iface`: Causeway's HTB (unless the interface
    /// is gone or unreachable: `iface_reachable` false), the TC and XDP
    /// programs, every pin and record.
    /// The change goes to the audit log (opened first: a detach that could
    /// not be recorded is not made).
    pub fn detach(&self, iface: &str, iface_reachable: bool) -> Result<DetachedAll, DatapathError> {
        let mut log = AuditLog::open(&self.dp.layout.audit_log())?;
        let result = self.detach_unaudited(iface, iface_reachable);
        let outcome = match &result {
            Ok(_) => "detached".to_string(),
            Err(e) => format!("failed: {e}"),
        };
        let r = AuditLog::record(
            "detach",
            self.dp.scope.to_string(),
            &[iface.to_string()],
            "",
            "",
            outcome,
        );
        if let Err(e) = log.append(&r) {
            tracing::error!(error = %e, "detach not recorded in the audit log");
        }
        result
    }

    fn detach_unaudited(
        &self,
        iface: &str,
        iface_reachable: bool,
    ) -> Result<DetachedAll, DatapathError> {
        let dp = self.dp;
        let mut htb_removed = false;
        if iface_reachable && nix::net::if_::if_nametoindex(iface).is_ok() {
            htb_removed = Htb::new(iface, None)
                .remove()
                .map_err(|source| DatapathError::Htb {
                    iface: iface.to_string(),
                    source: Box::new(source),
                })?;
        }
        if iface_reachable {
            // A clsact filter (kernels without TCX) is not a pin: remove it.
            let paths = dp.layout.iface(&dp.scope, iface)?;
            tc::remove(&paths, iface)?;
        }
        let detached = attach::detach(&dp.layout, &dp.scope, iface)?;
        Ok(DetachedAll {
            detached,
            htb_removed,
        })
    }
}
