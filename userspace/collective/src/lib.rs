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
//!
//! Tests and embedders build one explicitly:
//! `Communicator::builder(rank, world).master(addr).domain("east").host_id("h1").build()?`.
//!
//! ## Environment
//!
//! Rates, sizes and durations take units (`causeway_core::units`, as `tc`):
//! `200mbit`, `1gbit`; `64kb`, `1mb` (powers of 1024; a bare number is bytes);
//! `500ms`, `30s` (a duration needs a unit). A bad value is an error naming the
//! variable. `CAUSEWAY_TIMEOUT_MS`, `CAUSEWAY_RENDEZVOUS_TIMEOUT_MS` and
//! `CAUSEWAY_WAN_MBIT` were renamed when their values got units; one that is
//! still set is an error ([`config::RENAMED_VARS`]).
//!
//! | variable | meaning |
//! |---|---|
//! | `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` | torchrun's; rank 0 serves the bootstrap store at the master address |
//! | `LOCAL_RANK`, `LOCAL_WORLD_SIZE` | optional, checked for consistency |
//! | `CAUSEWAY_DOMAIN` / `CAUSEWAY_TOPOLOGY` | this rank's domain, or a file of `RANKS DOMAIN` lines (`0-3 east`) listing every rank of the world. All ranks must agree: either none sets either (one domain, `default`, logged) or every rank does, and every claim about a rank gives it the same domain; otherwise the rendezvous fails on every rank naming the ranks |
//! | `CAUSEWAY_HOST_ID` | ranks with the same host id use shared memory (default: hostname + network namespace) |
//! | `CAUSEWAY_ADDR` | IP to accept peers on (default: the one that reaches the master) |
//! | `CAUSEWAY_TIMEOUT` | an operation fails when a peer it waits for is silent this long (`60s`); the error names the rank that stopped ([`blame`]) |
//! | `CAUSEWAY_RENDEZVOUS_TIMEOUT` | bootstrap deadline (`120s`); a rank whose set-up fails (a refused connection, or it dies after registering) tells every rank through the store at once |
//! | `CAUSEWAY_ALGO` | force `ring`, `tree` or `hier` where it applies (default: α-β model) |
//! | `CAUSEWAY_COST` | link costs `CLASS=LATENCY:BANDWIDTH`, e.g. `wan=20ms:200mbit,domain=50us:10gbit,host=5us:40gbit`, applied over the probe |
//! | `CAUSEWAY_PROBE`, `CAUSEWAY_PROBE_BYTES` | start-up α-β probe on/off (1) and its bulk size (`1mb`) |
//! | `CAUSEWAY_STREAMS_WAN`, `CAUSEWAY_STREAMS_LAN` | TCP connections per remote peer across / inside a domain (2, 2) |
//! | `CAUSEWAY_TCP_CC` | congestion control across domains (`bbr`; `default` keeps the system's) |
//! | `CAUSEWAY_TCP_CC_LOSSLESS` | loss-based congestion controls (`reno`; a list such as `cubic,reno` takes the first the kernel has; `off` = never) the paced bulk connections across domains switch to while the path shows no real loss (retransmissions the receiver did not report as duplicates), and back from at the first real losses: BBR's ProbeRTT, which the short queue the pacing keeps sets off every 10 s, costs a rank's connections ~0.2 s ([`estimates::cc_choice`]) |
//! | `CAUSEWAY_SOCKET_BUFFER` | SO_SNDBUF/SO_RCVBUF across domains (`8mb` when `net.core.rmem_max` allows; `auto` = the kernel's autotuning) |
//! | `CAUSEWAY_LATENCY_STREAM`, `CAUSEWAY_LATENCY_BYTES` | one more connection per remote peer across domains, without pacing cap (1), for transfers up to this size (`256kb`) |
//! | `CAUSEWAY_WAN_DUPLICATE_BYTES` | transfers across domains up to this size go on the latency connection and, as a copy, on a bulk one; the receiver keeps the first whole copy, so a lost segment does not cost a round trip (`64kb`; 0 = off) |
//! | `CAUSEWAY_WAN_RATE` | WAN rate per direction when known, e.g. `200mbit`: the bulk streams of a domain are paced (SO_MAX_PACING_RATE) to share 96 % of it (unset: paced to the live estimate, `estimates`) |
//! | `CAUSEWAY_WAN_PACING` | pace the bulk streams across domains (1, default) or not (0): 96 % of a configured rate per domain, or 84–108 % of the live estimate (96–108 % unless the queue passes half a BDP), trimmed so that a short queue (an eighth of the minimum RTT) stands at the bottleneck |
//! | `CAUSEWAY_WAN_INFLIGHT_GAIN` | until start-up ends (the probe's rounds run before any pacing), the receivers clamp the bulk connections' windows across domains so that together they keep at most this multiple of the path's measured BDP in flight, and the bottleneck's queue does not overflow (`1.5`; 0 = off) |
//! | `CAUSEWAY_WARM_BYTES` | bytes each rank exchanges both ways with its WAN counterpart at start-up (with 3 latency-sized transfers) so the first operation finds warm connections (`4mb`; 0 = off) |
//! | `CAUSEWAY_PORT_BASE`, `CAUSEWAY_PORT_COUNT` | a rank accepts its peers on the first free port of this range (29600, 400; base 0 = any port). Every connection is tagged for the kernel: DSCP and `SO_PRIORITY` per kind (bulk AF11/0, latency AF21/4, control and the store CS5/6: [`transport::tagging`]); `causeway policy example` classifies them |
//! | `CAUSEWAY_SHM` | shared memory between same-host ranks (1) |
//! | `CAUSEWAY_TRANSPORT` | `auto` (default), `tcp` or `rdma`: pairs of one domain on different hosts use RDMA queue pairs when both ranks' addresses are on an active RDMA device ([`transport::rdma`], cargo feature `rdma`); `auto` keeps TCP otherwise (logged with the reason), `rdma` fails set-up naming the pair; under TLS and across domains it is always TCP |
//! | `CAUSEWAY_CHUNK_BYTES`, `CAUSEWAY_WINDOW` | pipelining: chunk size (`1mb`) and lanes in flight (4) |
//! | `CAUSEWAY_METRICS_ADDR` | `host:port`: serve Prometheus metrics at `/metrics` (op latency per op and size, bytes per link class, errors: [`metrics`]); the port is offset by `LOCAL_RANK`, port 0 takes any free one ([`Communicator::metrics_addr`]); ranks of one process share a listener |
//! | `CAUSEWAY_TRACE` | a directory: each rank writes its timeline (operations, every chunk sent and received, its clock offsets to the peers) to `rank-<r>.json` when the communicator is dropped ([`trace`]); `cargo xtask trace DIR` merges them onto rank 0's clock; the offsets come from the agent's map named by `CAUSEWAY_CLOCK_MAP` ([`Options::clock_map`]) |
//! | `CAUSEWAY_WAN_PATHS` | this rank's own address on each WAN path, comma-separated, in path order: bulk chunks across domains are striped over the paths ([`stripe`]), each path estimated and paced on its own ([`estimates`]). Unset: the agent's (see below), else one path |
//! | `CAUSEWAY_AGENT_SOCKET` | the host agent's control socket, asked for this host's WAN path addresses when `CAUSEWAY_WAN_PATHS` is unset (`[library] wan_paths` in agent.toml; unset: `/run/causeway/root/agent.sock` when it exists; no agent: one path): [`agent_paths`] |
//! | `CAUSEWAY_WAN_CODEC` | codec of what crosses domains when a call names none (`none`; `bf16`, `fp16`, `int8[:BLOCK[:stochastic]]`, `topk:1%`, `lz4`, `zstd[:LEVEL]`; lossy ones apply to allreduce and reduce-scatter: [`CallOptions`]) |
//!
//! The options that change the wire (streams, shared memory, chunk size, window,
//! the latency stream and its size, `CAUSEWAY_ALGO`, the probe, `CAUSEWAY_COST`:
//! [`Options::wire_settings`]) must be equal on every rank: each rank publishes
//! them at rendezvous and a difference is [`CollectiveError::ConfigMismatch`] on
//! every rank, naming the option and which ranks set which value.
//!
//! ## After a failure: shrink and grow
//!
//! An operation that loses a peer fails on every survivor with an error naming
//! it ([`CollectiveError::peer`]). At that boundary each survivor calls
//! [`Communicator::shrink`] and continues on the returned communicator (ranks
//! renumbered densely in old-rank order, [`Communicator::epoch`] + 1); a
//! newcomer joins with [`CommunicatorBuilder::join`] while the members call
//! [`Communicator::grow`]. The old communicator is retired: every later call on
//! it fails with [`CollectiveError::Retired`]. Losing rank 0 (the bootstrap
//! store) is no special case. Protocol, bounds and limits: [`membership`].
//!
//! ```no_run
//! # use causeway_collective::{Communicator, ReduceOp};
//! # fn main() -> causeway_collective::Result<()> {
//! let mut comm = Communicator::from_env()?;
//! let mut grads = vec![0.0f32; 1 << 20];
//! if let Err(e) = comm.allreduce(&mut grads, ReduceOp::Sum) {
//!     eprintln!("lost rank {:?}: {e}", e.peer());
//!     comm = comm.shrink()?; // the survivors, at this operation boundary
//! }
//! # Ok(()) }
//! ```
//!
//! ## Layout
//!
//! Pure parts: [`schedule`] (plans as data), [`exec`] (the plan executor, a
//! sans-IO state machine with time as an input), [`blame`] (who is named when
//! an operation stops: direct evidence over downstream stalls), [`schedule::sim`] (drives that
//! executor on a virtual clock), [`cost`] (α-β model; the one algorithm choice),
//! [`wire`] (frames), [`dtype`] (kernels).
//! I/O: [`store`] and the rendezvous, the mesh of [`transport`]s, one reader and one
//! writer thread per connection, and one engine thread per communicator that runs
//! operations in submission order, driving the same executor over the connections. `unsafe` lives only in [`transport::shm`], in `comm_buf` (the contract of [`Registered::new`]), in `engine::lent` (the blocking calls lend the caller's slice to the engine thread, the async ones their vector),
//! in two socket options of [`transport::tcp`] (the pacing cap, `TCP_INFO`) and in one read-only
//! `BPF_OBJ_GET` of `peer_clock`.
//!
//! `peer_clock` (cargo feature `peer-clock`, on by default) reads the peer clock
//! estimates the Causeway agent pins: offset, drift, error bound, source.
#![deny(unsafe_code)]

pub mod agent_paths;
mod agree;
pub mod blame;
mod builder;
mod calls;
#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod cli;
pub mod codec;
mod comm;
mod comm_buf;
pub mod config;
pub mod cost;
pub mod dtype;
mod engine;
pub mod error;
pub mod estimates;
pub mod exec;
mod handle;
mod links;
pub mod membership;
mod mesh;
mod mesh_rdma;
mod mesh_tls;
pub mod metrics;
mod metrics_http;
pub mod observe_env;
#[cfg(feature = "peer-clock")]
pub mod peer_clock;
pub mod pool;
pub mod probe;
mod rendezvous;
pub mod schedule;
mod setup;
pub mod store;
mod store_client;
mod store_limits;
mod store_stream;
pub mod stripe;
/// Certificates for the TLS tests (shared with the integration tests).
#[cfg(test)]
#[path = "../tests/integration/pki.rs"]
mod test_pki;
pub mod topology;
pub mod trace;
pub mod transport;
pub mod warm;
pub mod wire;

pub use builder::CommunicatorBuilder;
pub use calls::CallOptions;
pub use codec::CodecSpec;
pub use comm::Communicator;
pub use comm_buf::{CommBuf, Registered};
pub use config::{DomainClaim, Identity, Options};
pub use cost::CostModel;
pub use dtype::{DType, Element, ReduceOp};
pub use engine::Progress;
pub use error::{CollectiveError, ConfigError, Rank, Result, StoreError, TlsError};
pub use estimates::LinkEstimate;
pub use handle::Handle;
pub use membership::Membership;
pub use schedule::Algorithm;
pub use topology::{LinkClass, Topology};
