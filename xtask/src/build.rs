//! Building the workspace (the eBPF object is built by
//! userspace/causeway/build.rs, so a plain cargo build covers both halves).

use anyhow::Result;

use crate::cmd;

pub fn workspace(release: bool) -> Result<()> {
    let mut c = cmd::cargo();
    c.args(["build", "--workspace", "--all-targets"]);
    if release {
        c.arg("--release");
    }
    cmd::run(&mut c)
}

/// Builds one binary of one package.
pub fn package_bin(package: &str, bin: &str, release: bool) -> Result<()> {
    let mut c = cmd::cargo();
    c.args(["build", "--package", package, "--bin", bin]);
    if release {
        c.arg("--release");
    }
    cmd::run(&mut c)
}
