//! `dmc-bench`, a load generator for any Redis-protocol server: YCSB workloads and
//! custom mixes over pipelined connections, closed or open loop, with HDR latency
//! histograms, a per-second timeline and a JSON summary; and `compare`, which runs the
//! same suites against redis-server and DMC in one go.

pub mod client;
pub mod cluster;
pub mod compare;
pub mod keys;
pub mod plot;
pub mod report;
pub mod stats;
pub mod trace;
pub mod workload;
