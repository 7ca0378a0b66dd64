//! The agent's Prometheus metrics, read from the engine's counters at scrape time.
//! Served by [`crate::run`] on `metrics-listen`; it never changes what it reads.

use std::sync::atomic::Ordering;

use dmc_engine::Engine;

/// The agent's Prometheus metrics.
pub fn metrics(engine: &Engine) -> Vec<dmc_process::Metric> {
    use dmc_process::Metric;
    let m = |name, help, kind, value: u64| Metric {
        name,
        help,
        kind,
        value: value as f64,
    };
    let d = engine.dht.stats();
    let p = engine.dht.pool_stats();
    let c = engine.cache.as_ref().map(|c| c.stats()).unwrap_or_default();
    let st = &engine.stats;
    vec![
        m(
            "dmc_agent_connected_clients",
            "Client connections open.",
            "gauge",
            st.connected_clients.load(Ordering::Relaxed),
        ),
        m(
            "dmc_agent_connections_received_total",
            "Client connections accepted.",
            "counter",
            st.connections_received.load(Ordering::Relaxed),
        ),
        m(
            "dmc_agent_rejected_connections_total",
            "Connections refused over maxclients.",
            "counter",
            st.rejected_connections.load(Ordering::Relaxed),
        ),
        m(
            "dmc_agent_commands_total",
            "Commands executed.",
            "counter",
            st.commands.load(Ordering::Relaxed),
        ),
        m(
            "dmc_agent_keyspace_hits_total",
            "Reads that found their key in the pool.",
            "counter",
            d.hits,
        ),
        m(
            "dmc_agent_keyspace_misses_total",
            "Reads that did not find their key.",
            "counter",
            d.misses,
        ),
        m(
            "dmc_agent_evicted_keys_total",
            "Keys evicted to stay under maxmemory.",
            "counter",
            d.evicted,
        ),
        m(
            "dmc_agent_expired_keys_total",
            "Expired keys reclaimed.",
            "counter",
            d.expired,
        ),
        m(
            "dmc_agent_keys",
            "Keys in the hash slots this agent owns.",
            "gauge",
            d.keys.max(0) as u64,
        ),
        m(
            "dmc_agent_used_memory_bytes",
            "Pool bytes in use by this instance.",
            "gauge",
            d.used_memory,
        ),
        m(
            "dmc_agent_maxmemory_bytes",
            "The maxmemory setting (0: unlimited).",
            "gauge",
            engine.dht.maxmemory(),
        ),
        m(
            "dmc_agent_pool_connections",
            "Memory nodes this agent is connected to now (opened on first use).",
            "gauge",
            st.pool_connections.load(Ordering::Relaxed),
        ),
        m(
            "dmc_agent_pool_regions",
            "Regions of the pool.",
            "gauge",
            p.regions as u64,
        ),
        m(
            "dmc_agent_table_splits_total",
            "Hash-table subtable splits.",
            "counter",
            d.splits,
        ),
        m(
            "dmc_agent_table_retries_total",
            "Optimistic retries in the hash table.",
            "counter",
            d.retries,
        ),
        m(
            "dmc_agent_local_cache_keys",
            "Keys in the local DRAM cache.",
            "gauge",
            c.keys,
        ),
        m(
            "dmc_agent_local_cache_bytes",
            "Bytes in the local DRAM cache.",
            "gauge",
            c.bytes,
        ),
        m(
            "dmc_agent_local_cache_hits_total",
            "Reads served by the local cache.",
            "counter",
            c.hits,
        ),
        m(
            "dmc_agent_local_cache_misses_total",
            "Reads the local cache could not serve.",
            "counter",
            c.misses,
        ),
    ]
}
