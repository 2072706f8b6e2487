//! Every policy change is appended to `<state root>/audit.log`: an attach
//! with a policy, a refused apply and a detach each leave one line naming the caller
//! (uid, pid), the command, the interface, the file and the SHA-256 of the
//! policy text, and the outcome.

use causeway::datapath::{
    audit::{self, digest},
    AttachMode, FaultPlan, PolicyInput,
};
use causeway_test_support::require_root;

use crate::policy_apply_undo::{Setup, INVALID, UNSHAPED};

fn input(source: &str, text: &str) -> PolicyInput {
    PolicyInput {
        source: source.into(),
        text: text.into(),
    }
}

#[test]
fn policy_changes_are_recorded_with_who_what_and_the_digest() {
    require_root!();
    let setup = Setup::new();
    let (dp, iface) = (setup.datapath(), setup.iface.clone());
    setup.in_ns(move || {
        let locked = dp.lock().expect("lock");
        locked
            .attach(
                &iface,
                AttachMode::Skb,
                Some(&input("a.toml", UNSHAPED)),
                &FaultPlan::NONE,
            )
            .expect("attach with a policy");
        let refused = locked.apply(
            std::slice::from_ref(&iface),
            &input("bad.toml", INVALID),
            &FaultPlan::NONE,
        );
        assert!(refused.is_err(), "the invalid policy was applied");
        locked.detach(&iface, true).expect("detach");
    });
    let log = setup.layout.audit_log();
    let records = audit::read(&log).expect("an audit log");
    assert_eq!(records.len(), 3, "{records:?}");
    let (a, b) = (&records[0], &records[1]);
    assert_eq!(
        (a.command.as_str(), a.source.as_str(), a.outcome.as_str()),
        ("attach", "a.toml", "applied")
    );
    assert_eq!(a.sha256, digest(UNSHAPED));
    assert_eq!(a.ifaces, vec![setup.iface.clone()]);
    assert_eq!((a.uid, a.pid), (0, std::process::id()));
    assert_eq!(
        (b.command.as_str(), b.source.as_str()),
        ("apply", "bad.toml")
    );
    assert!(b.outcome.starts_with("failed: "), "{b:?}");
    assert_eq!(b.sha256, digest(INVALID));
    assert!(a.time_unix_ns <= b.time_unix_ns && a.time_unix_ns > 0);
    assert!(a.scope.contains(&setup.ns), "{a:?}");
    let c = &records[2];
    assert_eq!(
        (c.command.as_str(), c.outcome.as_str(), c.uid, c.pid),
        ("detach", "detached", 0, std::process::id())
    );
    assert_eq!(c.ifaces, vec![setup.iface.clone()]);
    assert!(b.time_unix_ns <= c.time_unix_ns);
}
