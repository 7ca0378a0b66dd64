//! What the cluster manager tells every agent: the [`ClusterMap`] (who owns which
//! shards, where each agent listens, and which memory pool the instance lives in). An
//! agent fetches it when it joins and then long-polls for newer versions, so a change
//! reaches every agent within one round trip of being persisted.

use serde::{Deserialize, Serialize};

use crate::ByteSize;
use crate::shards::{AgentId, HASH_SLOTS, ShardMap};

/// How agents reach the memory nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PoolTransport {
    /// Memory nodes on this host, regions mapped into the agent.
    Shm,
    /// Memory nodes reached over TCP.
    Tcp,
    /// Memory nodes reached with one-sided RDMA verbs (agents and nodes built with the
    /// `rdma` feature, on hosts with a device); RPCs still go over TCP.
    Rdma,
}

/// The memory pool an instance's agents open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSpec {
    pub transport: PoolTransport,
    /// Memory node endpoints, in node id order.
    pub nodes: Vec<String>,
    /// The ids of `nodes`, in the same order: with them agents connect on demand.
    #[serde(default)]
    pub node_ids: Vec<u32>,
    pub replicas: usize,
    pub region_size: ByteSize,
    pub segment_size: ByteSize,
}

/// An agent as clients reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub id: AgentId,
    /// `host:port` clients connect to.
    pub listen: String,
    /// Its TLS client port, if it has one: other agents forward to it over TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_listen: Option<String>,
}

/// The cache instance agents serve: its memory limit and eviction policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceSpec {
    pub name: String,
    /// Pool bytes the instance may hold (0: as much as the memory nodes have).
    pub maxmemory: ByteSize,
    /// Redis's `maxmemory-policy` name.
    pub policy: String,
    /// The pool region holding the instance's superblock (its region table and hash
    /// table root): instances share memory nodes, never regions.
    #[serde(default = "default_super_region")]
    pub super_region: u16,
    /// The instance's ACL users as ACL file lines (`user NAME rules...`), and their
    /// version: every agent checks commands against them (0: none set, each agent
    /// keeps its own default user).
    #[serde(default)]
    pub acl: String,
    #[serde(default)]
    pub acl_version: u64,
    /// The instance's function libraries (a JSON array of each library's code) and
    /// their version: every agent installs them (0: none stored, each agent keeps what
    /// it loaded).
    #[serde(default)]
    pub functions: String,
    #[serde(default)]
    pub functions_version: u64,
    /// The scripts loaded with SCRIPT LOAD (a JSON array of their bodies) and their
    /// version: every agent installs them (0: none stored).
    #[serde(default)]
    pub scripts: String,
    #[serde(default)]
    pub scripts_version: u64,
}

impl Default for InstanceSpec {
    fn default() -> Self {
        InstanceSpec {
            name: DEFAULT_INSTANCE.into(),
            maxmemory: ByteSize(0),
            policy: "noeviction".into(),
            super_region: DEFAULT_SUPER_REGION,
            acl: String::new(),
            acl_version: 0,
            functions: String::new(),
            functions_version: 0,
            scripts: String::new(),
            scripts_version: 0,
        }
    }
}

/// The instance a cluster starts with.
pub const DEFAULT_INSTANCE: &str = "default";

/// The default instance's superblock region.
pub const DEFAULT_SUPER_REGION: u16 = 1;

fn default_super_region() -> u16 {
    DEFAULT_SUPER_REGION
}

/// Whether `name` can name an instance: 1 to 64 ASCII letters, digits, `-` or `_`
/// (it appears in URLs, file names and INFO).
pub fn valid_instance_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A region the manager granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionGrant {
    pub region: u16,
    pub primary: u32,
    pub backups: Vec<u32>,
}

/// The cluster as one instance's agents see it: that instance's shards, agents and
/// draining regions. `version` rises with every change of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMap {
    /// The cluster's identity (a manager with another state file is another cluster).
    #[serde(default)]
    pub cluster_id: String,
    pub version: u64,
    pub shards: ShardMap,
    pub agents: Vec<AgentInfo>,
    pub pool: PoolSpec,
    #[serde(default)]
    pub instance: InstanceSpec,
    /// Regions being returned: agents stop allocating in them, move their part of the
    /// table out, evict their keys there, and report.
    #[serde(default)]
    pub draining: Vec<u16>,
    /// The manager's lease (ms): an agent stops writing one lease after its last
    /// accepted heartbeat was sent, before the manager (after one and a half) would let
    /// another agent take its shards (0: an older manager, no deadline).
    #[serde(default)]
    pub lease_ms: u64,
    /// Where the copies of the instance's regions are, its superblock region
    /// included: a region whose node failed loses that copy here (a backup promoted if
    /// it was the primary), and agents stop using it.
    #[serde(default)]
    pub regions: Vec<RegionPlacement>,
}

/// A region's copies: the primary's node and the backups' nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionPlacement {
    pub id: u16,
    pub primary: u32,
    pub backups: Vec<u32>,
    /// Nodes whose copy is being filled (re-replication): agents write there too,
    /// never read there, and log the chunks they write (see [`DirtyChunks`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filling: Vec<u32>,
    /// New writes to the region wait (its roles are being swapped, or a fill is being
    /// finished); reads go on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub frozen: bool,
}

/// The chunks of a region an agent wrote while the region had a copy being filled,
/// reported with its map acknowledgements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirtyChunks {
    pub region: u16,
    pub chunks: Vec<u32>,
}

impl ClusterMap {
    pub fn agent(&self, id: AgentId) -> Option<&AgentInfo> {
        self.agents.iter().find(|a| a.id == id)
    }

    /// The agent that writes `slot` and where it listens.
    pub fn owner(&self, slot: u16) -> Option<&AgentInfo> {
        self.agent(self.shards.owner(slot % HASH_SLOTS)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_follows_the_shard_map() {
        let mut shards = ShardMap::new(4);
        shards.assign(&[7, 9]);
        let map = ClusterMap {
            cluster_id: "c1".into(),
            version: 1,
            shards,
            agents: vec![
                AgentInfo {
                    id: 7,
                    listen: "127.0.0.1:1".into(),
                    tls_listen: None,
                },
                AgentInfo {
                    id: 9,
                    listen: "127.0.0.1:2".into(),
                    tls_listen: None,
                },
            ],
            pool: PoolSpec {
                transport: PoolTransport::Shm,
                nodes: vec![],
                node_ids: vec![],
                replicas: 2,
                region_size: ByteSize(64 << 20),
                segment_size: ByteSize(16 << 20),
            },
            instance: InstanceSpec::default(),
            draining: vec![],
            lease_ms: 0,
            regions: vec![],
        };
        for slot in [0, 5000, 9000, 16383] {
            let want = map.shards.owner(slot).unwrap();
            assert_eq!(map.owner(slot).unwrap().id, want);
        }
        let text = serde_json::to_string(&map).unwrap();
        assert_eq!(serde_json::from_str::<ClusterMap>(&text).unwrap(), map);
    }
}
