//! Cross-domain clock synchronisation: a pure offset/drift estimator, the
//! UDP probe wire format, timestamp sources (kernel eBPF stamps,
//! SO_TIMESTAMPING, userspace) and the probe session that ties them together.

pub mod estimator;
mod regression;
pub mod sim;

#[cfg(test)]
mod estimator_tests;

pub use estimator::{ConfigError, Estimate, Estimator, EstimatorConfig, Sample, SampleError};
pub use regression::Model;
