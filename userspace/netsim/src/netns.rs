//! Network namespaces on the system: `ip` commands, listing, deletion, and
//! running Rust code inside a namespace.

use std::process::{Command, Output};

use crate::sys;

/// A failed system operation.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("`{cmd}` failed: {detail}")]
    Command { cmd: String, detail: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Run a command to completion; a non-zero exit is an error carrying its stderr.
pub fn run_checked(cmd: &mut Command) -> Result<Output, NetnsError> {
    let out = cmd.output().map_err(|e| NetnsError::Command {
        cmd: describe(cmd),
        detail: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(NetnsError::Command {
            cmd: describe(cmd),
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(out)
}

/// Run `ip` with these arguments.
pub fn ip<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Result<(), NetnsError> {
    run_checked(Command::new("ip").args(args)).map(|_| ())
}

/// Names of all named network namespaces.
pub fn list() -> Result<Vec<String>, NetnsError> {
    let dir = std::path::Path::new("/run/netns");
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let entries = std::fs::read_dir(dir).map_err(|source| NetnsError::Io {
        what: "listing /run/netns".into(),
        source,
    })?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

/// Process ids whose network namespace is `name` (never our own process).
pub fn pids_in(name: &str) -> Result<Vec<i32>, NetnsError> {
    let out = run_checked(Command::new("ip").args(["netns", "pids", name]))?;
    let me = std::process::id() as i32;
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p| *p != me)
        .collect())
}

/// Kill every process in the namespace, then delete it. Deleting a namespace
/// that does not exist is not an error.
pub fn delete(name: &str) -> Result<(), NetnsError> {
    if !sys::netns::netns_path(name).exists() {
        return Ok(());
    }
    for pid in pids_in(name).unwrap_or_default() {
        sys::kill(pid, libc::SIGKILL);
    }
    match ip(&["netns", "del", name]) {
        Err(_) if !sys::netns::netns_path(name).exists() => Ok(()),
        r => r,
    }
}

/// Delete every namespace whose name starts with `prefix`; returns their names.
pub fn delete_prefix(prefix: &str) -> Result<Vec<String>, NetnsError> {
    let victims: Vec<String> = list()?
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    let mut first_err = None;
    for n in &victims {
        if let Err(e) = delete(n) {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(victims), Err)
}

/// Run `f` on a new thread that has entered network namespace `name`; a panic in
/// `f` is propagated to the caller.
pub fn in_netns<R: Send, F: FnOnce() -> R + Send>(name: &str, f: F) -> Result<R, NetnsError> {
    std::thread::scope(|s| {
        let handle = s.spawn(move || {
            sys::netns::enter(name).map_err(|source| NetnsError::Io {
                what: format!("entering {name}"),
                source,
            })?;
            Ok(f())
        });
        match handle.join() {
            Ok(r) => r,
            Err(payload) => std::panic::resume_unwind(payload),
        }
    })
}

/// Write a sysctl (`net/ipv4/ip_forward` style path) inside namespace `ns`.
pub fn sysctl(ns: &str, key: &str, value: &str) -> Result<(), NetnsError> {
    in_netns(ns, || std::fs::write(format!("/proc/sys/{key}"), value))?.map_err(|source| {
        NetnsError::Io {
            what: format!("sysctl {key}={value} in {ns}"),
            source,
        }
    })
}
