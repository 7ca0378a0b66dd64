//! DMC's transport: one-sided verbs on pool memory and the RPC channel to memory nodes.
//!
//! The memory pool is a set of **regions** held by memory nodes; a byte of the pool is
//! `(region, offset)`. Clients reach a node through a [`Transport`]: one-sided `READ`,
//! `WRITE`, `CAS` and `FAA` posted in batches ([`Transport::post`]) and RPCs
//! ([`Transport::call`]) for region management and the commit protocol.
//!
//! | module | owns |
//! |---|---|
//! | [`memory`] | raw region memory (heap or shared mapping); all pool `unsafe` |
//! | [`transport`] | the [`Transport`] trait and [`Verb`] |
//! | [`backend`] | `local`, `shm` and `tcp` transports |
//! | [`rdma`] | the `rdma` transport, its device interface and software emulation |
//! | [`wire`] | the RPC wire format |
//! | [`rpc`] | the pipelined RPC client |
//! | [`node`] | the memory node's core: regions, locks, epochs, commits |
//! | [`server`] | the memory node's RPC server |
//! | [`stats`] | this process's verb and RPC traffic counters |
//! | [`conformance`] | the suite every backend passes |
//!
//! This crate knows nothing of hash tables or objects; `dmc-umo` builds the pool's
//! address space and transactions on top of it.

pub mod backend;
pub mod conformance;
pub mod error;
pub mod lazy;
pub mod memory;
pub mod node;
pub mod rdma;
pub mod revoke;
pub mod rpc;
pub mod server;
pub mod stats;
pub mod tls;
pub mod transport;
pub mod wire;

pub use backend::{BackendKind, LocalTransport, ShmTransport, TcpTransport};
pub use error::VerbsError;
pub use lazy::LazyTransport;
pub use node::{NodeConfig, NodeCore, Storage};
pub use rpc::{Endpoint, RpcOptions};
pub use transport::{Transport, Verb};

/// A region's id in the pool (16 bits, so that a region and a 32-bit offset pack into a
/// 48-bit global address).
pub type RegionId = u16;
/// A memory node's id.
pub type NodeId = u32;
