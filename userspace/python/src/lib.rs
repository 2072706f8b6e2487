//! `causeway._causeway`: the native module of the `causeway` Python package
//! (the package itself, the torch backend and its tests are under `python/`).
//!
//! Tensors cross as DLPack capsules and are used in place ([`dlpack`]); the
//! GIL is released while an operation runs ([`comm`]); the library's errors
//! become typed exceptions ([`errors`]).
#![deny(unsafe_code)]

pub mod comm;
pub mod dlpack;
pub mod errors;

use pyo3::prelude::*;

/// The domain `rank` has in a `CAUSEWAY_TOPOLOGY` file (`RANKS DOMAIN` lines).
#[pyfunction]
fn domain_from_topology(path: &str, rank: usize) -> PyResult<String> {
    causeway_collective::config::domain_from_file(path, rank).map_err(|e| errors::to_py(e.into()))
}

/// `(address, elements, dtype)` of the memory a DLPack capsule describes, as
/// the operations see it (tests check that it is the tensor's own memory).
#[pyfunction]
fn _dlpack_view(capsule: &Bound<'_, PyAny>) -> PyResult<(usize, usize, String)> {
    let v = dlpack::view(capsule, "tensor")?;
    Ok((v.ptr as usize, v.len, format!("{:?}", v.dtype)))
}

#[pymodule]
fn _causeway(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<comm::Communicator>()?;
    m.add_class::<comm::StoreServer>()?;
    m.add_function(wrap_pyfunction!(domain_from_topology, m)?)?;
    m.add_function(wrap_pyfunction!(_dlpack_view, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
