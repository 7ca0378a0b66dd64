//! What operators see: `status`, `instances list` and `slots`, built from the state,
//! the leases and the bytes agents report with their heartbeats (kept here, in memory
//! only). Called by the API's read handlers (its heartbeat handler for the reports) and
//! by the CLI, which decodes these types; nothing here changes the persisted state.

use std::collections::HashMap;

use dmc_proto::shards::AgentId;
use serde::{Deserialize, Serialize};

use super::{Manager, ManagerError, Member, instance_in};
use crate::state::ClusterState;

/// What `status` shows of a memory node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub id: u32,
    pub endpoint: String,
    pub capacity: u64,
    /// Bytes of region copies granted on it.
    pub allocated: u64,
    /// Bytes of live and limbo blocks in those copies, as the agents report them.
    pub used: u64,
    pub alive: bool,
    /// Being emptied by `nodes drain`: no new copies go there.
    #[serde(default)]
    pub draining: bool,
    /// Mean latency (µs) agents saw on it over the load balancer's last window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
}

/// What `status` and `instances list` show of an instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceStatus {
    pub name: String,
    pub maxmemory: u64,
    pub policy: String,
    /// Backup agents per shard.
    #[serde(default)]
    pub backups: u32,
    /// The region holding its superblock.
    pub super_region: u16,
    /// Agents serving it.
    pub agents: usize,
    /// Bytes of regions granted (one copy each).
    pub allocated: u64,
    /// Bytes in live blocks, as its agents last reported.
    pub used: u64,
    pub regions: usize,
}

/// What `status` shows of an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    pub id: AgentId,
    pub listen: String,
    pub instance: String,
    pub alive: bool,
    /// Shards it is primary of.
    pub shards: usize,
    /// Started by this manager's launcher (so `agents scale` may stop it).
    pub launched: bool,
    /// The cluster map version it last applied.
    pub map_version: u64,
}

/// One shard's row in `slots`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardRow {
    pub shard: u32,
    pub first_slot: u16,
    pub last_slot: u16,
    pub primary: Option<AgentId>,
    /// Agents keeping the shard's cache warm, first to take it over.
    #[serde(default)]
    pub backups: Vec<AgentId>,
    pub epoch: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub nodes: Vec<NodeStatus>,
    pub agents: Vec<AgentStatus>,
    /// Logical shards per instance.
    pub shards: usize,
    /// Total memory-node capacity in bytes.
    pub capacity: u64,
    pub map_version: u64,
    pub instances: Vec<InstanceStatus>,
    pub region_size: u64,
    pub replicas: usize,
}
impl Manager {
    /// Records an agent's bytes per region (for the used bytes per memory node).
    pub fn report_regions(&self, agent: AgentId, regions: Vec<(u16, u64)>) {
        self.region_used.lock().insert(agent, regions);
    }

    /// Records the memory nodes agent `agent`'s pool can reach.
    pub fn report_nodes(&self, agent: AgentId, nodes: Vec<u32>) {
        self.agent_nodes.lock().insert(agent, nodes);
    }

    /// Whether every live agent of `instance` that reported its memory nodes can reach
    /// `node`: an agent's node list is fixed when it opens its pool, and a copy on a
    /// node one of them cannot reach would miss its writes. (An agent that has not
    /// reported yet opened its pool from a map listing every node.)
    pub(crate) fn reachable_by_agents(&self, s: &ClusterState, instance: &str, node: u32) -> bool {
        let reports = self.agent_nodes.lock();
        s.agents_of(instance)
            .filter(|a| self.alive(Member::Agent(*a)))
            .filter_map(|a| reports.get(&a))
            .all(|nodes| nodes.contains(&node))
    }

    /// Bytes in use on memory node `node`: what the agents report of the regions it
    /// holds a copy of (every copy holds the same bytes).
    fn used_on(&self, s: &ClusterState, node: u32) -> u64 {
        let reports = self.region_used.lock();
        reports
            .iter()
            .filter(|(a, _)| s.agents.contains_key(a))
            .flat_map(|(_, r)| r.iter())
            .filter(|(region, _)| {
                s.regions
                    .get(region)
                    .is_some_and(|r| r.copies().any(|n| n == node))
            })
            .map(|(_, bytes)| *bytes)
            .sum()
    }

    /// Records an agent's report of its instance's live bytes.
    pub fn report_used(&self, instance: &str, used: u64) {
        self.used.lock().insert(instance.to_string(), used);
    }

    pub fn instances(&self) -> Vec<InstanceStatus> {
        let s = self.snapshot();
        let used = self.used.lock();
        s.instances
            .values()
            .map(|i| InstanceStatus {
                name: i.name.clone(),
                maxmemory: i.maxmemory.0,
                policy: i.policy.clone(),
                backups: i.backups,
                super_region: i.super_region,
                agents: s.agents_of(&i.name).count(),
                allocated: s.allocated_to(&i.name),
                used: used.get(&i.name).copied().unwrap_or(0),
                regions: s.regions.values().filter(|r| r.instance == i.name).count(),
            })
            .collect()
    }

    pub fn status(&self) -> Status {
        let s = self.snapshot();
        let latency = self.node_latency();
        let counts: HashMap<AgentId, usize> = s
            .instances
            .values()
            .flat_map(|i| i.shards.counts())
            .collect();
        Status {
            nodes: s
                .nodes
                .values()
                .map(|n| NodeStatus {
                    id: n.id,
                    endpoint: n.endpoint.clone(),
                    capacity: n.capacity.0,
                    allocated: s.allocated_on(n.id),
                    used: self.used_on(&s, n.id),
                    alive: self.alive(Member::Node(n.id)),
                    draining: n.draining,
                    latency_us: latency.get(&n.id).copied(),
                })
                .collect(),
            agents: s
                .agents
                .values()
                .map(|a| AgentStatus {
                    id: a.id,
                    listen: a.listen.clone(),
                    instance: a.instance.clone(),
                    alive: self.alive(Member::Agent(a.id)),
                    shards: counts.get(&a.id).copied().unwrap_or(0),
                    launched: s.launched.contains_key(&a.listen),
                    map_version: self.applied.lock().get(&a.id).copied().unwrap_or(0),
                })
                .collect(),
            shards: s
                .instances
                .get(dmc_proto::cluster::DEFAULT_INSTANCE)
                .map_or(self.shard_count as usize, |i| i.shards.shards.len()),
            capacity: s.nodes.values().map(|n| n.capacity.0).sum(),
            map_version: s.map_version,
            instances: self.instances(),
            region_size: self.pool.region_size.0,
            replicas: self.pool.replicas,
        }
    }

    /// `instance`'s shards: slot ranges, primaries, epochs.
    pub fn slots(&self, instance: &str) -> Result<Vec<ShardRow>, ManagerError> {
        let s = self.snapshot();
        let shards = &instance_in(&s, instance)?.shards;
        Ok(shards
            .shards
            .iter()
            .map(|sh| {
                let r = shards.slots(sh.id);
                ShardRow {
                    shard: sh.id,
                    first_slot: r.start,
                    last_slot: r.end.saturating_sub(1),
                    primary: sh.primary,
                    backups: sh.backups.clone(),
                    epoch: sh.epoch,
                }
            })
            .collect())
    }
}
