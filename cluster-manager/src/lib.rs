//! The DMC cluster manager (DESIGN.md §6): durable state ([`state`]), membership with
//! leases, the shard map kept balanced over the registered agents and the cluster map
//! agents long-poll ([`manager`]), rescaling through an agent [`launcher`]
//! ([`scale`]), the HTTP admin API ([`api`]) and the operator CLI ([`cli`]).
//! On-demand region allocation and failover come next.

pub mod api;
pub mod balance;
pub mod cli;
pub mod failover;
pub mod launcher;
pub mod listener;
pub mod manager;
pub mod metrics;
pub mod rereplicate;
pub mod scale;
pub mod state;
