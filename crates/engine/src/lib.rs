//! The cache engine: local DRAM cache in front of the pool, and command execution
//! (compute-agent issue).

pub use dmc_dht as dht;
