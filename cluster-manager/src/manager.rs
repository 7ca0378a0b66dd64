//! The manager's logic, apart from HTTP: membership with leases, instances (each with
//! its own superblock region, regions, agents and shard map kept balanced over them),
//! and every change persisted before it is acknowledged. Every saved change raises the cluster map's version and wakes the
//! agents long-polling for it ([`Manager::wait_map`]); agents report the version they
//! applied with their heartbeats, so a rescale knows when every agent follows the new
//! map.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dmc_proto::ByteSize;
use dmc_proto::cluster::{
    AgentInfo, ClusterMap, InstanceSpec, PoolSpec, PoolTransport, RegionGrant,
};
use dmc_proto::shards::AgentId;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::state::{
    AgentRecord, ClusterState, Instance, LaunchRecord, NodeRecord, RegionRecord, StateError,
    StateFile,
};

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
}

/// What `status` and `instances list` show of an instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceStatus {
    pub name: String,
    pub maxmemory: u64,
    pub policy: String,
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
    /// The current map version, for long-polling agents.
    version: tokio::sync::watch::Sender<u64>,
    /// Live bytes per instance, as agents last reported.
    used: Mutex<HashMap<String, u64>>,
    /// Bytes per region, per agent, as each last reported.
    region_used: Mutex<HashMap<AgentId, Vec<(u16, u64)>>>,
    /// RPC connections to memory nodes (region creation), opened on first use.
    node_rpc: tokio::sync::Mutex<HashMap<u32, std::sync::Arc<dyn dmc_verbs::Transport>>>,
    /// One region grant at a time (ids and placement are decided under it).
    granting: tokio::sync::Mutex<()>,
    /// Per draining region: the agents that vacated it, with the map version then.
    vacated: Mutex<HashMap<u16, HashMap<AgentId, u64>>>,
    /// The map version of the last change of slot owners.
    shards_changed: Mutex<u64>,
}

impl Manager {
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
            used: Mutex::new(HashMap::new()),
            region_used: Mutex::new(HashMap::new()),
            node_rpc: tokio::sync::Mutex::new(HashMap::new()),
            granting: tokio::sync::Mutex::new(()),
            vacated: Mutex::new(HashMap::new()),
            shards_changed: Mutex::new(0),
        };
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

    /// The cluster as `instance`'s agents see it.
    pub fn map(&self, instance: &str) -> Result<ClusterMap, ManagerError> {
        let s = self.state.lock();
        let inst = instance_in(&s, instance)?;
        Ok(ClusterMap {
            cluster_id: s.cluster_id.clone(),
            version: s.map_version,
            shards: inst.shards.clone(),
            agents: s
                .agents
                .values()
                .filter(|a| a.instance == instance)
                .map(|a| AgentInfo {
                    id: a.id,
                    listen: a.listen.clone(),
                })
                .collect(),
            pool: PoolSpec {
                transport: self.pool.transport,
                nodes: s.nodes.values().map(|n| n.endpoint.clone()).collect(),
                node_ids: s.nodes.keys().copied().collect(),
                replicas: self.pool.replicas,
                region_size: self.pool.region_size,
                segment_size: self.pool.segment_size,
            },
            draining: s
                .regions
                .values()
                .filter(|r| r.draining && r.instance == instance)
                .map(|r| r.id)
                .collect(),
            instance: InstanceSpec {
                name: inst.name.clone(),
                maxmemory: inst.maxmemory,
                policy: inst.policy.clone(),
                super_region: inst.super_region,
            },
        })
    }

    /// Records an agent's bytes per region (for the used bytes per memory node).
    pub fn report_regions(&self, agent: AgentId, regions: Vec<(u16, u64)>) {
        self.region_used.lock().insert(agent, regions);
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

    /// Grants `instance` a region: `want` (its superblock's, when an agent formats the
    /// instance's pool) or the lowest id no region or instance holds. Its copies go to the `replicas` live memory nodes
    /// with the most unallocated capacity (so never two on one node), the one that is
    /// primary of the fewest regions first; never beyond the instance's maxmemory.
    pub async fn grant_region(
        &self,
        instance: &str,
        want: Option<u16>,
    ) -> Result<RegionGrant, ManagerError> {
        let _one = self.granting.lock().await;
        let s = self.snapshot();
        let inst = instance_in(&s, instance)?;
        let size = self.pool.region_size.0;
        if let Some(id) = want {
            if s.regions.contains_key(&id) {
                return Err(ManagerError::Exists(format!("region {id}")));
            }
            if id != inst.super_region {
                return Err(ManagerError::Invalid(format!(
                    "instance {instance} may ask for its superblock region {} only, not {id}",
                    inst.super_region
                )));
            }
        }
        let allocated = s.allocated_to(instance);
        if inst.maxmemory.0 > 0 && allocated + size > inst.maxmemory.0.max(size) {
            return Err(ManagerError::Full(format!(
                "instance {instance} holds {allocated} bytes of regions; another {size} \
                 would pass its maxmemory of {}",
                inst.maxmemory.0
            )));
        }
        let mut free: Vec<(u64, u32)> = s
            .nodes
            .values()
            .filter(|n| self.alive(Member::Node(n.id)))
            .map(|n| (n.capacity.0.saturating_sub(s.allocated_on(n.id)), n.id))
            .filter(|(free, _)| *free >= size)
            .collect();
        free.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        if free.len() < self.pool.replicas {
            return Err(ManagerError::Full(format!(
                "{} live memory nodes have room for a {size} byte region; {} copies needed",
                free.len(),
                self.pool.replicas
            )));
        }
        let mut chosen: Vec<u32> = free.iter().take(self.pool.replicas).map(|f| f.1).collect();
        let primaries = |n: u32| s.regions.values().filter(|r| r.primary == n).count();
        if let Some(best) = (0..chosen.len()).min_by_key(|&k| (primaries(chosen[k]), k)) {
            chosen.swap(0, best);
        }
        let free_id = |from: u16| {
            s.free_region_id(from)
                .ok_or_else(|| ManagerError::Full("no free region id".into()))
        };
        let mut id = match want {
            Some(id) => id,
            None => free_id(1)?,
        };
        // A copy that exists already (left by an earlier pool) keeps its id taken.
        loop {
            match self.create_copies(&s, id, size, &chosen).await {
                Ok(()) => break,
                Err(ManagerError::Exists(_)) if want.is_none() => id = free_id(id + 1)?,
                Err(e) => return Err(e),
            }
        }
        let rec = RegionRecord {
            id,
            instance: instance.to_string(),
            primary: chosen[0],
            backups: chosen[1..].to_vec(),
            size: ByteSize(size),
            draining: false,
        };
        self.update(|st| {
            st.regions.insert(id, rec.clone());
            Ok(())
        })?;
        tracing::info!(region = id, instance, primary = rec.primary, backups = ?rec.backups, "granted a region");
        Ok(RegionGrant {
            region: id,
            primary: rec.primary,
            backups: rec.backups,
        })
    }

    /// Creates region `id` on every node of `nodes`, or on none.
    async fn create_copies(
        &self,
        s: &ClusterState,
        id: u16,
        size: u64,
        nodes: &[u32],
    ) -> Result<(), ManagerError> {
        for (k, &n) in nodes.iter().enumerate() {
            let t = self.node_rpc(s, n).await?;
            if let Err(e) = t.create_region(id, size).await {
                for &m in &nodes[..k] {
                    if let Ok(t) = self.node_rpc(s, m).await {
                        let _ = t.drop_region(id).await;
                    }
                }
                return Err(match e {
                    dmc_verbs::VerbsError::RegionExists(_) => {
                        ManagerError::Exists(format!("region {id} on node {n}"))
                    }
                    e => {
                        // A broken connection is reopened next time.
                        self.node_rpc.lock().await.remove(&n);
                        ManagerError::Node {
                            node: n,
                            message: e.to_string(),
                        }
                    }
                });
            }
        }
        Ok(())
    }

    async fn node_rpc(
        &self,
        s: &ClusterState,
        node: u32,
    ) -> Result<std::sync::Arc<dyn dmc_verbs::Transport>, ManagerError> {
        let mut conns = self.node_rpc.lock().await;
        if let Some(t) = conns.get(&node) {
            return Ok(t.clone());
        }
        let rec = s
            .nodes
            .get(&node)
            .ok_or_else(|| ManagerError::NotFound(format!("node {node}")))?;
        let fail = |message: String| ManagerError::Node { node, message };
        let endpoint = rec
            .endpoint
            .parse()
            .map_err(|e: dmc_verbs::VerbsError| fail(e.to_string()))?;
        let t = dmc_verbs::backend::connect(
            dmc_verbs::BackendKind::Tcp,
            endpoint,
            dmc_verbs::RpcOptions::default(),
        )
        .await
        .map_err(|e| fail(e.to_string()))?;
        conns.insert(node, t.clone());
        Ok(t)
    }

    /// Creates an instance: its superblock region id is reserved now (the first agent
    /// of the instance asks for it), its agents are started separately
    /// (`agents scale N --instance NAME`).
    pub async fn create_instance(
        &self,
        name: &str,
        maxmemory: ByteSize,
        policy: &str,
    ) -> Result<Instance, ManagerError> {
        if !dmc_proto::cluster::valid_instance_name(name) {
            return Err(ManagerError::Invalid(format!(
                "{name:?} cannot name an instance: use 1 to 64 letters, digits, '-' or '_'"
            )));
        }
        let shards = self.shard_count;
        // Not while a grant picks a region id: both would take the same lowest one.
        let _one = self.granting.lock().await;
        self.update(|s| {
            if s.instances.contains_key(name) {
                return Err(ManagerError::Exists(format!("instance {name}")));
            }
            let super_region = s
                .free_region_id(1)
                .ok_or_else(|| ManagerError::Full("no free region id".into()))?;
            let inst = Instance::new(name, maxmemory, policy, super_region, shards);
            s.instances.insert(name.to_string(), inst.clone());
            tracing::info!(
                instance = name,
                super_region,
                maxmemory = maxmemory.0,
                policy,
                "created an instance"
            );
            Ok(inst)
        })
    }

    /// Changes an instance's maxmemory and/or policy; agents follow the pushed map
    /// (growing is immediate, shrinking evicts down to the new limit).
    pub fn resize_instance(
        &self,
        name: &str,
        maxmemory: Option<ByteSize>,
        policy: Option<String>,
    ) -> Result<Instance, ManagerError> {
        let size = self.pool.region_size.0;
        self.update(|s| {
            let inst = s
                .instances
                .get_mut(name)
                .ok_or_else(|| ManagerError::NotFound(format!("instance {name}")))?;
            if let Some(m) = maxmemory {
                inst.maxmemory = m;
            }
            if let Some(p) = policy {
                inst.policy = p;
            }
            let inst = inst.clone();
            // Regions past the new maxmemory are vacated by the agents, then returned.
            if inst.maxmemory.0 > 0 {
                let allowed = (inst.maxmemory.0 / size).max(1) as usize;
                let mut active: Vec<u16> = s
                    .regions
                    .values()
                    .filter(|r| r.instance == name && !r.draining)
                    .map(|r| r.id)
                    .collect();
                active.sort_unstable();
                while active.len() > allowed {
                    // Never the superblock's region: it holds the table root.
                    let Some(pos) = active.iter().rposition(|id| *id != inst.super_region) else {
                        break;
                    };
                    let id = active.remove(pos);
                    if let Some(r) = s.regions.get_mut(&id) {
                        r.draining = true;
                        tracing::info!(
                            region = id,
                            instance = name,
                            "draining a region to return it"
                        );
                    }
                }
            }
            Ok(inst)
        })
    }

    /// Records that agent `agent` vacated `region` (moved its part of the table out
    /// and evicted its keys there) while following map `version`.
    pub fn vacated(&self, region: u16, agent: AgentId, version: u64) -> Result<(), ManagerError> {
        if !self
            .state
            .lock()
            .regions
            .get(&region)
            .is_some_and(|r| r.draining)
        {
            return Err(ManagerError::NotFound(format!("draining region {region}")));
        }
        self.vacated
            .lock()
            .entry(region)
            .or_default()
            .insert(agent, version);
        Ok(())
    }

    /// Draining regions every live agent of their instance has vacated under the
    /// current shard map (a rescale after a report means the new owners must vacate
    /// their slots too).
    pub fn vacated_regions(&self) -> Vec<u16> {
        let s = self.snapshot();
        let since = *self.shards_changed.lock();
        let reports = self.vacated.lock();
        s.regions
            .values()
            .filter(|r| r.draining)
            .filter(|r| {
                let got = reports.get(&r.id);
                s.agents_of(&r.instance)
                    .filter(|a| self.alive(Member::Agent(*a)))
                    .all(|a| got.and_then(|g| g.get(&a)).is_some_and(|v| *v >= since))
            })
            .map(|r| r.id)
            .collect()
    }

    /// Returns a vacated region to the memory nodes: drops its copies, clears its
    /// record in its instance's superblock (so no agent learns it again), and forgets
    /// it.
    pub async fn return_region(&self, id: u16) -> Result<(), ManagerError> {
        let s = self.snapshot();
        let rec = s
            .regions
            .get(&id)
            .cloned()
            .ok_or_else(|| ManagerError::NotFound(format!("region {id}")))?;
        let super_region = s.instances.get(&rec.instance).map(|i| i.super_region);
        if let Some(sb) = super_region.and_then(|r| s.regions.get(&r)) {
            let zero = [0u8; dmc_umo::layout::REGION_ENTRY as usize];
            for n in sb.copies() {
                let t = self.node_rpc(&s, n).await?;
                let mut verbs = [dmc_verbs::Verb::Write {
                    region: sb.id,
                    offset: dmc_umo::RegionRecord::offset(id),
                    data: &zero,
                }];
                t.post(&mut verbs).await.map_err(|e| ManagerError::Node {
                    node: n,
                    message: e.to_string(),
                })?;
            }
        }
        for n in rec.copies() {
            let t = self.node_rpc(&s, n).await?;
            match t.drop_region(id).await {
                Ok(()) | Err(dmc_verbs::VerbsError::NoSuchRegion(_)) => {}
                Err(e) => {
                    return Err(ManagerError::Node {
                        node: n,
                        message: e.to_string(),
                    });
                }
            }
        }
        self.update(|st| {
            st.regions.remove(&id);
            Ok(())
        })?;
        self.vacated.lock().remove(&id);
        tracing::info!(region = id, instance = %rec.instance, "returned a region to the memory nodes");
        Ok(())
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
                super_region: i.super_region,
                agents: s.agents_of(&i.name).count(),
                allocated: s.allocated_to(&i.name),
                used: used.get(&i.name).copied().unwrap_or(0),
                regions: s.regions.values().filter(|r| r.instance == i.name).count(),
            })
            .collect()
    }

    pub fn regions(&self) -> Vec<RegionRecord> {
        self.snapshot().regions.into_values().collect()
    }

    /// `instance`'s map once its version passes `after`, or the current one after
    /// `wait`.
    pub async fn wait_map(
        &self,
        instance: &str,
        after: u64,
        wait: Duration,
    ) -> Result<ClusterMap, ManagerError> {
        self.map(instance)?;
        let mut rx = self.version.subscribe();
        let _ = tokio::time::timeout(wait, rx.wait_for(|v| *v > after)).await;
        self.map(instance)
    }

    pub fn map_version(&self) -> u64 {
        self.state.lock().map_version
    }

    /// Whether every live agent of `instance` (other than `except`) has applied map
    /// `version`.
    pub fn applied_by_all(&self, instance: &str, version: u64, except: &[AgentId]) -> bool {
        let agents: Vec<AgentId> = self.state.lock().agents_of(instance).collect();
        let applied = self.applied.lock();
        agents
            .iter()
            .filter(|a| !except.contains(a) && self.alive(Member::Agent(**a)))
            .all(|a| applied.get(a).is_some_and(|v| *v >= version))
    }

    /// The map version agent `id` last reported applying (0: none yet).
    pub fn applied_version(&self, id: AgentId) -> u64 {
        self.applied.lock().get(&id).copied().unwrap_or(0)
    }

    /// Records that agent `id` applied map `version` (also renews its lease).
    pub fn applied(&self, id: AgentId, version: u64) -> Result<(), ManagerError> {
        self.heartbeat(Member::Agent(id))?;
        let mut applied = self.applied.lock();
        let v = applied.entry(id).or_default();
        *v = (*v).max(version);
        Ok(())
    }

    pub fn record_launch(&self, rec: LaunchRecord) -> Result<(), ManagerError> {
        self.update(|s| {
            s.launched.insert(rec.listen.clone(), rec);
            Ok(())
        })
    }

    pub fn forget_launch(&self, listen: &str) -> Result<(), ManagerError> {
        self.update(|s| {
            s.launched.remove(listen);
            Ok(())
        })
    }

    pub fn snapshot(&self) -> ClusterState {
        self.state.lock().clone()
    }

    pub fn alive(&self, m: Member) -> bool {
        self.seen
            .lock()
            .get(&m)
            .is_some_and(|t| t.elapsed() < self.lease)
    }

    pub fn heartbeat(&self, m: Member) -> Result<(), ManagerError> {
        let known = {
            let s = self.state.lock();
            match m {
                Member::Node(id) => s.nodes.contains_key(&id),
                Member::Agent(id) => s.agents.contains_key(&id),
            }
        };
        if !known {
            return Err(ManagerError::NotFound(format!("{m:?}")));
        }
        self.seen.lock().insert(m, Instant::now());
        Ok(())
    }

    pub fn add_node(
        &self,
        id: u32,
        endpoint: String,
        capacity: ByteSize,
    ) -> Result<(), ManagerError> {
        if endpoint.is_empty() {
            return Err(ManagerError::Invalid("a node needs an endpoint".into()));
        }
        self.update(|s| {
            if s.nodes
                .values()
                .any(|n| n.endpoint == endpoint && n.id != id)
            {
                return Err(ManagerError::Invalid(format!(
                    "{endpoint} is already a node"
                )));
            }
            s.nodes.insert(
                id,
                NodeRecord {
                    id,
                    endpoint,
                    capacity,
                },
            );
            Ok(())
        })?;
        self.seen.lock().insert(Member::Node(id), Instant::now());
        Ok(())
    }

    pub fn remove_node(&self, id: u32) -> Result<(), ManagerError> {
        self.update(|s| {
            s.nodes
                .remove(&id)
                .map(|_| ())
                .ok_or_else(|| ManagerError::NotFound(format!("node {id}")))
        })?;
        self.seen.lock().remove(&Member::Node(id));
        Ok(())
    }

    /// Registers an agent of `instance` serving clients at `listen`, gives it its
    /// share of the instance's shards, and returns its id.
    pub fn register_agent(&self, listen: String, instance: &str) -> Result<AgentId, ManagerError> {
        if listen.is_empty() {
            return Err(ManagerError::Invalid(
                "an agent needs a listen address".into(),
            ));
        }
        let id = self.update(|s| {
            if !s.instances.contains_key(instance) {
                return Err(ManagerError::NotFound(format!("instance {instance}")));
            }
            let id = s.next_agent;
            s.next_agent += 1;
            s.agents.insert(
                id,
                AgentRecord {
                    id,
                    listen,
                    instance: instance.to_string(),
                },
            );
            s.rebalance(instance);
            Ok(id)
        })?;
        self.seen.lock().insert(Member::Agent(id), Instant::now());
        Ok(id)
    }

    /// Removes an agent; its shards go to the others (no key moves).
    pub fn remove_agent(&self, id: AgentId) -> Result<(), ManagerError> {
        self.remove_agents(&[id])
    }

    /// Removes agents in one change, so their instances' shards are re-balanced once.
    pub fn remove_agents(&self, ids: &[AgentId]) -> Result<(), ManagerError> {
        self.update(|s| {
            let mut instances = std::collections::BTreeSet::new();
            for id in ids {
                let a = s
                    .agents
                    .remove(id)
                    .ok_or_else(|| ManagerError::NotFound(format!("agent {id}")))?;
                instances.insert(a.instance);
            }
            for i in instances {
                s.rebalance(&i);
            }
            Ok(())
        })?;
        for id in ids {
            self.seen.lock().remove(&Member::Agent(*id));
            self.applied.lock().remove(id);
        }
        Ok(())
    }

    /// The agent registered at `listen`.
    pub fn agent_at(&self, listen: &str) -> Option<AgentId> {
        self.state
            .lock()
            .agents
            .values()
            .find(|a| a.listen == listen)
            .map(|a| a.id)
    }

    /// The instance agent `id` serves.
    pub fn instance_of(&self, id: AgentId) -> Option<String> {
        self.state
            .lock()
            .agents
            .get(&id)
            .map(|a| a.instance.clone())
    }

    pub fn status(&self) -> Status {
        let s = self.snapshot();
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
                    epoch: sh.epoch,
                }
            })
            .collect())
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

#[cfg(test)]
mod tests {
    use super::*;
    use dmc_proto::cluster::DEFAULT_INSTANCE as D;

    #[test]
    fn membership_and_shards_persist_and_leases_lapse() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let lease = Duration::from_millis(200);
        let m = Manager::open(StateFile::new(&path), 8, lease, PoolSettings::default()).unwrap();
        m.add_node(1, "127.0.0.1:7000".into(), ByteSize(1 << 30))
            .unwrap();
        assert!(
            m.add_node(2, "127.0.0.1:7000".into(), ByteSize(1)).is_err(),
            "duplicate endpoint"
        );
        let a = m.register_agent("127.0.0.1:6379".into(), D).unwrap();
        let b = m.register_agent("127.0.0.1:6380".into(), D).unwrap();
        let st = m.status();
        assert_eq!(st.agents.iter().map(|x| x.shards).sum::<usize>(), 8);
        assert!(st.agents.iter().all(|x| x.shards == 4 && x.alive));
        // Leases lapse without heartbeats, and come back with one.
        std::thread::sleep(Duration::from_millis(300));
        m.heartbeat(Member::Agent(a)).unwrap();
        let st = m.status();
        let alive: Vec<bool> = st.agents.iter().map(|x| x.alive).collect();
        assert_eq!(alive, vec![true, false]);
        assert!(!st.nodes[0].alive);
        assert!(m.heartbeat(Member::Agent(99)).is_err());
        // A restarted manager has the same members and map.
        let before = m.snapshot();
        drop(m);
        let m = Manager::open(StateFile::new(&path), 8, lease, PoolSettings::default()).unwrap();
        assert_eq!(m.snapshot(), before);
        m.remove_agent(b).unwrap();
        assert_eq!(m.status().agents[0].shards, 8);
        assert!(m.slots(D).unwrap().iter().all(|r| r.primary == Some(a)));
        assert!(m.remove_agent(b).is_err());
    }

    #[tokio::test]
    async fn instances_have_their_own_superblock_agents_and_shards() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let lease = Duration::from_secs(5);
        let m = Manager::open(StateFile::new(&path), 8, lease, PoolSettings::default()).unwrap();
        for bad in ["", "a/b", "x y", &"n".repeat(65)] {
            assert!(
                matches!(
                    m.create_instance(bad, ByteSize(1 << 30), "allkeys-lru")
                        .await,
                    Err(ManagerError::Invalid(_))
                ),
                "{bad:?}"
            );
        }
        let b = m
            .create_instance("b", ByteSize(1 << 30), "allkeys-lru")
            .await
            .unwrap();
        let c = m
            .create_instance("c", ByteSize(0), "noeviction")
            .await
            .unwrap();
        assert_eq!(
            (b.super_region, c.super_region),
            (2, 3),
            "region 1 is default's"
        );
        assert!(matches!(
            m.create_instance("b", ByteSize(1), "noeviction").await,
            Err(ManagerError::Exists(_))
        ));
        // Agents of each instance share only their own instance's shards.
        let d1 = m.register_agent("127.0.0.1:1".into(), D).unwrap();
        let b1 = m.register_agent("127.0.0.1:2".into(), "b").unwrap();
        let b2 = m.register_agent("127.0.0.1:3".into(), "b").unwrap();
        assert!(m.register_agent("127.0.0.1:4".into(), "nope").is_err());
        assert!(m.slots(D).unwrap().iter().all(|r| r.primary == Some(d1)));
        let owners: Vec<_> = m.slots("b").unwrap().iter().map(|r| r.primary).collect();
        assert_eq!(owners.iter().filter(|o| **o == Some(b1)).count(), 4);
        assert_eq!(owners.iter().filter(|o| **o == Some(b2)).count(), 4);
        assert!(m.slots("c").unwrap().iter().all(|r| r.primary.is_none()));
        // Each instance's map names its own agents and superblock.
        let map = m.map("b").unwrap();
        assert_eq!(map.instance.super_region, 2);
        assert_eq!(map.instance.policy, "allkeys-lru");
        let ids: Vec<_> = map.agents.iter().map(|a| a.id).collect();
        assert_eq!(ids, vec![b1, b2]);
        assert_eq!(m.map(D).unwrap().agents.len(), 1);
        assert!(m.map("nope").is_err());
        // Removing an agent re-balances its instance only.
        m.remove_agent(b1).unwrap();
        assert!(m.slots("b").unwrap().iter().all(|r| r.primary == Some(b2)));
        assert!(m.slots(D).unwrap().iter().all(|r| r.primary == Some(d1)));
        let st = m.status();
        let inst: Vec<_> = st
            .instances
            .iter()
            .map(|i| (i.name.as_str(), i.agents))
            .collect();
        assert_eq!(inst, vec![("b", 1), ("c", 0), ("default", 1)]);
        // All of it survives a restart.
        let before = m.snapshot();
        drop(m);
        let m = Manager::open(StateFile::new(&path), 8, lease, PoolSettings::default()).unwrap();
        assert_eq!(m.snapshot(), before);
        assert_eq!(m.instance_of(b2).as_deref(), Some("b"));
    }
}
