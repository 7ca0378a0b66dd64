//! Every metric a DMC process exports: name, type and help text, one list per process.
//!
//! The processes (and the libraries that record for them, such as the memory node's
//! request loop in `dmc-verbs`) record under these names through the constants, never
//! a literal, and describe them to the recorder at start (`dmc_process::metrics`);
//! operators' dashboards read them. A name is
//! declared here once; the tests below keep the names unique across processes, each
//! under its process's prefix, and shaped as Prometheus expects (counters end in
//! `_total`, histograms in `_seconds`).

/// A metric's Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    /// A latency histogram in seconds.
    Histogram,
}

/// One metric: its name, type and help text.
#[derive(Debug, Clone, Copy)]
pub struct Desc {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

const fn c(name: &'static str, help: &'static str) -> Desc {
    Desc {
        name,
        kind: Kind::Counter,
        help,
    }
}

const fn g(name: &'static str, help: &'static str) -> Desc {
    Desc {
        name,
        kind: Kind::Gauge,
        help,
    }
}

const fn h(name: &'static str, help: &'static str) -> Desc {
    Desc {
        name,
        kind: Kind::Histogram,
        help,
    }
}

/// The compute agent's metrics.
pub mod agent {
    use super::{Desc, c, g, h};

    pub const CONNECTED_CLIENTS: Desc =
        g("dmc_agent_connected_clients", "Client connections open.");
    pub const CONNECTIONS_RECEIVED: Desc = c(
        "dmc_agent_connections_received_total",
        "Client connections accepted.",
    );
    pub const REJECTED_CONNECTIONS: Desc = c(
        "dmc_agent_rejected_connections_total",
        "Connections refused over maxclients.",
    );
    pub const COMMANDS: Desc = c("dmc_agent_commands_total", "Commands executed.");
    pub const FORWARDED_COMMANDS: Desc = c(
        "dmc_agent_forwarded_commands_total",
        "Writes forwarded to the agent owning their slot (proxy mode).",
    );
    pub const COMMAND_DURATION: Desc = h(
        "dmc_agent_command_duration_seconds",
        "Time from a command's parse to its reply, by command family (label `family`).",
    );
    pub const KEYSPACE_HITS: Desc = c(
        "dmc_agent_keyspace_hits_total",
        "Reads that found their key in the pool.",
    );
    pub const KEYSPACE_MISSES: Desc = c(
        "dmc_agent_keyspace_misses_total",
        "Reads that did not find their key.",
    );
    pub const EVICTED_KEYS: Desc = c(
        "dmc_agent_evicted_keys_total",
        "Keys evicted to stay under maxmemory.",
    );
    pub const EXPIRED_KEYS: Desc = c("dmc_agent_expired_keys_total", "Expired keys reclaimed.");
    pub const KEYS: Desc = g("dmc_agent_keys", "Keys in the hash slots this agent owns.");
    pub const USED_MEMORY: Desc = g(
        "dmc_agent_used_memory_bytes",
        "Pool bytes in use by this instance.",
    );
    pub const MAXMEMORY: Desc = g(
        "dmc_agent_maxmemory_bytes",
        "The maxmemory setting (0: unlimited).",
    );
    pub const POOL_CONNECTIONS: Desc = g(
        "dmc_agent_pool_connections",
        "Memory nodes this agent is connected to now (opened on first use).",
    );
    pub const POOL_REGIONS: Desc = g("dmc_agent_pool_regions", "Regions of the pool.");
    pub const TABLE_SPLITS: Desc = c(
        "dmc_agent_table_splits_total",
        "Hash-table subtable splits.",
    );
    pub const TABLE_RETRIES: Desc = c(
        "dmc_agent_table_retries_total",
        "Optimistic retries in the hash table.",
    );
    pub const RECOVERED_COMMITS: Desc = c(
        "dmc_agent_recovered_commits_total",
        "Slot words a stopped single-key commit left locked, rolled forward or undone.",
    );
    pub const REPAIRED_META: Desc = c(
        "dmc_agent_repaired_meta_total",
        "Backup slot metadata words set to the primary's at a shard takeover.",
    );
    pub const ACCESSES_DROPPED: Desc = c(
        "dmc_agent_accesses_dropped_total",
        "Key accesses not applied to access-metadata entries (too many queued).",
    );
    pub const POOL_FROZEN_WAITS: Desc = c(
        "dmc_agent_pool_frozen_waits_total",
        "Pool writes that found their region frozen (its copies being moved) and waited.",
    );
    pub const POOL_FAILOVER_RETRIES: Desc = c(
        "dmc_agent_pool_failover_retries_total",
        "Pool operations retried on new copies after a memory node failed under them.",
    );
    pub const POOL_POSTS: Desc = c(
        "dmc_agent_pool_posts_total",
        "Batches of one-sided verbs posted to memory nodes (one doorbell each; one RPC each over tcp).",
    );
    pub const POOL_VERBS: Desc = c(
        "dmc_agent_pool_verbs_total",
        "One-sided verbs (READ, WRITE, CAS, FAA) sent to memory nodes.",
    );
    pub const POOL_VERB_BYTES: Desc = c(
        "dmc_agent_pool_verb_bytes_total",
        "Bytes read and written by one-sided verbs.",
    );
    pub const POOL_RPCS: Desc = c(
        "dmc_agent_pool_rpcs_total",
        "RPCs sent to memory nodes (commits, region management, tcp verb batches).",
    );
    pub const POOL_RPC_BYTES_SENT: Desc = c(
        "dmc_agent_pool_rpc_bytes_sent_total",
        "Bytes of RPC frames sent to memory nodes.",
    );
    pub const POOL_RPC_BYTES_RECEIVED: Desc = c(
        "dmc_agent_pool_rpc_bytes_received_total",
        "Bytes of RPC frames received from memory nodes.",
    );
    pub const POOL_LEASE_REFUSALS: Desc = c(
        "dmc_agent_pool_lease_refusals_total",
        "Pool writes refused because the agent's lease with the manager had lapsed.",
    );
    pub const LOCAL_CACHE_KEYS: Desc = g(
        "dmc_agent_local_cache_keys",
        "Keys in the local DRAM cache.",
    );
    pub const LOCAL_CACHE_BYTES: Desc = g(
        "dmc_agent_local_cache_bytes",
        "Bytes in the local DRAM cache.",
    );
    pub const LOCAL_CACHE_HITS: Desc = c(
        "dmc_agent_local_cache_hits_total",
        "Reads served by the local cache.",
    );
    pub const LOCAL_CACHE_MISSES: Desc = c(
        "dmc_agent_local_cache_misses_total",
        "Reads the local cache could not serve.",
    );
    pub const LOCAL_CACHE_WARM_KEYS: Desc = g(
        "dmc_agent_local_cache_warm_keys",
        "Keys of backed-up shards in the local cache, fed by their primaries and not yet revalidated (never served).",
    );
    pub const WARM_FED: Desc = c(
        "dmc_agent_warm_fed_total",
        "Cache updates received from the primaries of shards this agent backs up.",
    );
    pub const WARM_FEED_DROPPED: Desc = c(
        "dmc_agent_warm_feed_dropped_total",
        "Cache updates for backup agents this agent could not deliver (queue full, backup unreachable).",
    );
    pub const WARM_CONFIRMED: Desc = c(
        "dmc_agent_warm_confirmed_total",
        "Warm keys a shard takeover found equal to the pool (served at once).",
    );
    pub const WARM_STALE: Desc = c(
        "dmc_agent_warm_stale_total",
        "Warm keys a shard takeover found changed or deleted in the pool (replaced or dropped).",
    );
    pub const ADAPTIVE_WEIGHT: Desc = g(
        "dmc_agent_adaptive_weight",
        "Each expert's weight in maxmemory-policy adaptive (label `expert`).",
    );
    pub const ADAPTIVE_REGRETS: Desc = c(
        "dmc_agent_adaptive_regrets_total",
        "Misses on keys the adaptive policy evicted, charged to the experts that chose them.",
    );

    pub const ALL: &[Desc] = &[
        CONNECTED_CLIENTS,
        CONNECTIONS_RECEIVED,
        REJECTED_CONNECTIONS,
        COMMANDS,
        FORWARDED_COMMANDS,
        COMMAND_DURATION,
        KEYSPACE_HITS,
        KEYSPACE_MISSES,
        EVICTED_KEYS,
        EXPIRED_KEYS,
        KEYS,
        USED_MEMORY,
        MAXMEMORY,
        POOL_CONNECTIONS,
        POOL_REGIONS,
        TABLE_SPLITS,
        TABLE_RETRIES,
        RECOVERED_COMMITS,
        REPAIRED_META,
        ACCESSES_DROPPED,
        POOL_FROZEN_WAITS,
        POOL_FAILOVER_RETRIES,
        POOL_LEASE_REFUSALS,
        POOL_POSTS,
        POOL_VERBS,
        POOL_VERB_BYTES,
        POOL_RPCS,
        POOL_RPC_BYTES_SENT,
        POOL_RPC_BYTES_RECEIVED,
        LOCAL_CACHE_KEYS,
        LOCAL_CACHE_BYTES,
        LOCAL_CACHE_HITS,
        LOCAL_CACHE_MISSES,
        LOCAL_CACHE_WARM_KEYS,
        WARM_FED,
        WARM_FEED_DROPPED,
        WARM_CONFIRMED,
        WARM_STALE,
        ADAPTIVE_WEIGHT,
        ADAPTIVE_REGRETS,
    ];
}

/// The memory node's metrics.
pub mod node {
    use super::{Desc, c, g, h};

    pub const CAPACITY: Desc = g(
        "dmc_node_capacity_bytes",
        "Bytes of regions this node may hold.",
    );
    pub const USED: Desc = g("dmc_node_used_bytes", "Bytes of regions this node holds.");
    pub const REGIONS: Desc = g("dmc_node_regions", "Regions this node holds.");
    pub const PREPARED: Desc = c("dmc_node_prepared_total", "Transactions prepared.");
    pub const COMMITTED: Desc = c("dmc_node_committed_total", "Transactions committed.");
    pub const ABORTED: Desc = c("dmc_node_aborted_total", "Transactions aborted.");
    pub const CONFLICTS: Desc = c(
        "dmc_node_conflicts_total",
        "Prepares refused by a conflict or lock.",
    );
    pub const STALE_EPOCH_REJECTS: Desc = c(
        "dmc_node_stale_epoch_rejects_total",
        "Prepares refused for a stale epoch.",
    );
    pub const RPC_ERRORS: Desc = c(
        "dmc_node_rpc_errors_total",
        "Requests answered with an error.",
    );
    pub const UPTIME: Desc = g("dmc_node_uptime_seconds", "Seconds since the node started.");
    pub const REQUEST_DURATION: Desc = h(
        "dmc_node_request_duration_seconds",
        "Time the node spent serving a request received over the network, by request \
         (label `request`: verbs, prepare, commit, prepare_commit, abort, fence, ...).",
    );
    pub const VERBS: Desc = c(
        "dmc_node_verbs_total",
        "One-sided verbs the node executed for remote clients, by verb (label `verb`: \
         read, write, cas, faa).",
    );
    pub const REVOKED_REQUESTS: Desc = c(
        "dmc_node_revoked_requests_total",
        "Requests refused because the cluster manager revoked their client (a \
         failed-over agent that woke up).",
    );

    pub const ALL: &[Desc] = &[
        CAPACITY,
        USED,
        REGIONS,
        PREPARED,
        COMMITTED,
        ABORTED,
        CONFLICTS,
        STALE_EPOCH_REJECTS,
        RPC_ERRORS,
        UPTIME,
        REQUEST_DURATION,
        VERBS,
        REVOKED_REQUESTS,
    ];
}

/// The cluster manager's metrics.
pub mod manager {
    use super::{Desc, c, g, h};

    pub const NODES: Desc = g(
        "dmc_manager_memory_nodes",
        "Registered memory nodes, by lease state (label `state`: alive, dead).",
    );
    pub const AGENTS: Desc = g(
        "dmc_manager_agents",
        "Registered compute agents, by lease state (label `state`: alive, dead).",
    );
    pub const INSTANCES: Desc = g("dmc_manager_instances", "Cache instances.");
    pub const REGIONS: Desc = g(
        "dmc_manager_regions",
        "Regions granted to instances (superblock regions included).",
    );
    pub const MAP_VERSION: Desc = g(
        "dmc_manager_map_version",
        "Version of the cluster map agents follow.",
    );
    pub const HEARTBEATS: Desc = c(
        "dmc_manager_heartbeats_total",
        "Heartbeats received from memory nodes and agents.",
    );
    pub const AGENT_FAILOVERS: Desc = c(
        "dmc_manager_agent_failovers_total",
        "Agents removed because their lease lapsed, their shards given to live agents.",
    );
    pub const NODE_FAILOVERS: Desc = c(
        "dmc_manager_node_failovers_total",
        "Memory nodes whose lease lapsed, taken out of the region records (backups promoted).",
    );
    pub const REGION_MIGRATIONS: Desc = c(
        "dmc_manager_region_migrations_total",
        "Regions whose primary role moved to a backup (copy-free migration).",
    );
    pub const MIGRATION_WRITE_BLOCK: Desc = h(
        "dmc_manager_migration_write_block_seconds",
        "How long writes to a migrating region waited: from its freeze to every agent following the thawed map.",
    );
    pub const BALANCE_MIGRATIONS: Desc = c(
        "dmc_manager_balance_migrations_total",
        "Primary roles the load balancer moved off memory nodes agents saw as slow.",
    );
    pub const COPIES_FILLED: Desc = c(
        "dmc_manager_copies_filled_total",
        "New region copies filled (re-replication after a node failure, or a drain).",
    );
    pub const BYTES_FILLED: Desc = c(
        "dmc_manager_filled_bytes_total",
        "Bytes copied into new region copies.",
    );
    pub const REGION_GRANTS: Desc = c(
        "dmc_manager_region_grants_total",
        "Regions granted to instances on demand.",
    );
    pub const REGION_GRANT_REFUSALS: Desc = c(
        "dmc_manager_region_grant_refusals_total",
        "Region requests refused (instance at maxmemory, or nodes full).",
    );
    pub const SCALE_OPERATIONS: Desc = c(
        "dmc_manager_scale_operations_total",
        "Agent scale operations finished (label `result`: ok, failed).",
    );
    pub const SCALE_DURATION: Desc = h(
        "dmc_manager_scale_duration_seconds",
        "Time from an agent scale request until every agent followed the new map.",
    );

    pub const ALL: &[Desc] = &[
        NODES,
        AGENTS,
        INSTANCES,
        REGIONS,
        MAP_VERSION,
        HEARTBEATS,
        AGENT_FAILOVERS,
        NODE_FAILOVERS,
        REGION_MIGRATIONS,
        MIGRATION_WRITE_BLOCK,
        BALANCE_MIGRATIONS,
        COPIES_FILLED,
        BYTES_FILLED,
        REGION_GRANTS,
        REGION_GRANT_REFUSALS,
        SCALE_OPERATIONS,
        SCALE_DURATION,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one metric-name uniqueness test: no name twice in or across processes, every
    /// name under its process's prefix and shaped as its type requires.
    #[test]
    fn metric_names_are_unique_prefixed_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for (prefix, list) in [
            ("dmc_agent_", agent::ALL),
            ("dmc_node_", node::ALL),
            ("dmc_manager_", manager::ALL),
        ] {
            for d in list {
                assert!(seen.insert(d.name), "{} declared twice", d.name);
                assert!(
                    d.name.starts_with(prefix),
                    "{} is not under {prefix}",
                    d.name
                );
                assert!(
                    d.name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                    "{} is not a Prometheus name",
                    d.name
                );
                match d.kind {
                    Kind::Counter => assert!(d.name.ends_with("_total"), "{}", d.name),
                    Kind::Histogram => assert!(d.name.ends_with("_seconds"), "{}", d.name),
                    Kind::Gauge => assert!(!d.name.ends_with("_total"), "{}", d.name),
                }
                assert!(!d.help.is_empty() && d.help.ends_with('.'), "{}", d.name);
            }
        }
    }
}
