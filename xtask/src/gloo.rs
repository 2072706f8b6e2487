//! PyTorch (for its Gloo backend) for the side-by-side benchmarks: the
//! project's one Python environment (`crate::python`, `target/py-venv`), which
//! the `causeway` package's tests use too.

use std::path::PathBuf;

use anyhow::Result;

/// Path of the venv's python, installing torch first when needed.
pub fn python() -> Result<PathBuf> {
    crate::python::python()
}
