//! The pure side of cross-domain clock synchronisation: the offset/drift
//! estimator and its regression, the UDP probe wire format and its
//! authentication tags and replay windows (`auth`), the
//! request/response bookkeeping of an exchange (`exchange`, sans-IO), and a
//! virtual-clock simulator for ground-truth tests. Sockets, timestamp
//! sources and the probe session are `causeway::clock`.

pub mod auth;
pub mod estimator;
pub mod exchange;
pub mod probe;
mod regression;
pub mod sim;
pub mod source;
mod split_min;

#[cfg(test)]
mod auth_tests;
#[cfg(test)]
mod estimator_tests;
#[cfg(test)]
mod exchange_tests;

pub use estimator::{ConfigError, Estimate, Estimator, EstimatorConfig, Sample, SampleError};
pub use regression::Model;
pub use source::Source;
