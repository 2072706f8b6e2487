//! The library's errors as Python exceptions, one class per thing a caller
//! does something different about:
//!
//! | class | bases | raised when |
//! |---|---|---|
//! | `CausewayError` | `RuntimeError` | anything else (closed communicator, I/O, shared memory) |
//! | `PeerError` | `CausewayError` | a peer died, stopped responding, sent the wrong thing or made another call; `.peer` is its rank |
//! | `CausewayTimeoutError` | `PeerError`, `TimeoutError` | nothing arrived from a peer (or the rendezvous) within the timeout |
//! | `ConfigError` | `CausewayError`, `ValueError` | the configuration or an argument is invalid, or ranks disagree on it |
//!
//! Every instance has `.peer` (the blamed rank, or `None`) and `.kind` (the
//! library's variant name, e.g. `"Unresponsive"`).

use causeway_collective::{CollectiveError, StoreError};
use pyo3::exceptions::{PyRuntimeError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::PyTypeInfo;

pyo3::create_exception!(
    causeway,
    CausewayError,
    PyRuntimeError,
    "A Causeway operation failed."
);
pyo3::create_exception!(
    causeway,
    PeerError,
    CausewayError,
    "A peer died, stopped responding, or made a different call; `.peer` names it."
);

/// `ConfigError(CausewayError, ValueError)` and `CausewayTimeoutError(PeerError,
/// TimeoutError)` have two bases, which `create_exception!` cannot express:
/// they are made with `type()` when the module is imported, and looked up here.
fn two_base_type<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("causeway._causeway")?.getattr(name)
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CausewayError", py.get_type::<CausewayError>())?;
    m.add("PeerError", py.get_type::<PeerError>())?;
    let config = make_type(
        py,
        "ConfigError",
        "Invalid configuration or argument, or ranks that disagree on it.",
        (
            py.get_type::<CausewayError>(),
            PyValueError::type_object(py),
        ),
    )?;
    m.add("ConfigError", config)?;
    let timeout = make_type(
        py,
        "CausewayTimeoutError",
        "Nothing arrived from a peer (or the rendezvous) within the timeout.",
        (py.get_type::<PeerError>(), PyTimeoutError::type_object(py)),
    )?;
    m.add("CausewayTimeoutError", timeout)?;
    Ok(())
}

fn make_type<'py>(
    py: Python<'py>,
    name: &str,
    doc: &str,
    bases: (
        Bound<'py, pyo3::types::PyType>,
        Bound<'py, pyo3::types::PyType>,
    ),
) -> PyResult<Bound<'py, PyAny>> {
    let ns = pyo3::types::PyDict::new(py);
    ns.set_item("__module__", "causeway")?;
    ns.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, [bases.0, bases.1])?;
    py.import("builtins")?
        .getattr("type")?
        .call1((name, bases, ns))
}

/// Which class an error is raised as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Base,
    Peer,
    Timeout,
    Config,
}

pub fn class_of(e: &CollectiveError) -> Class {
    use CollectiveError as E;
    match e {
        E::Config(_)
        | E::ConfigMismatch { .. }
        | E::DomainUnset { .. }
        | E::DomainConflict { .. }
        | E::Inconsistent { .. }
        | E::DuplicateRank { .. }
        | E::InvalidArgument(_) => Class::Config,
        E::PeerTimeout { .. } | E::RendezvousTimeout { .. } => Class::Timeout,
        E::Store(StoreError::Timeout { .. }) => Class::Timeout,
        E::PeerFailed { .. }
        | E::Unresponsive { .. }
        | E::Frame { .. }
        | E::Mismatch { .. }
        | E::CallMismatch { .. }
        | E::SetupFailed { .. } => Class::Peer,
        _ => Class::Base,
    }
}

/// The variant's name, for `.kind`.
fn kind_of(e: &CollectiveError) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("")
        .to_string()
}

/// Converts a library error into the Python exception of its class.
pub fn to_py(e: CollectiveError) -> PyErr {
    Python::attach(|py| {
        let class = class_of(&e);
        let ty: PyResult<Bound<'_, PyAny>> = match class {
            Class::Base => Ok(py.get_type::<CausewayError>().into_any()),
            Class::Peer => Ok(py.get_type::<PeerError>().into_any()),
            Class::Config => two_base_type(py, "ConfigError"),
            Class::Timeout => two_base_type(py, "CausewayTimeoutError"),
        };
        let made = ty.and_then(|ty| {
            let exc = ty.call1((e.to_string(),))?;
            exc.setattr("peer", e.peer())?;
            exc.setattr("kind", kind_of(&e))?;
            Ok(PyErr::from_value(exc))
        });
        made.unwrap_or_else(|err| err)
    })
}

/// An invalid argument from Python (wrong tensor, unknown op).
pub fn argument(msg: String) -> PyErr {
    to_py(CollectiveError::InvalidArgument(msg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_collective::ConfigError as Cfg;
    use std::time::Duration;

    #[test]
    fn classes() {
        assert_eq!(
            class_of(&CollectiveError::Config(Cfg::EmptyWorld)),
            Class::Config
        );
        assert_eq!(
            class_of(&CollectiveError::PeerTimeout {
                peers: vec![1],
                after: Duration::from_secs(1)
            }),
            Class::Timeout
        );
        assert_eq!(
            class_of(&CollectiveError::PeerFailed {
                peer: 2,
                detail: "gone".into()
            }),
            Class::Peer
        );
        assert_eq!(class_of(&CollectiveError::Closed), Class::Base);
    }

    #[test]
    fn kinds() {
        assert_eq!(kind_of(&CollectiveError::Closed), "Closed");
        assert_eq!(
            kind_of(&CollectiveError::PeerFailed {
                peer: 2,
                detail: "gone".into()
            }),
            "PeerFailed"
        );
    }
}
