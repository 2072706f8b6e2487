//! `cargo xtask`'s flags with units: a bad value is one line naming the flag
//! and the value, status 1, and nothing is built or started.

use std::process::Command;

fn refused(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .expect("run xtask");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
    stderr
}

#[test]
fn demo_refuses_bad_sizes_and_durations_before_doing_anything() {
    let e = refused(&["demo", "--compute", "25"]);
    assert!(
        e.starts_with("error: --compute: '25' is not a duration: a duration needs a unit"),
        "{e}"
    );
    let e = refused(&["demo", "--gradient", "16mbit"]);
    assert!(
        e.starts_with("error: --gradient: '16mbit' is not a size"),
        "{e}"
    );
}

#[test]
fn demo_refuses_the_old_flags() {
    for old in ["--mib", "--compute-ms"] {
        let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["demo", old, "16"])
            .output()
            .expect("run xtask");
        assert!(!out.status.success(), "{old} must be refused");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!("unexpected argument '{old}'")),
            "{old}"
        );
    }
}
