//! The DMC cluster manager (DESIGN.md §6), being built. Today: durable state
//! ([`state`]), membership with leases and the shard map kept balanced over the
//! registered agents ([`manager`]), the HTTP admin API ([`api`]) and the operator CLI
//! ([`cli`]). Allocation, the agent launcher, routing and failover come next (the
//! cluster-manager issue).

pub mod api;
pub mod cli;
pub mod manager;
pub mod state;
