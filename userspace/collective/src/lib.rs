//! Causeway's collective communication library: allreduce, broadcast, allgather,
//! reduce-scatter and barrier between training processes, aware of which ranks
//! share a host (shared memory) and which sit across a WAN (hierarchical algorithm,
//! parallel TCP streams).
//!
//! ```no_run
//! use causeway_collective::{Communicator, ReduceOp};
//! # fn main() -> causeway_collective::Result<()> {
//! let comm = Communicator::from_env()?; // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, CAUSEWAY_DOMAIN
//! let mut grads = vec![1.0f32; 1 << 20];
//! comm.allreduce(&mut grads, ReduceOp::Avg)?;
//! let h = comm.allreduce_async(vec![2.0f32; 1 << 20], ReduceOp::Sum); // overlap work, then:
//! let (done, total) = h.progress();
//! let summed = h.wait()?;
//! # let _ = (done, total, summed); Ok(()) }
//! ```
#![deny(unsafe_code)]

mod comm;
pub mod config;
pub mod cost;
pub mod dtype;
mod engine;
pub mod error;
mod links;
mod mesh;
pub mod pool;
pub mod probe;
mod rendezvous;
pub mod schedule;
pub mod store;
pub mod topology;
pub mod transport;
pub mod wire;

pub use comm::{dtype_of, Communicator, CommunicatorBuilder, Handle};
pub use config::{Identity, Options};
pub use cost::CostModel;
pub use dtype::{DType, Element, ReduceOp};
pub use engine::Progress;
pub use error::{CollectiveError, ConfigError, Rank, Result, StoreError};
pub use schedule::Algorithm;
pub use topology::{LinkClass, Topology};
