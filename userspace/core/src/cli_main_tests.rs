use std::io;

use anyhow::Context as _;

use super::*;

fn printed(result: anyhow::Result<()>) -> (u8, String) {
    let mut out = Vec::new();
    let status = report(&result, &mut out);
    (status, String::from_utf8(out).expect("utf-8"))
}

#[derive(Debug, thiserror::Error)]
#[error("reading the policy")]
struct Outer(#[source] io::Error);

#[test]
fn success_prints_nothing() {
    assert_eq!(printed(Ok(())), (0, String::new()));
}

#[test]
fn the_chain_is_printed_once_on_one_line() {
    let err = Err::<(), _>(io::Error::new(io::ErrorKind::NotFound, "no such file"))
        .context("opening /etc/causeway.toml")
        .context("loading the policy");
    assert_eq!(
        printed(err),
        (
            1,
            "error: loading the policy: opening /etc/causeway.toml: no such file\n".to_string()
        )
    );
}

#[test]
fn typed_sources_are_followed() {
    let err = anyhow::Error::new(Outer(io::Error::other("disk on fire"))).context("policy apply");
    assert_eq!(
        error_line(&err),
        "error: policy apply: reading the policy: disk on fire"
    );
}

#[derive(Debug, thiserror::Error)]
#[error("cannot read /run/x: {0}")]
struct Spelled(#[source] io::Error);

#[test]
fn a_cause_the_wrapper_already_spells_out_is_not_repeated() {
    let err = anyhow::Error::new(Spelled(io::Error::other("permission denied"))).context("stats");
    assert_eq!(
        error_line(&err),
        "error: stats: cannot read /run/x: permission denied"
    );
}

#[test]
fn a_single_error_has_no_separator() {
    assert_eq!(
        printed(Err(anyhow::anyhow!("no interface given"))),
        (1, "error: no interface given\n".to_string())
    );
}

#[test]
fn broken_pipe_is_quiet_with_status_141() {
    let err = Err::<(), _>(io::Error::from(io::ErrorKind::BrokenPipe)).context("writing the table");
    assert_eq!(printed(err), (141, String::new()));
    let typed = anyhow::Error::new(Outer(io::Error::from(io::ErrorKind::BrokenPipe)));
    assert!(is_broken_pipe(&typed));
}

#[test]
fn broken_pipe_above_the_root_is_an_error() {
    // The root cause decides: a broken pipe that led to another failure is
    // reported.
    #[derive(Debug, thiserror::Error)]
    #[error("peer went away")]
    struct Gone;
    let err = anyhow::Error::new(Gone).context(io::Error::from(io::ErrorKind::BrokenPipe));
    assert!(!is_broken_pipe(&err));
    assert_eq!(printed(Err(err)).0, 1);
}

#[test]
fn sigpipe_disposition_is_set() {
    let current = || {
        // SAFETY: a zeroed sigaction is a valid out-parameter; a null new
        // action only queries the disposition.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            assert_eq!(
                libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old),
                0
            );
            old.sa_sigaction
        }
    };
    restore_default_sigpipe();
    assert_eq!(current(), libc::SIG_DFL);
    ignore_sigpipe();
    assert_eq!(current(), libc::SIG_IGN);
}
