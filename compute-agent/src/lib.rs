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

pub mod routing;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::{Bytes, BytesMut};
use clap::Parser;
use dmc_dht::{Dht, DhtConfig, Ownership, RedisPolicy, SystemClock};
use dmc_engine::{Engine, EngineConfig, Flow};
use dmc_proto::ByteSize;
use dmc_proto::cluster::{ClusterMap, PoolTransport};
use dmc_resp::{Limits, Reply, parse_command};
use dmc_umo::{Pool, PoolConfig};
use dmc_verbs::{BackendKind, Endpoint, RpcOptions};
use routing::{Router, RoutingMode};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where the agent's memory pool is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PoolBackend {
    /// An in-process pool (standalone, nothing else to run).
    Embedded,
    /// Memory nodes on this host, regions mapped into the agent.
    Shm,
    /// Memory nodes reached over TCP.
    Tcp,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct PoolSection {
    pub backend: PoolBackend,
    /// Memory node endpoints (`host:port` or `unix:/path`) for `shm` and `tcp`.
    pub nodes: Vec<String>,
    /// Copies of every region (`r`).
    pub replicas: usize,
    /// Size of the embedded pool.
    pub capacity: ByteSize,
    pub region_size: ByteSize,
    pub segment_size: ByteSize,
    /// File holding the cluster secret memory nodes expect.
    pub secret_file: Option<PathBuf>,
    /// The ids of `nodes`, in order (a cluster member gets them from the manager).
    /// With them the agent connects to a node only when it first needs it.
    pub node_ids: Vec<u32>,
    /// Seconds after which an unused memory-node connection is closed (with
    /// `node_ids`; 0: never).
    pub idle_connection_timeout: u64,
}

impl Default for PoolSection {
    fn default() -> Self {
        PoolSection {
            backend: PoolBackend::Embedded,
            nodes: Vec::new(),
            replicas: 2,
            capacity: ByteSize(4 << 30),
            region_size: ByteSize(256 << 20),
            segment_size: ByteSize(16 << 20),
            secret_file: None,
            node_ids: Vec::new(),
            idle_connection_timeout: 60,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct Config {
    pub bind: String,
    /// 0 picks a free port.
    pub port: u16,
    /// Pool bytes this instance may use (0: as much as the pool holds).
    pub maxmemory: ByteSize,
    pub maxmemory_policy: String,
    pub maxmemory_samples: usize,
    pub requirepass: String,
    pub maxclients: u64,
    /// Close clients idle this many seconds (0: never), Redis's `timeout`.
    pub timeout: u64,
    pub databases: u8,
    /// `client-query-buffer-limit`: a client whose unparsed input passes this is closed.
    pub client_query_buffer_limit: ByteSize,
    /// The agent's local DRAM cache of hot keys (0: none).
    pub local_cache_size: ByteSize,
    pub log: String,
    /// Where to serve Prometheus metrics (`host:port`); none if unset.
    pub metrics_listen: Option<String>,
    /// The cluster manager's admin API (`http://host:port`) to join; standalone if
    /// unset. The manager then names the pool (unless `pool.backend` is set here).
    pub manager: Option<String>,
    /// The cluster's cache instance this agent serves (with `manager`).
    pub instance: String,
    /// How writes to hash slots other agents own are handled: `proxy` forwards them,
    /// `cluster` answers `-MOVED` (Redis Cluster clients).
    pub routing: RoutingMode,
    /// On shutdown, how long client connections may take to finish.
    pub drain_timeout: u64,
    pub pool: PoolSection,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: "127.0.0.1".into(),
            port: 6379,
            maxmemory: ByteSize(0),
            maxmemory_policy: "noeviction".into(),
            maxmemory_samples: 5,
            requirepass: String::new(),
            maxclients: 10_000,
            timeout: 0,
            databases: 16,
            client_query_buffer_limit: ByteSize(1 << 30),
            local_cache_size: ByteSize(64 << 20),
            log: "info".into(),
            metrics_listen: None,
            manager: None,
            instance: dmc_proto::cluster::DEFAULT_INSTANCE.into(),
            routing: RoutingMode::Proxy,
            drain_timeout: 10,
            pool: PoolSection::default(),
        }
    }
}

/// DMC compute agent: a Redis-compatible server over the shared memory pool.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Args {
    /// TOML config file; flags override it.
    #[arg(long, short = 'c')]
    pub config: Option<PathBuf>,
    #[arg(long)]
    pub bind: Option<String>,
    /// Port to listen on (0 picks a free port).
    #[arg(long, short = 'p')]
    pub port: Option<u16>,
    /// e.g. 4gb.
    #[arg(long)]
    pub maxmemory: Option<ByteSize>,
    /// noeviction, allkeys-lru, allkeys-lfu, allkeys-random, volatile-lru, volatile-lfu,
    /// volatile-random, volatile-ttl.
    #[arg(long)]
    pub maxmemory_policy: Option<String>,
    #[arg(long)]
    pub requirepass: Option<String>,
    #[arg(long)]
    pub maxclients: Option<u64>,
    /// Close clients idle this many seconds (0: never).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Local DRAM cache size, e.g. 64mb (0 disables it).
    #[arg(long)]
    pub local_cache_size: Option<ByteSize>,
    /// embedded, shm or tcp.
    #[arg(long, value_enum)]
    pub pool_backend: Option<PoolBackend>,
    /// A memory node endpoint (repeat for each node).
    #[arg(long = "pool-node")]
    pub pool_nodes: Vec<String>,
    /// Copies of every region.
    #[arg(long)]
    pub replicas: Option<usize>,
    #[arg(long)]
    pub log: Option<String>,
    /// Serve Prometheus metrics on host:port.
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// Join the cluster managed at this URL (http://host:port).
    #[arg(long)]
    pub manager: Option<String>,
    /// The cluster's cache instance to serve (default: `default`).
    #[arg(long)]
    pub instance: Option<String>,
    /// proxy (forward writes to their owner) or cluster (answer -MOVED).
    #[arg(long, value_enum)]
    pub routing: Option<RoutingMode>,
    /// Seconds client connections may take to finish on shutdown.
    #[arg(long)]
    pub drain_timeout: Option<u64>,
    /// Validate the configuration and exit.
    #[arg(long)]
    pub check_config: bool,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    pub print_config: bool,
}

impl Args {
    pub fn resolve(&self) -> Result<Config> {
        let mut cfg: Config = dmc_process::load_config(self.config.as_deref())?;
        if let Some(v) = &self.bind {
            cfg.bind = v.clone();
        }
        if let Some(v) = self.port {
            cfg.port = v;
        }
        if let Some(v) = self.maxmemory {
            cfg.maxmemory = v;
        }
        if let Some(v) = &self.maxmemory_policy {
            cfg.maxmemory_policy = v.clone();
        }
        if let Some(v) = &self.requirepass {
            cfg.requirepass = v.clone();
        }
        if let Some(v) = self.maxclients {
            cfg.maxclients = v;
        }
        if let Some(v) = self.timeout {
            cfg.timeout = v;
        }
        if let Some(v) = self.local_cache_size {
            cfg.local_cache_size = v;
        }
        if let Some(v) = self.pool_backend {
            cfg.pool.backend = v;
        }
        if !self.pool_nodes.is_empty() {
            cfg.pool.nodes = self.pool_nodes.clone();
        }
        if let Some(v) = self.replicas {
            cfg.pool.replicas = v;
        }
        if let Some(v) = &self.log {
            cfg.log = v.clone();
        }
        if let Some(v) = &self.metrics_listen {
            cfg.metrics_listen = Some(v.clone());
        }
        if let Some(v) = &self.manager {
            cfg.manager = Some(v.clone());
        }
        if let Some(v) = &self.instance {
            cfg.instance = v.clone();
        }
        if let Some(v) = self.routing {
            cfg.routing = v;
        }
        if let Some(v) = self.drain_timeout {
            cfg.drain_timeout = v;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

impl Config {
    pub fn validate(&self) -> Result<()> {
        anyhow::ensure!(
            RedisPolicy::parse(&self.maxmemory_policy).is_some(),
            "maxmemory-policy {:?} is not one of Redis's policies",
            self.maxmemory_policy
        );
        anyhow::ensure!(
            (1..=64).contains(&self.maxmemory_samples),
            "maxmemory-samples must be 1..=64"
        );
        anyhow::ensure!(
            (1..=255).contains(&self.databases),
            "databases must be 1..=255"
        );
        anyhow::ensure!(self.maxclients > 0, "maxclients must be positive");
        anyhow::ensure!(
            dmc_proto::cluster::valid_instance_name(&self.instance),
            "instance {:?}: use 1 to 64 letters, digits, '-' or '_'",
            self.instance
        );
        if self.pool.backend != PoolBackend::Embedded {
            anyhow::ensure!(
                !self.pool.nodes.is_empty(),
                "the {:?} pool backend needs memory nodes (pool.nodes)",
                self.pool.backend
            );
            for n in &self.pool.nodes {
                n.parse::<Endpoint>()
                    .map_err(|e| anyhow::anyhow!("pool node {n}: {e}"))?;
            }
        }
        Ok(())
    }
}

/// Regions granted by the cluster manager: the pool of a cluster member grows only
/// through it (on-demand allocation within the instance's maxmemory).
struct ManagerRegions {
    url: String,
    instance: String,
}

type Granted = Result<(u16, dmc_umo::RegionRecord), dmc_umo::UmoError>;

impl dmc_umo::RegionSource for ManagerRegions {
    fn grant(
        &self,
        want: Option<u16>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Granted> + Send + '_>> {
        use dmc_process::membership::{self, ManagerCallError};
        use dmc_umo::UmoError;
        let (url, instance) = (self.url.clone(), self.instance.clone());
        Box::pin(async move {
            let got = tokio::task::spawn_blocking(move || {
                membership::grant_region(&url, &instance, want)
            })
            .await
            .map_err(|e| UmoError::Config(e.to_string()))?;
            match got {
                Ok(g) => Ok((
                    g.region,
                    dmc_umo::RegionRecord {
                        primary: g.primary,
                        backups: g.backups,
                    },
                )),
                Err(ManagerCallError::Refused { status: 409, .. }) => Err(UmoError::Node {
                    node: 0,
                    source: dmc_verbs::VerbsError::RegionExists(want.unwrap_or(0)),
                }),
                Err(ManagerCallError::Refused {
                    status: 507,
                    message,
                    ..
                }) => Err(UmoError::OutOfMemory(message)),
                Err(e) => Err(UmoError::Config(e.to_string())),
            }
        })
    }
}

/// The pool, and its memory-node connections that open on demand (empty when the
/// node ids are unknown and every node was connected up front).
/// `super_region` is the region of the instance's superblock (a cluster map names it).
async fn open_pool(
    cfg: &PoolSection,
    super_region: u16,
    source: Option<Arc<dyn dmc_umo::RegionSource>>,
) -> Result<(Arc<Pool>, Vec<Arc<dmc_verbs::LazyTransport>>)> {
    let mut lazy = Vec::new();
    let mut pc = PoolConfig {
        replicas: cfg.replicas,
        region_size: cfg.region_size.0,
        segment_size: cfg.segment_size.0,
        super_region,
        ..PoolConfig::default()
    };
    let pool = match cfg.backend {
        PoolBackend::Embedded => {
            // One process holds every copy: replicating in-process buys nothing.
            pc.replicas = 1;
            Pool::embedded(cfg.capacity.0, pc).await?
        }
        PoolBackend::Shm | PoolBackend::Tcp => {
            let kind = if cfg.backend == PoolBackend::Shm {
                BackendKind::Shm
            } else {
                BackendKind::Tcp
            };
            let secret = match &cfg.secret_file {
                Some(p) => Bytes::from(std::fs::read_to_string(p)?.trim().to_string()),
                None => Bytes::new(),
            };
            let mut nodes: Vec<Arc<dyn dmc_verbs::Transport>> = Vec::new();
            let on_demand = cfg.node_ids.len() == cfg.nodes.len();
            for (i, n) in cfg.nodes.iter().enumerate() {
                let ep: Endpoint = n
                    .parse()
                    .map_err(|e| anyhow::anyhow!("pool node {n}: {e}"))?;
                let options = RpcOptions {
                    secret: secret.clone(),
                    ..RpcOptions::default()
                };
                if on_demand {
                    let t = Arc::new(dmc_verbs::LazyTransport::new(
                        cfg.node_ids[i],
                        kind,
                        ep,
                        options,
                    ));
                    lazy.push(t.clone());
                    nodes.push(t);
                    continue;
                }
                let t = dmc_verbs::backend::connect(kind, ep, options)
                    .await
                    .with_context(|| format!("connecting to memory node {n}"))?;
                nodes.push(t);
            }
            Pool::open_with(pc, nodes, source).await?
        }
    };
    Ok((pool, lazy))
}

/// The pool settings a cluster map names, unless the agent's own config names a pool.
fn pool_from_map(own: &PoolSection, map: &ClusterMap) -> PoolSection {
    if own.backend != PoolBackend::Embedded {
        return own.clone();
    }
    PoolSection {
        backend: match map.pool.transport {
            PoolTransport::Shm => PoolBackend::Shm,
            PoolTransport::Tcp => PoolBackend::Tcp,
        },
        nodes: map.pool.nodes.clone(),
        node_ids: map.pool.node_ids.clone(),
        replicas: map.pool.replicas,
        region_size: map.pool.region_size,
        segment_size: map.pool.segment_size,
        ..own.clone()
    }
}

/// Retries a call to the manager for up to a minute (it may be starting too).
async fn with_manager<T: Send + 'static>(
    what: &'static str,
    call: impl Fn() -> Result<T, dmc_process::membership::ManagerCallError> + Send + Clone + 'static,
) -> Result<T> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let c = call.clone();
        match tokio::task::spawn_blocking(c).await? {
            Ok(v) => return Ok(v),
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "{what} failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e).context(what),
        }
    }
}

/// The first cluster map of `instance` whose pool can be opened: the manager may know
/// fewer memory nodes than the pool's replicas while the nodes are still registering.
async fn pool_map(url: &str, instance: &str, own: &PoolSection) -> Result<ClusterMap> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (u, i) = (url.to_string(), instance.to_string());
        let map = with_manager("fetching the cluster map", move || {
            dmc_process::membership::fetch_map(&u, &i, 0, Duration::ZERO)
        })
        .await?;
        let pool = pool_from_map(own, &map);
        if pool.nodes.len() >= pool.replicas.max(1) {
            return Ok(map);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the cluster has {} memory nodes, the pool needs {}",
            pool.nodes.len(),
            pool.replicas
        );
        tracing::info!(
            nodes = pool.nodes.len(),
            replicas = pool.replicas,
            "waiting for memory nodes to join"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Follows the manager's map for the life of the agent: long-polls for a newer one,
/// applies it, and acknowledges it at once. A map without this agent (it was removed)
/// or of another cluster (the manager's URL now serves a different state) makes the
/// agent shut down through `leave`, draining its clients.
fn watch_map(
    url: String,
    instance: String,
    me: u64,
    router: Arc<Router>,
    applied: Arc<std::sync::atomic::AtomicU64>,
    leave: Arc<tokio::sync::Notify>,
) {
    let cluster = router
        .map()
        .map(|m| m.cluster_id.clone())
        .unwrap_or_default();
    use dmc_process::membership;
    tokio::spawn(async move {
        loop {
            let after = applied.load(Ordering::Acquire);
            let (u, i) = (url.clone(), instance.clone());
            let got = tokio::task::spawn_blocking(move || {
                membership::fetch_map(&u, &i, after, Duration::from_secs(30))
            })
            .await;
            match got {
                Ok(Ok(map)) if map.cluster_id != cluster => {
                    tracing::error!(joined = %cluster, now = %map.cluster_id,
                        "the manager now runs another cluster; leaving");
                    leave.notify_one();
                    return;
                }
                Ok(Ok(map)) if map.version > after => {
                    let removed = map.agent(me).is_none();
                    let v = router.apply(me, map).await;
                    if removed {
                        // Keep following maps while draining: writes go to the owners.
                        tracing::info!(version = v, "removed from the cluster; draining");
                        leave.notify_one();
                    }
                    applied.store(v, Ordering::Release);
                    router.drain(me);
                    let u = url.clone();
                    let _ =
                        tokio::task::spawn_blocking(move || membership::report_applied(&u, me, v))
                            .await;
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "fetching the cluster map failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => {
                    tracing::error!(error = %e, "the map watcher failed");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    });
}

/// Runs the agent until `shutdown` completes.
pub async fn run(cfg: Config, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
    let listener = tokio::net::TcpListener::bind((cfg.bind.as_str(), cfg.port))
        .await
        .with_context(|| format!("binding {}:{}", cfg.bind, cfg.port))?;
    let addr = listener.local_addr()?;
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
    let (pool, connections) = open_pool(&pool_cfg, super_region, source)
        .await
        .context("opening the memory pool")?;
    let policy = RedisPolicy::parse(&cfg.maxmemory_policy).context("maxmemory-policy")?;
    let ownership = match first_map {
        // A member of a cluster owns what the map says, once it is applied.
        Some(_) => Ownership::none(),
        None => Ownership::all(0, 1),
    };
    let dht = Dht::open(
        pool,
        DhtConfig {
            maxmemory: cfg.maxmemory.0,
            policy,
            samples: cfg.maxmemory_samples,
            ..DhtConfig::default()
        },
        Arc::new(SystemClock),
        ownership,
    )
    .await
    .context("opening the hash table")?;
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
            local_cache_bytes: cfg.local_cache_size.0 as usize,
            timeout_secs: cfg.timeout,
            cluster_enabled: cfg.routing == RoutingMode::Cluster && cfg.manager.is_some(),
            instance: cfg.instance.clone(),
        },
    );
    let router = Arc::new(Router::new(
        engine.clone(),
        cfg.routing,
        password,
        cfg.manager.clone(),
    ));
    let used = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let region_used = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut me = None;
    let leave = Arc::new(tokio::sync::Notify::new());
    if let Some(url) = cfg.manager.clone() {
        let (u, listen, i) = (url.clone(), addr.to_string(), cfg.instance.clone());
        let id = with_manager("registering with the cluster manager", move || {
            membership::register_agent(&u, &listen, &i)
        })
        .await?;
        let (u, i) = (url.clone(), cfg.instance.clone());
        let map = with_manager("fetching the cluster map", move || {
            membership::fetch_map(&u, &i, 0, Duration::ZERO)
        })
        .await?;
        let applied = Arc::new(std::sync::atomic::AtomicU64::new(
            router.apply(id, map).await,
        ));
        router.drain(id);
        // Acknowledge the first map now: `agents scale` waits for it.
        let (u, v) = (url.clone(), applied.load(Ordering::Acquire));
        let _ = tokio::task::spawn_blocking(move || membership::report_applied(&u, id, v)).await;
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
            },
            Duration::from_secs(1),
        );
        me = Some((url, id));
    }
    // Memory-node connections open on first use; unused ones close.
    let idle = pool_cfg.idle_connection_timeout;
    if !connections.is_empty() && idle > 0 {
        let connections = connections.clone();
        tokio::spawn(async move {
            // A connection unused for a whole check period is closed, so it goes after
            // between one and two periods of idleness.
            let mut tick = tokio::time::interval(Duration::from_millis(idle * 500));
            loop {
                tick.tick().await;
                for c in &connections {
                    c.close_if_idle();
                }
            }
        });
    }
    engine
        .stats
        .pool_nodes
        .store(engine.dht.pool().nodes().len() as u64, Ordering::Relaxed);
    // INFO's instantaneous rates and memory peak: one sample every 100 ms.
    let sampler = {
        let engine = engine.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                let open = if connections.is_empty() {
                    engine.stats.pool_nodes.load(Ordering::Relaxed)
                } else {
                    connections.iter().filter(|c| c.connected()).count() as u64
                };
                engine.stats.pool_connections.store(open, Ordering::Relaxed);
                let bytes = engine.dht.used_memory();
                used.store(bytes, Ordering::Relaxed);
                engine.stats.sample(bytes);
                if let Ok(mut r) = region_used.lock() {
                    *r = engine.dht.pool().used_by_region();
                }
            }
        })
    };
    if let Some(maddr) = &cfg.metrics_listen {
        let l = tokio::net::TcpListener::bind(maddr)
            .await
            .with_context(|| format!("binding metrics address {maddr}"))?;
        let engine = engine.clone();
        tokio::spawn(dmc_process::serve_metrics(l, move || metrics(&engine)));
    }
    tracing::info!(listen = %addr, backend = ?pool_cfg.backend, routing = ?cfg.routing, "compute agent serving");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "compute-agent ready listen={addr}")?;
        out.flush()?;
    }
    let limits = Arc::new(Limits::default());
    let qbuf_limit = cfg.client_query_buffer_limit.0 as usize;
    let (drain_tx, drain_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = leave.notified() => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                engine.stats.connections_received.fetch_add(1, Ordering::Relaxed);
                let clients = engine.stats.connected_clients.fetch_add(1, Ordering::Relaxed) + 1;
                let router = router.clone();
                let limits = limits.clone();
                let drain = drain_rx.clone();
                tokio::spawn(async move {
                    let engine = router.engine();
                    if clients > engine.config.maxclients {
                        engine.stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
                        let mut s = stream;
                        let _ = s.write_all(b"-ERR max number of clients reached\r\n").await;
                    } else {
                        let _ = stream.set_nodelay(true);
                        if let Err(e) = serve_conn(&router, stream, &limits, qbuf_limit, drain).await {
                            tracing::debug!(%peer, error = %e, "connection ended");
                        }
                    }
                    engine.stats.connected_clients.fetch_sub(1, Ordering::Relaxed);
                });
            }
        }
    }
    drop(listener);
    if let Some((url, id)) = me {
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(cfg.drain_timeout);
    while engine.stats.connected_clients.load(Ordering::Relaxed) > 0
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tracing::info!(
        left_open = engine.stats.connected_clients.load(Ordering::Relaxed),
        "drained; flushing metadata"
    );
    maintenance.abort();
    sampler.abort();
    dht.flush_hits().await;
    Ok(())
}

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
    let p = engine.dht.pool().stats();
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

/// Pipelined GETs read from the pool together, at most this many at a time.
const GET_BATCH: usize = 32;
/// Pipelined SETs of distinct keys run concurrently, at most this many at a time.
const SET_BATCH: usize = 32;
/// Pipelined writes to one other agent are forwarded together, at most this many.
const FORWARD_BATCH: usize = 64;

/// Serves one client: parse every complete request in the buffer, run them in order
/// (runs of plain GETs as one batch), write all their replies together (pipelining).
async fn serve_conn(
    router: &Router,
    stream: tokio::net::TcpStream,
    limits: &Limits,
    qbuf_limit: usize,
    drain: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let engine = router.engine();
    use std::os::fd::AsRawFd;
    let show =
        |a: std::io::Result<std::net::SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
    let mut session = engine.new_session(
        show(stream.peer_addr()),
        show(stream.local_addr()),
        i64::from(stream.as_raw_fd()),
    );
    // Unregisters the client however the session ends (error, kill, or a panic).
    struct Registered<'a>(&'a Engine, u64);
    impl Drop for Registered<'_> {
        fn drop(&mut self) {
            self.0.clients.unregister(self.1);
        }
    }
    let _registered = Registered(engine, session.id);
    serve_session(router, stream, &mut session, limits, qbuf_limit, drain).await
}

/// Writes replies to the client, counted for INFO. A client that stops reading blocks
/// this write; CLIENT KILL still ends it.
async fn send(
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
    out: &[u8],
    engine: &Engine,
    client: &dmc_engine::clients::Client,
) -> std::io::Result<()> {
    let stats = &engine.stats;
    stats
        .net_output_bytes
        .fetch_add(out.len() as u64, Ordering::Relaxed);
    stats.writes_processed.fetch_add(1, Ordering::Relaxed);
    tokio::select! {
        r = wr.write_all(out) => r,
        _ = client.killed() => Err(std::io::Error::other("killed by CLIENT KILL")),
    }
}

async fn serve_session(
    router: &Router,
    stream: tokio::net::TcpStream,
    session: &mut dmc_engine::Session,
    limits: &Limits,
    qbuf_limit: usize,
    mut drain: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let engine = router.engine();
    // Another agent forwarding writes to this one (see `routing`).
    let mut peer = false;
    let (mut rd, mut wr) = stream.into_split();
    let client = session.client.clone();
    let mut buf = BytesMut::new();
    let mut out = BytesMut::new();
    loop {
        buf.reserve(4096);
        // Redis's `timeout`: an idle client is closed (read at every wait, so CONFIG SET
        // applies to open connections too).
        let idle = match engine.timeout_secs.load(Ordering::Relaxed) {
            0 => None,
            secs => Some(Duration::from_secs(secs)),
        };
        let idle_timer = async {
            match idle {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = idle_timer => return Ok(()),
            read = rd.read_buf(&mut buf) => match read? {
                0 => return Ok(()),
                n => {
                    engine.stats.net_input_bytes.fetch_add(n as u64, Ordering::Relaxed);
                    engine.stats.reads_processed.fetch_add(1, Ordering::Relaxed);
                }
            },
            // CLIENT KILL from another connection.
            _ = client.killed() => return Ok(()),
            // Shutting down: every command this client sent was answered.
            _ = drain.wait_for(|d| *d) => return Ok(()),
        }
        // Parse every complete request first, so runs of pipelined GETs can be read
        // from the pool as one batch.
        let mut commands: Vec<Vec<Bytes>> = Vec::new();
        let mut bad = None;
        loop {
            match parse_command(&mut buf, limits) {
                Ok(Some(args)) if args.is_empty() => continue,
                Ok(Some(args)) => commands.push(args),
                Ok(None) => break,
                Err(e) => {
                    bad = Some(e);
                    break;
                }
            }
        }
        let mut i = 0;
        while i < commands.len() {
            let gets = engine.leading_gets(session, &commands[i..], GET_BATCH);
            let sets = match gets {
                0 => engine.leading_sets(session, &commands[i..], SET_BATCH),
                _ => 0,
            };
            let forwards = match (gets, sets) {
                (0 | 1, 0 | 1) => {
                    router.leading_forwards(session, &commands[i..], FORWARD_BATCH, peer)
                }
                _ => None,
            };
            if let Some((owner, forwards)) = forwards {
                for reply in router
                    .forward_run(session, &owner, &commands[i..i + forwards])
                    .await
                {
                    if session.should_reply() {
                        reply.encode(session.proto, &mut out);
                    }
                }
                i += forwards;
            } else if gets >= 2 {
                for reply in engine.get_batch(session, &commands[i..i + gets]).await {
                    if session.should_reply() {
                        reply.encode(session.proto, &mut out);
                    }
                }
                i += gets;
            } else if sets >= 2 {
                for reply in router.set_run(session, &commands[i..i + sets], peer).await {
                    if session.should_reply() {
                        reply.encode(session.proto, &mut out);
                    }
                }
                i += sets;
            } else {
                let args = std::mem::take(&mut commands[i]);
                i += 1;
                if args[0].eq_ignore_ascii_case(routing::PEER_HELLO) {
                    peer = true;
                    Reply::ok().encode(session.proto, &mut out);
                    continue;
                }
                let (reply, flow) = router.execute(session, args, peer).await;
                if session.should_reply() {
                    reply.encode(session.proto, &mut out);
                }
                if flow == Flow::Close || client.is_killed() {
                    send(&mut wr, &out, engine, &client).await?;
                    return Ok(());
                }
            }
            if out.len() >= 64 << 10 {
                send(&mut wr, &out, engine, &client).await?;
                out.clear();
            }
        }
        if let Some(e) = bad {
            Reply::Error(e.to_string()).encode(session.proto, &mut out);
            send(&mut wr, &out, engine, &client).await?;
            return Ok(());
        }
        if !out.is_empty() {
            send(&mut wr, &out, engine, &client).await?;
            out.clear();
            if out.capacity() > 1 << 20 {
                out = BytesMut::new();
            }
        }
        if buf.len() > qbuf_limit {
            tracing::warn!(
                bytes = buf.len(),
                "closing a client over client-query-buffer-limit"
            );
            return Ok(());
        }
        if buf.is_empty() && buf.capacity() > 1 << 20 {
            buf = BytesMut::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[tokio::test]
    async fn metric_names_are_unique_and_prefixed() {
        let pool = Pool::embedded(
            64 << 20,
            PoolConfig {
                replicas: 1,
                region_size: 8 << 20,
                segment_size: 1 << 20,
                ..PoolConfig::default()
            },
        )
        .await
        .unwrap();
        let dht = Dht::open(
            pool,
            DhtConfig::default(),
            Arc::new(SystemClock),
            Ownership::all(0, 1),
        )
        .await
        .unwrap();
        let engine = Engine::new(dht, Arc::new(SystemClock), EngineConfig::default());
        let names: Vec<_> = metrics(&engine).iter().map(|m| m.name).collect();
        let set: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(set.len(), names.len());
        assert!(names.iter().all(|n| n.starts_with("dmc_agent_")));
    }

    #[test]
    fn shipped_example_config_is_valid() {
        let cfg: Config = toml::from_str(include_str!("../compute-agent.example.toml")).unwrap();
        cfg.validate().unwrap();
    }
}
