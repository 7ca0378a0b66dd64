//! The manager's logic, apart from HTTP: membership with leases, instances (each with
//! its own superblock region, regions, agents and shard map kept balanced over them),
//! and every change persisted before it is acknowledged. Every saved change raises the cluster map's version and wakes the
//! agents long-polling for it ([`Manager::wait_map`]); agents report the version they
//! applied with their heartbeats, so a rescale knows when every agent follows the new
//! map.
//! Here: the [`Manager`], its one write path `update` (persist, then publish) and the
//! shared types; `api`, `scale` and `cli` call it. State changes only through `update`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dmc_proto::ByteSize;
use dmc_proto::cluster::PoolTransport;
use dmc_proto::shards::AgentId;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::state::{ClusterState, Instance, StateError, StateFile};

mod balance;
mod copies;
mod drain;
mod instances;
pub use instances::Shared as Kept;
mod map;
mod members;
mod node_failover;
mod regions;
mod resume;
mod revoke;
mod status;

pub use balance::{AgentLoad, Rebalance};
pub use copies::{Fill, Migration};
pub use drain::Drain;
pub use resume::Resumed;
pub use status::{AgentStatus, InstanceStatus, NodeStatus, ShardRow, Status};

/// The memory pool every agent of the cluster opens (from the manager's config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct PoolSettings {
    pub transport: PoolTransport,
    pub replicas: usize,
    pub region_size: ByteSize,
    pub segment_size: ByteSize,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            transport: PoolTransport::Shm,
            replicas: 2,
            region_size: ByteSize(1 << 30),
            segment_size: ByteSize(16 << 20),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0} exists already")]
    Exists(String),
    /// No room: the instance is at its maxmemory, or the nodes are full.
    #[error("{0}")]
    Full(String),
    #[error("memory node {node}: {message}")]
    Node { node: u32, message: String },
}

/// A process the manager tracks leases for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Member {
    Node(u32),
    Agent(AgentId),
}

pub struct Manager {
    state: Mutex<ClusterState>,
    file: StateFile,
    lease: Duration,
    pool: PoolSettings,
    /// Logical shards of a new instance.
    shard_count: u32,
    /// Last heartbeat per member. Not persisted: after a restart every member gets a
    /// full lease to check in again.
    seen: Mutex<HashMap<Member, Instant>>,
    /// The map version each agent last reported applying.
    applied: Mutex<HashMap<AgentId, u64>>,
    /// Agents removed since this manager started, and their instance: they may still
    /// write until they apply the map that removed them (or go silent).
    departed: Mutex<HashMap<AgentId, String>>,
    /// The current map version, for long-polling agents.
    version: tokio::sync::watch::Sender<u64>,
    /// Live bytes per instance, as agents last reported.
    used: Mutex<HashMap<String, u64>>,
    /// Bytes per region, per agent, as each last reported.
    region_used: Mutex<HashMap<AgentId, Vec<(u16, u64)>>>,
    /// The memory nodes each agent's pool can reach, as each last reported.
    agent_nodes: Mutex<HashMap<AgentId, Vec<u32>>>,
    /// RPC connections to memory nodes (region creation), opened on first use.
    node_rpc: tokio::sync::Mutex<HashMap<u32, std::sync::Arc<dyn dmc_verbs::Transport>>>,
    /// One region grant at a time (ids and placement are decided under it).
    granting: tokio::sync::Mutex<()>,
    /// Per draining region: the agents that vacated it, with the map version then.
    vacated: Mutex<HashMap<u16, HashMap<AgentId, u64>>>,
    /// The map version of the last change of slot owners.
    shards_changed: Mutex<u64>,
    /// The map version that last took failed memory nodes out of region records:
    /// their stale copies are dropped only once every agent follows it.
    placements_changed: Mutex<u64>,
    /// Reach memory nodes over TLS with this CA (none: plain TCP).
    node_tls: Option<dmc_verbs::tls::ClientTls>,
    /// One migration or fill at a time.
    placing: tokio::sync::Mutex<()>,
    /// Woken whenever an agent reports a map applied.
    applied_changed: tokio::sync::Notify,
    /// Per region being filled: the chunks agents reported writing during the fill.
    fill_dirty: Mutex<HashMap<u16, std::collections::BTreeSet<u32>>>,
    /// The load balancer's window of agents' latency reports (`balance.rs`).
    load: Mutex<balance::LoadWindow>,
    /// Agents whose process the launcher saw exit, and when (`members.rs`).
    exited: Mutex<HashMap<AgentId, Instant>>,
    /// New agents of instances with backups, backing shards up until this instant
    /// before they take primaries (`members.rs`).
    warming: Mutex<HashMap<AgentId, Instant>>,
    /// Failed-over agents to revoke on the memory nodes (`revoke.rs`).
    revocations: Mutex<revoke::Revocations>,
    /// Fills a previous manager left unfinished (region, node), to start again
    /// (`resume.rs`).
    unfinished_fills: Mutex<Vec<(u16, u32)>>,
}
impl Manager {
    /// Reaches memory nodes over TLS, trusting `tls`'s CA.
    pub fn with_node_tls(mut self, tls: Option<dmc_verbs::tls::ClientTls>) -> Manager {
        self.node_tls = tls;
        self
    }

    /// Opens the state file (or starts a cluster of `shards` shards) with leases of
    /// `lease`.
    pub fn open(
        file: StateFile,
        shards: u32,
        lease: Duration,
        pool: PoolSettings,
    ) -> Result<Manager, ManagerError> {
        let state = match file.load()? {
            Some(mut s) => {
                if s.cluster_id.is_empty() {
                    s.cluster_id = crate::state::new_cluster_id();
                    file.save(&s)?;
                }
                s
            }
            None => {
                let s = ClusterState::new(shards);
                file.save(&s)?;
                s
            }
        };
        let now = Instant::now();
        let mut seen = HashMap::new();
        for id in state.nodes.keys() {
            seen.insert(Member::Node(*id), now);
        }
        for id in state.agents.keys() {
            seen.insert(Member::Agent(*id), now);
        }
        let manager = Manager {
            version: tokio::sync::watch::Sender::new(state.map_version),
            state: Mutex::new(state),
            file,
            lease,
            pool,
            shard_count: shards,
            seen: Mutex::new(seen),
            applied: Mutex::new(HashMap::new()),
            departed: Mutex::new(HashMap::new()),
            used: Mutex::new(HashMap::new()),
            region_used: Mutex::new(HashMap::new()),
            agent_nodes: Mutex::new(HashMap::new()),
            node_rpc: tokio::sync::Mutex::new(HashMap::new()),
            granting: tokio::sync::Mutex::new(()),
            vacated: Mutex::new(HashMap::new()),
            shards_changed: Mutex::new(0),
            placements_changed: Mutex::new(0),
            node_tls: None,
            placing: tokio::sync::Mutex::new(()),
            applied_changed: tokio::sync::Notify::new(),
            fill_dirty: Mutex::new(HashMap::new()),
            load: Mutex::new(balance::LoadWindow::default()),
            exited: Mutex::new(HashMap::new()),
            warming: Mutex::new(HashMap::new()),
            revocations: Mutex::new(revoke::Revocations::default()),
            unfinished_fills: Mutex::new(Vec::new()),
        };
        manager.abandon_placements()?;
        // Vacate reports are not persisted: after a restart, a new map version makes
        // the agents vacate (and report) draining regions again.
        if manager.state.lock().regions.values().any(|r| r.draining) {
            manager.update(|_| Ok(()))?;
            *manager.shards_changed.lock() = manager.map_version();
        }
        Ok(manager)
    }

    /// Applies `change` to a copy of the state and persists it; the new state becomes
    /// current only once it is on disk.
    fn update<T>(
        &self,
        change: impl FnOnce(&mut ClusterState) -> Result<T, ManagerError>,
    ) -> Result<T, ManagerError> {
        let mut current = self.state.lock();
        let mut next = current.clone();
        let out = change(&mut next)?;
        next.map_version = current.map_version + 1;
        self.file.save(&next)?;
        let version = next.map_version;
        if next
            .instances
            .values()
            .map(|i| &i.shards)
            .ne(current.instances.values().map(|i| &i.shards))
        {
            *self.shards_changed.lock() = version;
        }
        *current = next;
        drop(current);
        self.version.send_replace(version);
        Ok(out)
    }

    /// How long a member's lease lasts without a heartbeat.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    pub fn snapshot(&self) -> ClusterState {
        self.state.lock().clone()
    }
}

/// Instance `name` of `s`, or NotFound.
pub(crate) fn instance_in<'a>(
    s: &'a ClusterState,
    name: &str,
) -> Result<&'a Instance, ManagerError> {
    s.instances
        .get(name)
        .ok_or_else(|| ManagerError::NotFound(format!("instance {name}")))
}
