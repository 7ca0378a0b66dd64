//! The manager's durable state: memory nodes, agents, and instances with their shard
//! maps and regions, in one JSON file replaced atomically (write a temporary file, fsync it, rename it over
//! the old one, fsync the directory), so a crash leaves either the old or the new state
//! and a restarted manager resumes where it stopped.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use dmc_proto::ByteSize;
use dmc_proto::cluster::{DEFAULT_INSTANCE, DEFAULT_SUPER_REGION};
use dmc_proto::shards::{AgentId, ShardMap};
use serde::{Deserialize, Serialize};

/// The state file's format version. Version 1 (one instance, whose shard map was the
/// cluster's) is read and upgraded.
pub const STATE_VERSION: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{context} {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid state file: {message}")]
    Corrupt { path: PathBuf, message: String },
}

/// A memory node the operator added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub id: u32,
    /// `host:port` or `unix:/path` of its RPC endpoint.
    pub endpoint: String,
    pub capacity: ByteSize,
    /// Being emptied (`nodes drain`): no new region copies go there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
}

/// A compute agent the manager knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    pub id: AgentId,
    /// Where clients reach it (`host:port`).
    pub listen: String,
    /// The instance it serves.
    #[serde(default = "default_instance")]
    pub instance: String,
    /// Its TLS client port, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_listen: Option<String>,
    /// The client id its pool presents to memory nodes (0: none), which a failover
    /// revokes.
    #[serde(default)]
    pub client: u64,
}

/// The instance a record without one belongs to (serde default).
pub(crate) fn default_instance() -> String {
    DEFAULT_INSTANCE.into()
}

/// A cache instance: the pool memory it may use, its eviction policy, the region of
/// its superblock, and its hash slots' shards (served by its own agents).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    pub name: String,
    pub maxmemory: ByteSize,
    pub policy: String,
    pub super_region: u16,
    pub shards: ShardMap,
    /// Backup agents per shard: they keep the shard's hot keys in their caches, fed by
    /// its primary, and take it over first when it dies.
    #[serde(default)]
    pub backups: u32,
    /// The instance's ACL users (ACL file lines) and their version (0: never set).
    #[serde(default)]
    pub acl: String,
    #[serde(default)]
    pub acl_version: u64,
    /// The instance's function libraries (a JSON array of their code) and their version
    /// (0: never set).
    #[serde(default)]
    pub functions: String,
    #[serde(default)]
    pub functions_version: u64,
    /// The scripts loaded with SCRIPT LOAD (a JSON array of their bodies) and their
    /// version (0: never set).
    #[serde(default)]
    pub scripts: String,
    #[serde(default)]
    pub scripts_version: u64,
}

impl Instance {
    pub fn new(
        name: &str,
        maxmemory: ByteSize,
        policy: &str,
        super_region: u16,
        shards: u32,
    ) -> Self {
        Instance {
            name: name.into(),
            maxmemory,
            policy: policy.into(),
            super_region,
            shards: ShardMap::new(shards),
            backups: 0,
            acl: String::new(),
            acl_version: 0,
            functions: String::new(),
            functions_version: 0,
            scripts: String::new(),
            scripts_version: 0,
        }
    }
}

/// A pool region the manager granted to an instance, with where its copies are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionRecord {
    pub id: u16,
    pub instance: String,
    pub primary: u32,
    pub backups: Vec<u32>,
    pub size: ByteSize,
    /// Being vacated by the instance's agents before it is returned to the pool.
    #[serde(default)]
    pub draining: bool,
    /// Nodes whose copy is being filled (re-replication or a drain): created, written
    /// by every agent, not complete yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filling: Vec<u32>,
    /// New writes wait: its roles are being swapped or a fill is being finished.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub frozen: bool,
}

impl RegionRecord {
    /// The complete copies: the primary, then the backups.
    pub fn copies(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.primary).chain(self.backups.iter().copied())
    }

    /// Every node holding a copy of the region, complete or being filled.
    pub fn holders(&self) -> impl Iterator<Item = u32> + '_ {
        self.copies().chain(self.filling.iter().copied())
    }
}

/// An agent process the manager's launcher started, so that `agents scale` can stop
/// it again, also after a manager restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchRecord {
    /// Where it serves clients (`host:port`); it registers under this address.
    pub listen: String,
    pub pid: u32,
    pub log: PathBuf,
    /// Unix milliseconds when it was started: `agents scale` stops the newest first.
    #[serde(default)]
    pub started_ms: u64,
    /// The instance it was started for.
    #[serde(default = "default_instance")]
    pub instance: String,
    /// The process's start time (clock ticks since boot, `/proc/PID/stat`), so a pid
    /// reused by another process after a manager restart is never signalled.
    #[serde(default)]
    pub proc_start: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    pub version: u32,
    /// Chosen when the cluster is created: an agent that finds a different one behind
    /// its manager's URL is talking to another cluster, and leaves.
    #[serde(default)]
    pub cluster_id: String,
    pub nodes: BTreeMap<u32, NodeRecord>,
    pub agents: BTreeMap<AgentId, AgentRecord>,
    pub next_agent: AgentId,
    pub instances: BTreeMap<String, Instance>,
    /// Version of the cluster map agents see; rises with every saved change.
    #[serde(default)]
    pub map_version: u64,
    /// Agents the launcher started, by listen address.
    #[serde(default)]
    pub launched: BTreeMap<String, LaunchRecord>,
    /// Regions granted to instances.
    #[serde(default)]
    pub regions: BTreeMap<u16, RegionRecord>,
    /// Region migrations under way: region → the node taking its primary role (the
    /// region is frozen meanwhile). A restarted manager finishes them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub migrations: BTreeMap<u16, u32>,
}

impl ClusterState {
    /// Bytes of region copies on memory node `node`.
    pub fn allocated_on(&self, node: u32) -> u64 {
        self.regions
            .values()
            .filter(|r| r.holders().any(|n| n == node))
            .map(|r| r.size.0)
            .sum()
    }

    /// The agents serving `instance`.
    pub fn agents_of<'a>(&'a self, instance: &'a str) -> impl Iterator<Item = AgentId> + 'a {
        self.agents
            .values()
            .filter(move |a| a.instance == instance)
            .map(|a| a.id)
    }

    /// Gives `instance`'s shards to its agents, evenly (no key moves; a dead primary's
    /// shards go to their backups first), and each shard its backup agents.
    pub fn rebalance(&mut self, instance: &str) {
        self.rebalance_except(instance, &[]);
    }

    /// [`rebalance`](Self::rebalance), the agents in `warming` taking no primary yet
    /// (they back shards up while their caches fill), unless no other agent is left.
    pub fn rebalance_except(&mut self, instance: &str, warming: &[AgentId]) {
        let agents: Vec<AgentId> = self.agents_of(instance).collect();
        let mut primaries: Vec<AgentId> = agents
            .iter()
            .copied()
            .filter(|a| !warming.contains(a))
            .collect();
        if primaries.is_empty() {
            primaries = agents.clone();
        }
        if let Some(i) = self.instances.get_mut(instance) {
            i.shards.assign(&primaries);
            i.shards.assign_backups(&agents, i.backups as usize);
        }
    }

    /// Whether region id `id` is taken: granted, or some instance's superblock region.
    pub fn region_taken(&self, id: u16) -> bool {
        self.regions.contains_key(&id) || self.instances.values().any(|i| i.super_region == id)
    }

    /// The lowest region id from `from` up that nothing holds and a pool's superblock
    /// can describe.
    pub fn free_region_id(&self, from: u16) -> Option<u16> {
        (from..=dmc_umo::layout::MAX_REGIONS as u16).find(|id| !self.region_taken(*id))
    }

    /// Bytes of regions granted to `instance` (one copy each).
    pub fn allocated_to(&self, instance: &str) -> u64 {
        self.regions
            .values()
            .filter(|r| r.instance == instance)
            .map(|r| r.size.0)
            .sum()
    }
}

impl ClusterState {
    /// A fresh cluster with `shards` logical shards and nothing else.
    pub fn new(shards: u32) -> ClusterState {
        ClusterState {
            version: STATE_VERSION,
            cluster_id: new_cluster_id(),
            nodes: BTreeMap::new(),
            agents: BTreeMap::new(),
            next_agent: 1,
            instances: BTreeMap::from([(
                DEFAULT_INSTANCE.to_string(),
                Instance::new(
                    DEFAULT_INSTANCE,
                    ByteSize(0),
                    "noeviction",
                    DEFAULT_SUPER_REGION,
                    shards,
                ),
            )]),
            map_version: 1,
            launched: BTreeMap::new(),
            regions: BTreeMap::new(),
            migrations: BTreeMap::new(),
        }
    }
}

/// A random 16-hex-digit cluster id.
pub fn new_cluster_id() -> String {
    dmc_proto::rng::hex_id(16)
}

/// Upgrades a version 1 state in place: its one shard map becomes the default
/// instance's, whose superblock is region 1. Other instances (recorded, never served)
/// get empty shard maps and a superblock region chosen after parsing (0 here).
fn upgrade(v: &mut serde_json::Value) {
    if v["version"].as_u64() != Some(1) {
        return;
    }
    let shards = v
        .as_object_mut()
        .and_then(|o| o.remove("shards"))
        .unwrap_or_default();
    let count = shards["shards"].as_array().map_or(1, |s| s.len().max(1)) as u32;
    if let Some(instances) = v["instances"].as_object_mut() {
        for (name, inst) in instances.iter_mut() {
            let default = name == DEFAULT_INSTANCE;
            inst["super_region"] = if default { DEFAULT_SUPER_REGION } else { 0 }.into();
            inst["shards"] = if default {
                shards.clone()
            } else {
                serde_json::to_value(ShardMap::new(count)).unwrap_or_default()
            };
        }
    }
    v["version"] = STATE_VERSION.into();
}

/// Where the state lives on disk.
#[derive(Debug, Clone)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    pub fn new(path: impl Into<PathBuf>) -> StateFile {
        StateFile { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved state, or `None` if there is none yet.
    pub fn load(&self) -> Result<Option<ClusterState>, StateError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StateError::Io {
                    context: "reading",
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let corrupt = |e: serde_json::Error| StateError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        };
        let mut value: serde_json::Value = serde_json::from_str(&text).map_err(corrupt)?;
        upgrade(&mut value);
        let mut state: ClusterState = serde_json::from_value(value).map_err(corrupt)?;
        // Instances an upgrade left without a superblock region get the lowest free one.
        let unplaced: Vec<String> = state
            .instances
            .values()
            .filter(|i| i.super_region == 0)
            .map(|i| i.name.clone())
            .collect();
        for name in unplaced {
            let id = state.free_region_id(1).ok_or_else(|| StateError::Corrupt {
                path: self.path.clone(),
                message: "no free region id for an instance's superblock".into(),
            })?;
            if let Some(i) = state.instances.get_mut(&name) {
                i.super_region = id;
            }
        }
        if state.version != STATE_VERSION {
            return Err(StateError::Corrupt {
                path: self.path.clone(),
                message: format!(
                    "format version {}, this build reads {STATE_VERSION}",
                    state.version
                ),
            });
        }
        Ok(Some(state))
    }

    /// Replaces the saved state atomically and durably.
    pub fn save(&self, state: &ClusterState) -> Result<(), StateError> {
        let io = |context: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| StateError::Io {
                context,
                path,
                source,
            }
        };
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let tmp = self.path.with_extension("tmp");
        let text = serde_json::to_vec_pretty(state).map_err(|e| StateError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        {
            // The state names every member and region: readable by this user only.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io("creating", &tmp))?;
            f.write_all(&text).map_err(io("writing", &tmp))?;
            f.sync_all().map_err(io("syncing", &tmp))?;
        }
        std::fs::rename(&tmp, &self.path).map_err(io("replacing", &self.path))?;
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io("syncing directory", &dir))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_survives_a_save_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(dir.path().join("cluster.json"));
        assert_eq!(file.load().unwrap(), None, "nothing saved yet");
        let mut s = ClusterState::new(64);
        s.nodes.insert(
            1,
            NodeRecord {
                id: 1,
                endpoint: "127.0.0.1:7000".into(),
                capacity: ByteSize(4 << 30),
                draining: false,
            },
        );
        s.agents.insert(
            1,
            AgentRecord {
                id: 1,
                listen: "127.0.0.1:6379".into(),
                instance: DEFAULT_INSTANCE.into(),
                tls_listen: None,
                client: 0,
            },
        );
        s.rebalance(DEFAULT_INSTANCE);
        file.save(&s).unwrap();
        assert_eq!(file.load().unwrap(), Some(s.clone()));
        // A second save replaces the first; no temporary file is left behind.
        s.agents.clear();
        s.rebalance(DEFAULT_INSTANCE);
        file.save(&s).unwrap();
        assert_eq!(file.load().unwrap(), Some(s));
        assert!(!dir.path().join("cluster.tmp").exists());
    }

    #[test]
    fn corrupt_or_foreign_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.json");
        std::fs::write(&path, "{not json").unwrap();
        assert!(matches!(
            StateFile::new(&path).load(),
            Err(StateError::Corrupt { .. })
        ));
        let mut s = ClusterState::new(4);
        s.version = 99;
        std::fs::write(&path, serde_json::to_string(&s).unwrap()).unwrap();
        let err = StateFile::new(&path).load().unwrap_err().to_string();
        assert!(err.contains("format version 99"), "{err}");
    }

    #[test]
    fn a_version_1_state_becomes_the_default_instance() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.json");
        let mut shards = ShardMap::new(8);
        shards.assign(&[3]);
        let v1 = serde_json::json!({
            "version": 1,
            "cluster_id": "c1",
            "nodes": {},
            "agents": {"3": {"id": 3, "listen": "127.0.0.1:6380"}},
            "next_agent": 4,
            "instances": {
                "default": {"name": "default", "maxmemory": 1024, "policy": "allkeys-lru"},
                "old": {"name": "old", "maxmemory": 1024, "policy": "noeviction"},
            },
            "regions": {"2": {"id": 2, "instance": "default", "primary": 1, "backups": [], "size": 1024}},
            "shards": shards,
            "map_version": 9,
        });
        std::fs::write(&path, v1.to_string()).unwrap();
        let s = StateFile::new(&path).load().unwrap().unwrap();
        assert_eq!(s.version, STATE_VERSION);
        let d = &s.instances[DEFAULT_INSTANCE];
        assert_eq!((d.super_region, &d.shards), (DEFAULT_SUPER_REGION, &shards));
        assert_eq!(s.agents[&3].instance, DEFAULT_INSTANCE);
        assert_eq!(
            s.instances["old"].super_region, 3,
            "regions 1 and 2 are taken"
        );
        assert_eq!(s.instances["old"].shards.shards.len(), 8, "as many shards");
        assert_eq!(s.map_version, 9);
    }
}
