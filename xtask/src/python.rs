//! The project's Python environment and the `causeway` package's test stage.
//!
//! One virtualenv, `target/py-venv`, holds torch (for the backend's tests, the
//! examples and the Gloo benches), maturin and pytest. PyPI's Linux torch wheel
//! pulls the CUDA runtime packages even when no GPU is used: the first install
//! downloads several GiB (about 3 minutes here); later runs find it in place.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::cmd;

pub const TORCH_VERSION: &str = "2.15.0";
/// What the venv needs besides torch (versions pinned where the build depends on them).
const TOOLS: &[&str] = &["numpy", "maturin>=1.9.4,<2", "pytest>=7"];

/// The package's directory (Cargo.toml + pyproject.toml).
pub fn package_dir() -> PathBuf {
    cmd::root().join("userspace").join("python")
}

fn venv_dir() -> PathBuf {
    cmd::root().join("target").join("py-venv")
}

/// `bin/NAME` of the project venv.
pub fn venv_bin(name: &str) -> PathBuf {
    venv_dir().join("bin").join(name)
}

/// The venv's python, creating the venv and installing torch, maturin and
/// pytest first when needed.
pub fn python() -> Result<PathBuf> {
    let python = venv_bin("python");
    let probe = format!(
        "import torch, pytest, numpy, torch.distributed as d; \
         assert torch.__version__.split('+')[0] == '{TORCH_VERSION}'; assert d.is_gloo_available()"
    );
    let ready = |p: &PathBuf| {
        p.exists()
            && cmd::succeeds(Command::new(p).args(["-c", &probe]))
            && cmd::succeeds(Command::new(venv_bin("maturin")).arg("--version"))
    };
    if ready(&python) {
        return Ok(python);
    }
    let venv = venv_dir();
    if venv.exists() {
        // Half-written (an interrupted install) or stale (another torch):
        // installing into it can fail inside pip, so start afresh.
        eprintln!(
            "python: {} is incomplete or stale; recreating it",
            venv.display()
        );
        std::fs::remove_dir_all(&venv).with_context(|| format!("removing {}", venv.display()))?;
    }
    eprintln!(
        "python: installing torch {TORCH_VERSION}, maturin and pytest into {} (the first time downloads several GiB)",
        venv.display()
    );
    cmd::run(Command::new("python3").args(["-m", "venv"]).arg(&venv)).context(
        "creating the project venv needs python3 with the venv module (apt-get install python3-venv)",
    )?;
    cmd::run(
        Command::new(venv_bin("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("torch=={TORCH_VERSION}"))
            .args(TOOLS),
    )?;
    if !ready(&python) {
        anyhow::bail!(
            "{} lacks torch {TORCH_VERSION} with Gloo, maturin or pytest after installing them",
            venv.display()
        );
    }
    Ok(python)
}

/// Builds the abi3 wheel (release) into `target/wheels` and installs it into
/// the venv; returns the wheel's path.
pub fn install_package(python: &std::path::Path) -> Result<PathBuf> {
    let out = cmd::root().join("target").join("wheels");
    let _ = std::fs::remove_dir_all(&out);
    cmd::run(
        Command::new(venv_bin("maturin"))
            .args(["build", "--release", "--quiet", "--manifest-path"])
            .arg(package_dir().join("Cargo.toml"))
            .arg("--interpreter")
            .arg(python)
            .arg("--out")
            .arg(&out),
    )
    .context("building the causeway wheel")?;
    let wheel = std::fs::read_dir(&out)
        .with_context(|| format!("reading {}", out.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .with_context(|| format!("maturin left no wheel in {}", out.display()))?;
    cmd::run(
        Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["--no-deps", "--force-reinstall"])
            .arg(&wheel),
    )
    .context("installing the causeway wheel")?;
    Ok(wheel)
}

/// The test stage: venv, wheel, then pytest over `userspace/python/tests`.
pub fn test() -> Result<()> {
    let start = Instant::now();
    let python = python()?;
    let wheel = install_package(&python)?;
    eprintln!(
        "python: installed {} ({:.0} s so far)",
        wheel.display(),
        start.elapsed().as_secs_f64()
    );
    let res = cmd::run_in(
        &package_dir(),
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
            .env("CAUSEWAY_WHEEL", &wheel),
    )
    .context("pytest of the causeway package");
    eprintln!("python: stage took {:.0} s", start.elapsed().as_secs_f64());
    res
}
