//! The `compute-agent` process: configuration, the pool it runs on, and the RESP server.
//!
//! `main.rs` parses flags and calls [`run`]; tests call [`run`] the same way. With no
//! configuration the agent listens on 127.0.0.1:6379 over an embedded in-process pool.
//! With `--manager URL` it joins a cluster instead: it registers, opens the pool the
//! manager names, owns the hash slots the cluster map gives it, follows every newer map
//! the manager pushes, and routes writes to their owners ([`routing`]). Once listening
//! it prints `compute-agent ready listen=ADDR` on stdout. On SIGTERM it stops
//! accepting, leaves the cluster, and closes each client connection once its
//! in-flight commands are answered (at most `drain-timeout` seconds).

//!
//! | module | owns |
//! |---|---|
//! | [`config`] | the TOML config, flags and their validation |
//! | [`pool`] | opening the memory pool (embedded, or a cluster's memory nodes) |
//! | [`membership`] | the manager client: retried calls, the first map, the map watcher |
//! | [`routing`] | where a command runs: here, forwarded, `-MOVED`; CLUSTER commands |
//! | [`conn`] | one client connection: parse, batch, execute, reply |
//! | [`metrics`] | Prometheus metrics |
//! | [`tls`] | the TLS client port (rustls) |

pub mod config;
pub mod conn;
pub mod membership;
pub mod metrics;
pub mod pool;
pub mod routing;
pub mod tls;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use dmc_dht::{Dht, DhtConfig, Ownership, RedisPolicy, SystemClock};
use dmc_engine::{Engine, EngineConfig};
use routing::{Router, RoutingMode};
use tokio::io::AsyncWriteExt;

pub use config::{Args, Config, PoolBackend, PoolSection};

use conn::{ConnShared, serve_conn};
use membership::{pool_map, watch_map, with_manager};
use pool::{ManagerRegions, open_pool, pool_from_map};

/// Runs the agent until `shutdown` completes.
pub async fn run(cfg: Config, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
    // A cluster member presents the cluster secret to the manager, the memory nodes
    // and other agents, and demands it of agents forwarding to it.
    let secret = dmc_process::secret::ClusterSecret::load(cfg.secret_file.as_deref())?;
    anyhow::ensure!(
        secret.is_some() || (cfg.manager.is_none() && cfg.pool.backend == PoolBackend::Embedded),
        "an agent of a cluster (a manager or memory nodes) needs the cluster secret: set \
         secret-file (or --secret-file) or DMC_CLUSTER_SECRET"
    );
    dmc_process::secret::install(secret);
    dmc_process::secret::install_manager_ca(cfg.manager_ca_cert_file.as_deref())?;
    let listener = tokio::net::TcpListener::bind((cfg.bind.as_str(), cfg.port))
        .await
        .with_context(|| format!("binding {}:{}", cfg.bind, cfg.port))?;
    let addr = listener.local_addr()?;
    let tls = tls::acceptor(&cfg.tls()).context("setting up TLS")?;
    let tls_listener = match &tls {
        Some(_) => Some(
            tokio::net::TcpListener::bind((cfg.bind.as_str(), cfg.tls_port))
                .await
                .with_context(|| format!("binding tls-port {}:{}", cfg.bind, cfg.tls_port))?,
        ),
        None => None,
    };
    let tls_addr = tls_listener.as_ref().map(|l| l.local_addr()).transpose()?;
    use dmc_process::membership;
    // A cluster member learns its pool from the manager first, and registers (taking
    // its share of slots) only once it can serve them.
    let first_map = match cfg.manager.clone() {
        Some(url) => Some(pool_map(&url, &cfg.instance, &cfg.pool).await?),
        None => None,
    };
    let pool_cfg = match &first_map {
        Some(map) => pool_from_map(&cfg.pool, map),
        None => cfg.pool.clone(),
    };
    // A cluster member's pool grows by regions the manager grants.
    let source = cfg.manager.as_ref().map(|url| {
        Arc::new(ManagerRegions {
            url: url.clone(),
            instance: cfg.instance.clone(),
        }) as Arc<dyn dmc_umo::RegionSource>
    });
    let super_region = first_map
        .as_ref()
        .map_or(dmc_proto::cluster::DEFAULT_SUPER_REGION, |m| {
            m.instance.super_region
        });
    // A memory node that does not answer within two leases is as good as failed: the
    // manager fails it over after one, and the command waits for that (below).
    let verb_timeout = first_map.as_ref().filter(|m| m.lease_ms > 0).map(|m| {
        Duration::from_millis(m.lease_ms * 2).clamp(Duration::from_secs(1), Duration::from_secs(10))
    });
    // This process's name to the memory nodes: a failover revokes it there, so
    // nothing this process sends after that runs (a random id per process, never 0).
    let client = dmc_proto::rng::next_u64() | 1;
    let (pool, dialer) = open_pool(&pool_cfg, super_region, source, verb_timeout, client)
        .await
        .context("opening the memory pool")?;
    if let Some(map) = first_map.as_ref().filter(|m| m.lease_ms > 0) {
        // A command that hits a failed memory node waits for the failover (the node's
        // lease lapses, the manager checks four times a lease, the map arrives) and
        // is retried on the promoted copies, rather than failing.
        pool.set_failover_wait(Duration::from_millis(map.lease_ms * 2 + 500));
    }
    let policy = RedisPolicy::parse(&cfg.maxmemory_policy).context("maxmemory-policy")?;
    let ownership = match first_map {
        // A member of a cluster owns what the map says, once it is applied.
        Some(_) => Ownership::none(),
        None => Ownership::all(0, 1),
    };
    // A table created now is sized to the instance (small ones group hash slots): its
    // limit in the cluster map, else this agent's, else an embedded pool's size. In a
    // cluster no group may span two shards.
    let shard_of = |slot: u16| first_map.as_ref().map_or(0, |m| m.shards.shard_of(slot));
    let sized_for = match &first_map {
        Some(m) if m.instance.maxmemory.0 > 0 => m.instance.maxmemory.0,
        _ if cfg.maxmemory.0 > 0 => cfg.maxmemory.0,
        None if pool_cfg.backend == config::PoolBackend::Embedded => pool_cfg.capacity.0,
        _ => 0,
    };
    let defaults = DhtConfig::default();
    let dht = Dht::open(
        pool,
        DhtConfig {
            maxmemory: cfg.maxmemory.0,
            policy,
            samples: cfg.maxmemory_samples,
            adaptive_experts: dmc_dht::adaptive::parse_experts(&cfg.adaptive_experts)
                .map_err(anyhow::Error::msg)
                .context("adaptive-experts")?,
            slot_group_bits: dmc_dht::slot_group_bits(
                sized_for,
                defaults.buckets_per_subtable,
                shard_of,
            ),
            ..defaults
        },
        Arc::new(SystemClock),
        ownership,
    )
    .await
    .context("opening the hash table")?;
    anyhow::ensure!(
        dmc_dht::groups_within_shards(dht.slot_group_bits(), &shard_of),
        "the pool's hash table groups {} hash slots per partition, across this cluster's shard \
         boundaries",
        1u32 << dht.slot_group_bits()
    );
    let maintenance = dht.spawn_maintenance(Duration::from_millis(100));
    let password = (!cfg.requirepass.is_empty()).then(|| Bytes::from(cfg.requirepass.clone()));
    let engine = Engine::new(
        dht.clone(),
        Arc::new(SystemClock),
        EngineConfig {
            databases: cfg.databases,
            port: addr.port(),
            requirepass: password.clone(),
            maxclients: cfg.maxclients,
            proto_max_bulk_len: cfg.proto_max_bulk_len.0,
            client_query_buffer_limit: cfg.client_query_buffer_limit.0,
            output_limits: cfg.output_limits()?,
            local_cache_bytes: match cfg.local_cache_size {
                Some(size) => size.0 as usize,
                None if dht.pool_is_local() => 0,
                None => 64 << 20,
            },
            timeout_secs: cfg.timeout,
            cluster_enabled: cfg.routing == RoutingMode::Cluster && cfg.manager.is_some(),
            instance: cfg.instance.clone(),
            debug_command: dmc_engine::debug::Access::parse(&cfg.enable_debug_command)
                .unwrap_or_default(),
            aclfile: cfg.aclfile_path(),
        },
    );
    let router = Arc::new(Router::new(
        engine.clone(),
        cfg.routing,
        password,
        cfg.manager.clone(),
        tls::peer_connector(&cfg.tls()).context("setting up TLS to peer agents")?,
    ));
    router.set_dialer(dialer.clone());
    router.spawn_relay();
    engine
        .notifications
        .set(dmc_engine::notify::parse(&cfg.notify_keyspace_events).unwrap_or(0));
    let used = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let region_used = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut me = None;
    let leave = Arc::new(tokio::sync::Notify::new());
    if let Some(url) = cfg.manager.clone() {
        // The agent's lease runs from its registration until the first heartbeat.
        let registering = std::time::Instant::now();
        let (u, listen, i) = (url.clone(), addr.to_string(), cfg.instance.clone());
        let tls_listen = tls_addr.map(|a| a.to_string());
        let id = with_manager("registering with the cluster manager", move || {
            membership::register_agent(&u, &listen, tls_listen.as_deref(), &i, client)
        })
        .await?;
        let (u, i) = (url.clone(), cfg.instance.clone());
        let map = with_manager("fetching the cluster map", move || {
            membership::fetch_map(&u, &i, 0, Duration::ZERO)
        })
        .await?;
        router.renew_lease_of(map.lease_ms, registering);
        // Four heartbeats a lease (at most one a second): a late one or two lapse
        // nothing.
        let heartbeat_every = Duration::from_millis(match map.lease_ms {
            0 => 1000,
            lease => (lease / 4).clamp(50, 1000),
        });
        let applied = Arc::new(std::sync::atomic::AtomicU64::new(
            router.apply(id, map).await,
        ));
        let applied_for_exit = applied.clone();
        router.drain(id);
        // Acknowledge the first map now: `agents scale` waits for it.
        let (u, v) = (url.clone(), applied.load(Ordering::Acquire));
        let _ =
            tokio::task::spawn_blocking(move || membership::report_applied(&u, id, v, &[])).await;
        watch_map(
            url.clone(),
            cfg.instance.clone(),
            id,
            router.clone(),
            applied.clone(),
            leave.clone(),
        );
        membership::spawn(
            url.clone(),
            membership::Registration::Agent {
                id,
                applied,
                used: used.clone(),
                regions: region_used.clone(),
                nodes: {
                    let engine = engine.clone();
                    membership::NodesHook(Arc::new(move || engine.dht.memory_node_ids()))
                },
                renewed: {
                    let router = router.clone();
                    membership::RenewHook(Arc::new(move |sent| router.renew_lease(sent)))
                },
                load: {
                    let engine = engine.clone();
                    membership::LoadHook(Arc::new(move || {
                        let load = engine.dht.take_load();
                        let rows = |s: &[dmc_umo::LatencySample]| -> Vec<[u64; 3]> {
                            s.iter()
                                .map(|s| [u64::from(s.id), s.ops, s.micros])
                                .collect()
                        };
                        serde_json::json!({
                            "nodes": rows(&load.nodes),
                            "regions": rows(&load.regions),
                        })
                    }))
                },
            },
            heartbeat_every,
        );
        me = Some((url, id, applied_for_exit));
    }
    // Memory-node connections open on first use; unused ones close.
    let idle = pool_cfg.idle_connection_timeout;
    if !dialer.connections().is_empty() && idle > 0 {
        let dialer = dialer.clone();
        tokio::spawn(async move {
            // A connection unused for a whole check period is closed, so it goes after
            // between one and two periods of idleness.
            let mut tick = tokio::time::interval(Duration::from_millis(idle * 500));
            loop {
                tick.tick().await;
                for c in dialer.connections() {
                    c.close_if_idle();
                }
            }
        });
    }
    engine
        .stats
        .pool_nodes
        .store(engine.dht.memory_nodes() as u64, Ordering::Relaxed);
    // INFO's instantaneous rates and memory peak: one sample every 100 ms.
    let sampler = {
        let engine = engine.clone();
        let dialer = dialer.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                let connections = dialer.connections();
                let open = if connections.is_empty() {
                    engine.dht.memory_nodes() as u64
                } else {
                    connections.iter().filter(|c| c.connected()).count() as u64
                };
                engine
                    .stats
                    .pool_nodes
                    .store(engine.dht.memory_nodes() as u64, Ordering::Relaxed);
                engine.stats.pool_connections.store(open, Ordering::Relaxed);
                let bytes = engine.dht.used_memory();
                used.store(bytes, Ordering::Relaxed);
                engine.stats.sample(bytes);
                if let Ok(mut r) = region_used.lock() {
                    *r = engine.dht.used_by_region();
                }
            }
        })
    };
    let mut metrics_addr = None;
    if let Some(maddr) = &cfg.metrics_listen {
        let l = tokio::net::TcpListener::bind(maddr)
            .await
            .with_context(|| format!("binding metrics address {maddr}"))?;
        // The address bound (a port of 0 picks a free one).
        metrics_addr = Some(l.local_addr()?);
        let engine = engine.clone();
        let handle = dmc_process::metrics::install(dmc_process::metrics::agent::ALL);
        tokio::spawn(dmc_process::metrics::serve(l, handle, move || {
            metrics::collect(&engine)
        }));
    }
    // The runtime's workers (`threads`, else one per core).
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    tracing::info!(listen = %addr, tls = ?tls_addr, metrics = ?metrics_addr, backend = ?pool_cfg.backend, routing = ?cfg.routing, threads = workers, "compute agent serving");
    {
        let mut line = format!("compute-agent ready listen={addr}");
        if let Some(t) = tls_addr {
            line.push_str(&format!(" tls={t}"));
        }
        if let Some(m) = metrics_addr {
            line.push_str(&format!(" metrics={m}"));
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
    }
    let shared = Arc::new(ConnShared {
        router: router.clone(),
        timers: metrics::CommandTimers::new(),
        batch_replies: workers == 1,
    });
    let (drain_tx, drain_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    // A process the manager failed over and revoked exits (a supervisor restarts it
    // as a new member) rather than answering errors for good.
    let revoked = {
        let dialer = dialer.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while !dialer.revoked() {
                tick.tick().await;
            }
        }
    };
    tokio::pin!(revoked);
    let mut was_revoked = false;
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = leave.notified() => break,
            _ = &mut revoked => {
                tracing::error!(
                    "the cluster manager failed this agent over and revoked it on the memory \
                     nodes (it was paused or cut off for longer than its lease); exiting: \
                     restart it to rejoin as a new member"
                );
                was_revoked = true;
                break;
            }
            accepted = accept_either(&listener, tls_listener.as_ref()) => {
                let ((stream, peer), secure) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                engine.stats.connections_received.fetch_add(1, Ordering::Relaxed);
                let slot = conn::ClientSlot::take(engine.clone());
                let shared = shared.clone();
                let drain = drain_rx.clone();
                let tls = if secure { tls.clone() } else { None };
                tokio::spawn(async move {
                    // Held for the task's life: the count drops however it ends, a
                    // panic included.
                    let slot = slot;
                    let engine = shared.router.engine();
                    if slot.open > engine.limits.maxclients() {
                        engine.stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
                        let refusal = b"-ERR max number of clients reached\r\n";
                        match &tls {
                            None => {
                                let mut s = stream;
                                let _ = s.write_all(refusal).await;
                            }
                            Some(acceptor) => {
                                if let Ok(mut s) = acceptor.accept(stream).await {
                                    let _ = s.write_all(refusal).await;
                                    let _ = s.shutdown().await;
                                }
                            }
                        }
                    } else {
                        let _ = stream.set_nodelay(true);
                        if let Err(e) = serve_conn(&shared, stream, tls.as_ref(), drain).await {
                            tracing::debug!(%peer, error = %e, "connection ended");
                        }
                    }
                });
            }
        }
    }
    drop(listener);
    if let Some((url, id, _)) = &me {
        let (url, id) = (url.clone(), *id);
        // Hand this agent's slots to the others before the connections close (a no-op
        // if `agents scale` already did).
        let left =
            tokio::task::spawn_blocking(move || dmc_process::membership::leave(&url, id)).await;
        if let Ok(Err(e)) = left {
            tracing::warn!(error = %e, "leaving the cluster failed");
        }
    }
    let open = engine.stats.connected_clients.load(Ordering::Relaxed);
    tracing::info!(
        connections = open,
        timeout_secs = cfg.drain_timeout,
        "draining client connections"
    );
    let _ = drain_tx.send(true);
    // A revoked agent can serve nothing: its clients are closed at once. (It may have
    // learnt its removal from the map first and be leaving already.)
    was_revoked |= dialer.revoked();
    let drain_for = if was_revoked { 0 } else { cfg.drain_timeout };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(drain_for);
    while engine.stats.connected_clients.load(Ordering::Relaxed) > 0
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tracing::info!(
        left_open = engine.stats.connected_clients.load(Ordering::Relaxed),
        "drained; flushing metadata"
    );
    if let Some((_, id, applied)) = &me
        && !was_revoked
    {
        report_removal(&router, *id, applied).await;
    }
    maintenance.abort();
    sampler.abort();
    if was_revoked {
        anyhow::bail!("revoked by the cluster manager after a failover");
    }
    dht.flush_hits().await;
    Ok(())
}

/// Waits (at most [`REPORT_REMOVAL_FOR`]) until the manager has this agent's report
/// of a map without it. The agents taking its shards write them only once it has
/// reported that map (or its lease lapsed, or the manager saw its process exit): an
/// agent that exited with the report still in flight would stall their writes.
async fn report_removal(router: &Router, me: u64, applied: &std::sync::atomic::AtomicU64) {
    let deadline = tokio::time::Instant::now() + REPORT_REMOVAL_FOR;
    loop {
        let reported = router.map().is_some_and(|map| {
            map.agent(me).is_none() && applied.load(Ordering::Acquire) >= map.version
        });
        if reported {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                "exiting before the manager had this agent's report of the map that removed it; \
                 the agents taking its shards wait for its exit to be seen or its lease"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How long an exiting agent waits for its report of the map that removed it.
const REPORT_REMOVAL_FOR: Duration = Duration::from_secs(2);

/// The next connection on the plain port or the TLS port; `true` for TLS.
async fn accept_either(
    plain: &tokio::net::TcpListener,
    tls: Option<&tokio::net::TcpListener>,
) -> std::io::Result<((tokio::net::TcpStream, std::net::SocketAddr), bool)> {
    let secure = async {
        match tls {
            Some(l) => l.accept().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        a = plain.accept() => a.map(|a| (a, false)),
        a = secure => a.map(|a| (a, true)),
    }
}

/// A standalone engine on a small embedded pool, for unit tests.
#[cfg(test)]
pub(crate) async fn test_engine() -> Arc<Engine> {
    let pool = dmc_umo::Pool::embedded(
        64 << 20,
        dmc_umo::PoolConfig {
            replicas: 1,
            region_size: 8 << 20,
            segment_size: 1 << 20,
            ..dmc_umo::PoolConfig::default()
        },
    )
    .await
    .expect("an embedded pool");
    let dht = Dht::open(
        pool,
        DhtConfig::default(),
        Arc::new(SystemClock),
        Ownership::all(0, 1),
    )
    .await
    .expect("a hash table on it");
    Engine::new(dht, Arc::new(SystemClock), EngineConfig::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn defaults_are_the_standalone_agent() {
        let cfg = Args::parse_from(["compute-agent"]).resolve().unwrap();
        assert_eq!(
            (cfg.bind.as_str(), cfg.port, cfg.pool.backend),
            ("127.0.0.1", 6379, PoolBackend::Embedded)
        );
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(
            Args::parse_from(["compute-agent", "--maxmemory-policy", "lru"])
                .resolve()
                .is_err()
        );
        assert!(
            Args::parse_from(["compute-agent", "--pool-backend", "shm"])
                .resolve()
                .is_err()
        );
        assert!(toml::from_str::<Config>("bogus = 1").is_err());
    }

    /// Everything the agent exports is in its catalog, and every catalog entry is
    /// exported once a command has been timed.
    #[tokio::test]
    async fn metrics_follow_the_catalog() {
        let engine = test_engine().await;
        let handle = dmc_process::metrics::install(dmc_process::metrics::agent::ALL);
        metrics::CommandTimers::new().record(
            dmc_engine::table::Family::Strings,
            Duration::from_micros(30),
            2,
        );
        metrics::collect(&engine);
        let exported = dmc_process::metrics::names_in(&handle.render());
        let declared: std::collections::BTreeSet<String> = dmc_process::metrics::agent::ALL
            .iter()
            .map(|d| d.name.to_string())
            .collect();
        assert_eq!(exported, declared);
    }

    #[test]
    fn shipped_example_config_is_valid() {
        let cfg: Config = toml::from_str(include_str!("../compute-agent.example.toml")).unwrap();
        cfg.validate().unwrap();
    }
}
