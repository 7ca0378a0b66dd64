//! The manager's Prometheus metrics (`GET /metrics` on the admin API): membership and
//! map gauges computed from its status at scrape time, and the counters and scale
//! latency the API handlers record as requests arrive. Names come from
//! `dmc_proto::metrics::manager`; it never changes the manager's state.

use std::time::Duration;

use dmc_process::metrics::{Desc, manager as names};

use crate::manager::Manager;

fn gauge(d: Desc, state: Option<&'static str>, value: usize) {
    match state {
        Some(s) => metrics::gauge!(d.name, "state" => s).set(value as f64),
        None => metrics::gauge!(d.name).set(value as f64),
    }
}

/// Sets the gauges from the manager's status (run before every scrape).
pub fn collect(m: &Manager) {
    let s = m.status();
    let alive_nodes = s.nodes.iter().filter(|n| n.alive).count();
    let alive_agents = s.agents.iter().filter(|a| a.alive).count();
    gauge(names::NODES, Some("alive"), alive_nodes);
    gauge(names::NODES, Some("dead"), s.nodes.len() - alive_nodes);
    gauge(names::AGENTS, Some("alive"), alive_agents);
    gauge(names::AGENTS, Some("dead"), s.agents.len() - alive_agents);
    gauge(names::INSTANCES, None, s.instances.len());
    gauge(names::REGIONS, None, m.regions().len());
    metrics::gauge!(names::MAP_VERSION.name).set(s.map_version as f64);
}

/// A heartbeat arrived (from a node or an agent).
pub fn heartbeat() {
    metrics::counter!(names::HEARTBEATS.name).increment(1);
}

/// Agents whose lease lapsed were removed (their shards went to live agents).
pub fn agents_failed_over(n: usize) {
    metrics::counter!(names::AGENT_FAILOVERS.name).increment(n as u64);
}

/// Memory nodes whose lease lapsed left the region records.
pub fn nodes_failed_over(n: usize) {
    metrics::counter!(names::NODE_FAILOVERS.name).increment(n as u64);
}

/// A region's primary moved to a backup; its writes waited `block`.
pub fn region_migrated(block: Duration) {
    metrics::counter!(names::REGION_MIGRATIONS.name).increment(1);
    metrics::histogram!(names::MIGRATION_WRITE_BLOCK.name).record(block.as_secs_f64());
}

/// The load balancer moved a primary role off a slow node.
pub fn balance_migration() {
    metrics::counter!(names::BALANCE_MIGRATIONS.name).increment(1);
}

/// A new region copy of `bytes` is complete.
pub fn copy_filled(bytes: u64) {
    metrics::counter!(names::COPIES_FILLED.name).increment(1);
    metrics::counter!(names::BYTES_FILLED.name).increment(bytes);
}

/// A region request was answered: granted, or refused.
pub fn region_request(granted: bool) {
    let d = if granted {
        names::REGION_GRANTS
    } else {
        names::REGION_GRANT_REFUSALS
    };
    metrics::counter!(d.name).increment(1);
}

/// A scale operation finished after `took`.
pub fn scaled(ok: bool, took: Duration) {
    let result = if ok { "ok" } else { "failed" };
    metrics::counter!(names::SCALE_OPERATIONS.name, "result" => result).increment(1);
    metrics::histogram!(names::SCALE_DURATION.name).record(took.as_secs_f64());
}
