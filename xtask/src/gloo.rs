//! PyTorch (for its Gloo backend) in the project's own virtualenv, for the
//! side-by-side allreduce benchmark. The tests never need it.
//!
//! PyPI's Linux torch wheel depends on the CUDA runtime packages even when no
//! GPU is used, so the first install downloads several GiB (about 3 minutes
//! here); later runs find it in place.

use std::{path::PathBuf, process::Command};

use anyhow::{Context, Result};

use crate::cmd;

pub const TORCH_VERSION: &str = "2.15.0";

/// Path of the venv's python, installing torch first when needed.
pub fn python() -> Result<PathBuf> {
    let venv = cmd::root().join("target").join("gloo-venv");
    let python = venv.join("bin").join("python");
    let probe = "import torch.distributed as d; assert d.is_gloo_available()";
    if python.exists() && cmd::succeeds(Command::new(&python).args(["-c", probe])) {
        return Ok(python);
    }
    eprintln!(
        "bench: installing torch {TORCH_VERSION} (for Gloo) into {}",
        venv.display()
    );
    cmd::run(Command::new("python3").args(["-m", "venv"]).arg(&venv)).context(
        "creating the Gloo venv needs python3 with the venv module (apt-get install python3-venv)",
    )?;
    cmd::run(Command::new(venv.join("bin").join("pip")).args([
        "install",
        "--quiet",
        &format!("torch=={TORCH_VERSION}"),
        "numpy",
    ]))?;
    cmd::run(Command::new(&python).args(["-c", probe]))
        .context("torch installed but its Gloo backend is not available")?;
    Ok(python)
}
