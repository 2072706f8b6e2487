//! A panicking test leaves nothing behind: in-process (catch_unwind), in a child
//! process that panics, and after a child is SIGKILLed (the next testbed removes
//! the orphan's namespaces).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use causeway_netsim::Profile;
use causeway_test_support::{harness::test_name, root_or_skip};
use causeway_tests::netsim_support::{namespaces_with, testbed, two_hosts};

const CHILD_ENV: &str = "CW_NETSIM_CHILD";

/// Run as a child: build a testbed, print its tag, then panic or hang.
#[test]
#[ignore = "child role of panics_and_kills_leave_no_namespaces, which runs it"]
fn child_role() {
    let role = std::env::var(CHILD_ENV).expect("run only as a child, with CW_NETSIM_CHILD set");
    let tb = two_hosts(Profile::Lan);
    println!("TAG {}", tb.tag());
    match role.as_str() {
        "panic" => panic!("deliberate panic with testbed {} up", tb.tag()),
        _ => loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        },
    }
}

fn spawn_child(role: &str) -> (std::process::Child, String) {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args([
            &test_name(module_path!(), "child_role"),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, role)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let mut tag = String::new();
    for line in BufReader::new(child.stdout.take().expect("stdout")).lines() {
        let line = line.expect("read child");
        // The test harness may print "test child_role ... " on the same line.
        if let Some((_, t)) = line.split_once("TAG ") {
            tag = t.split_whitespace().next().unwrap_or_default().to_string();
            break;
        }
    }
    assert!(!tag.is_empty(), "child printed no tag");
    (child, tag)
}

#[test]
fn panics_and_kills_leave_no_namespaces() {
    if std::env::var(CHILD_ENV).is_ok() || !root_or_skip("panics_and_kills_leave_no_namespaces") {
        return;
    }
    // 1. In-process: a panic while the testbed is up (and one inside a namespace closure).
    let mut tag = String::new();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let tb = two_hosts(Profile::Wan40);
        tag = tb.tag().to_string();
        assert!(!namespaces_with(&format!("cw-{tag}-")).is_empty());
        let h = tb.host(0, 0).clone();
        tb.in_host(&h, || panic!("deliberate panic inside {}", h.netns))
            .expect("enter");
    }));
    assert!(r.is_err(), "the closure panicked");
    assert!(
        namespaces_with(&format!("cw-{tag}-")).is_empty(),
        "unwinding removed testbed {tag}"
    );

    // 2. A child process that panics.
    let (mut child, tag) = spawn_child("panic");
    let status = child.wait().expect("wait child");
    assert!(!status.success(), "the child test failed by panicking");
    assert!(
        namespaces_with(&format!("cw-{tag}-")).is_empty(),
        "the panicking child removed {tag}"
    );

    // 3. A child killed with SIGKILL cannot clean up; the next testbed does.
    let (mut child, tag) = spawn_child("hang");
    assert!(
        !namespaces_with(&format!("cw-{tag}-")).is_empty(),
        "child's testbed is up"
    );
    child.kill().expect("SIGKILL child");
    child.wait().expect("reap child");
    let tb = testbed(1, 1, Profile::Lan);
    assert!(
        namespaces_with(&format!("cw-{tag}-")).is_empty(),
        "orphaned testbed {tag} was removed"
    );
    drop(tb);
}
