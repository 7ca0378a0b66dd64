//! The agent's Prometheus metrics: the command-latency histograms the connection loop
//! records (one handle per command family, resolved once), and the collect step that
//! copies the engine's counters (the ones INFO reads too) into the recorder at scrape
//! time. Names come from `dmc_proto::metrics::agent`; served by [`crate::run`] on
//! `metrics-listen`. It never changes what it reads.

use std::sync::atomic::Ordering;
use std::time::Duration;

use dmc_engine::Engine;
use dmc_engine::table::Family;
use dmc_process::metrics::{agent, set_counter as counter, set_gauge as gauge, set_labelled_gauge};
use metrics::Histogram;

/// Command latency per family, one histogram handle each, so the hot path records
/// without looking a metric up.
pub struct CommandTimers {
    by_family: [Histogram; 19],
}

impl CommandTimers {
    pub fn new() -> CommandTimers {
        let h = |family: &'static str| metrics::histogram!(agent::COMMAND_DURATION.name, "family" => family);
        CommandTimers {
            by_family: [
                h("server"),
                h("strings"),
                h("keys"),
                h("introspect"),
                h("cluster"),
                h("internal"),
                h("hashes"),
                h("lists"),
                h("sets"),
                h("zsets"),
                h("transactions"),
                h("scripting"),
                h("pubsub"),
                h("bitmaps"),
                h("hyperloglog"),
                h("geo"),
                h("sort"),
                h("dump"),
                h("streams"),
            ],
        }
    }

    /// Records `count` commands of `family` that took `took` each.
    pub fn record(&self, family: Family, took: Duration, count: usize) {
        let i = match family {
            Family::Server => 0,
            Family::Strings => 1,
            Family::Keys => 2,
            Family::Introspect => 3,
            Family::Cluster => 4,
            Family::Internal => 5,
            Family::Hashes => 6,
            Family::Lists => 7,
            Family::Sets => 8,
            Family::ZSets => 9,
            Family::Transactions => 10,
            Family::Scripting => 11,
            Family::PubSub => 12,
            Family::Bitmaps => 13,
            Family::HyperLogLog => 14,
            Family::Geo => 15,
            Family::Sort => 16,
            Family::Dump => 17,
            Family::Streams => 18,
        };
        self.by_family[i].record_many(took.as_secs_f64(), count);
    }
}

impl Default for CommandTimers {
    fn default() -> Self {
        Self::new()
    }
}

/// Copies the engine's counters into the recorder (run before every scrape).
pub fn collect(engine: &Engine) {
    let d = engine.dht.stats();
    let p = engine.dht.pool_stats();
    let c = engine.cache.as_ref().map(|c| c.stats()).unwrap_or_default();
    let st = &engine.stats;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    gauge(agent::CONNECTED_CLIENTS, load(&st.connected_clients));
    counter(agent::CONNECTIONS_RECEIVED, load(&st.connections_received));
    counter(agent::REJECTED_CONNECTIONS, load(&st.rejected_connections));
    counter(agent::COMMANDS, load(&st.commands));
    counter(agent::FORWARDED_COMMANDS, load(&st.forwarded_commands));
    counter(agent::KEYSPACE_HITS, d.hits);
    counter(agent::KEYSPACE_MISSES, d.misses);
    counter(agent::EVICTED_KEYS, d.evicted);
    counter(agent::EXPIRED_KEYS, d.expired);
    gauge(agent::KEYS, d.keys.max(0) as u64);
    gauge(agent::USED_MEMORY, d.used_memory);
    gauge(agent::MAXMEMORY, engine.dht.maxmemory());
    gauge(agent::POOL_CONNECTIONS, load(&st.pool_connections));
    gauge(agent::POOL_REGIONS, u64::from(p.regions));
    counter(agent::TABLE_SPLITS, d.splits);
    counter(agent::TABLE_RETRIES, d.retries);
    counter(agent::RECOVERED_COMMITS, d.recovered_commits);
    counter(agent::REPAIRED_META, d.repaired_meta);
    counter(agent::ACCESSES_DROPPED, d.accesses_dropped);
    counter(agent::POOL_FROZEN_WAITS, p.frozen_waits);
    counter(agent::POOL_FAILOVER_RETRIES, p.failover_retries);
    counter(agent::POOL_LEASE_REFUSALS, p.lease_refusals);
    let traffic = dmc_verbs::stats::traffic();
    let verbs = traffic.total();
    counter(agent::POOL_POSTS, verbs.posts);
    counter(agent::POOL_VERBS, verbs.verbs());
    counter(agent::POOL_VERB_BYTES, verbs.bytes);
    counter(agent::POOL_RPCS, traffic.rpcs);
    counter(agent::POOL_RPC_BYTES_SENT, traffic.rpc_bytes_sent);
    counter(agent::POOL_RPC_BYTES_RECEIVED, traffic.rpc_bytes_received);
    gauge(agent::LOCAL_CACHE_KEYS, c.keys);
    gauge(agent::LOCAL_CACHE_BYTES, c.bytes);
    counter(agent::LOCAL_CACHE_HITS, c.hits);
    counter(agent::LOCAL_CACHE_MISSES, c.misses);
    gauge(agent::LOCAL_CACHE_WARM_KEYS, c.warm);
    counter(agent::WARM_FED, load(&st.warm_fed));
    counter(agent::WARM_FEED_DROPPED, load(&st.warm_feed_dropped));
    counter(agent::WARM_CONFIRMED, load(&st.warm_confirmed));
    counter(agent::WARM_STALE, load(&st.warm_stale));
    let adaptive = engine.dht.adaptive_status();
    for (expert, weight) in adaptive.weights {
        set_labelled_gauge(agent::ADAPTIVE_WEIGHT, "expert", expert, weight);
    }
    counter(agent::ADAPTIVE_REGRETS, adaptive.regrets);
}
