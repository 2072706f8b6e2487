//! Causeway's collective communication library.
#![deny(unsafe_code)]

pub mod cost;
pub mod dtype;
pub mod error;
pub mod pool;
pub mod schedule;
pub mod store;
pub mod topology;
pub mod transport;
pub mod wire;

pub use dtype::{DType, Element, ReduceOp};
pub use error::{CollectiveError, ConfigError, Rank, Result, StoreError};
pub use topology::{LinkClass, Topology};
