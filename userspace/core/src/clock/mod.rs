//! The pure side of cross-domain clock synchronisation: the offset/drift
//! estimator and its regression, the UDP probe wire format, and a
//! virtual-clock simulator for ground-truth tests. Sockets, timestamp
//! sources and the probe session are `causeway::clock`.

pub mod estimator;
pub mod probe;
mod regression;
pub mod sim;
mod split_min;

#[cfg(test)]
mod estimator_tests;

pub use estimator::{ConfigError, Estimate, Estimator, EstimatorConfig, Sample, SampleError};
pub use regression::Model;
