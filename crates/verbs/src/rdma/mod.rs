//! The `rdma` backend: one-sided verbs over reliable-connected queue pairs.
//!
//! | module | owns |
//! |---|---|
//! | [`device`] | the interface to a device: registration, queue pairs, work requests |
//! | [`emulated`] | RC verbs emulated in software, in process (tests, any machine) |
//! | `ibverbs` | real verbs on `rdma-sys` (cargo feature `rdma`) |
//! | [`chain`] | a post's verbs as rounds of work-request chains |
//! | [`stage`] | registered staging buffers |
//! | [`transport`] | [`RdmaTransport`], the agent's side |
//! | [`responder`] | [`RdmaResponder`], the memory node's side |
//!
//! Commit RPCs and region management stay on the node's RPC channel (TCP); the queue
//! pair is set up over it (`RdmaConnect`) and region keys arrive over it
//! (`RdmaRegion`). Over RDMA a memory node's CPU sees no READ, WRITE, CAS or FAA.

pub mod chain;
pub mod device;
pub mod emulated;
#[cfg(feature = "rdma")]
pub mod ibverbs;
pub mod responder;
pub mod stage;
pub mod transport;

pub use device::{RcDevice, RcQp};
pub use emulated::EmulatedFabric;
pub use responder::RdmaResponder;
pub use transport::RdmaTransport;
