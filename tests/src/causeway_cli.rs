//! Running the real `causeway` binary from tests.
//!
//! Cargo builds another package's binaries only for that package's own
//! tests, so the binary is located like this: `CAUSEWAY_BIN` when set (e.g.
//! by xtask); otherwise `cargo build -p causeway --bin causeway` is run once
//! into this test's own target directory (derived from
//! `std::env::current_exe()`: `<target>/<profile>/deps/<test>`), with the
//! same profile, and `<target>/<profile>/causeway` is used. Cargo has
//! released its build lock by the time tests run, so the nested build does
//! not wait on the outer one; it is a no-op when the binary is up to date.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
};

static BIN: OnceLock<PathBuf> = OnceLock::new();

/// Path of an up-to-date `causeway` binary.
pub fn causeway_bin() -> &'static Path {
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("CAUSEWAY_BIN") {
            return PathBuf::from(bin);
        }
        let exe = std::env::current_exe().expect("current_exe");
        let deps = exe
            .parent()
            .expect("test binary sits in <target>/<profile>/deps");
        let profile_dir = deps.parent().expect("deps sits in <target>/<profile>");
        let target_dir = profile_dir.parent().expect("<profile> sits in <target>");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "causeway", "--bin", "causeway"])
            .env("CARGO_TARGET_DIR", target_dir);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd
            .status()
            .expect("run cargo build for the causeway binary");
        assert!(status.success(), "building the causeway binary failed");
        profile_dir.join("causeway")
    })
}

/// Runs `causeway ARGS`.
pub fn causeway(args: &[&str]) -> Output {
    Command::new(causeway_bin())
        .args(args)
        .output()
        .expect("run the causeway binary")
}

/// Runs `causeway ARGS`, panics unless it succeeds, returns its stdout.
pub fn causeway_ok(args: &[&str]) -> String {
    let out = causeway(args);
    assert!(
        out.status.success(),
        "causeway {} failed ({}):\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An attachment made by a test; detached on drop, even when the test
/// panics, so that no pins or programs outlive it.
pub struct Attachment {
    pub netns: String,
    pub iface: String,
}

impl Attachment {
    /// `causeway --netns NETNS attach --iface IFACE EXTRA...`.
    pub fn new(netns: &str, iface: &str, extra: &[&str]) -> Self {
        let mut args = vec!["--netns", netns, "attach", "--iface", iface];
        args.extend_from_slice(extra);
        causeway_ok(&args);
        Self {
            netns: netns.to_string(),
            iface: iface.to_string(),
        }
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        let _ = causeway(&["--netns", &self.netns, "detach", "--iface", &self.iface]);
    }
}
