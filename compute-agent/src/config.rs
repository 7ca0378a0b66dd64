//! The agent's configuration: the TOML file's typed sections, the flags that override
//! them, and their validation. `main.rs` resolves [`Args`] into a [`Config`]; nothing
//! else reads flags or files. It must never open a connection or a pool.

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use dmc_dht::RedisPolicy;
use dmc_proto::ByteSize;
use dmc_verbs::Endpoint;
use serde::{Deserialize, Serialize};

use dmc_engine::limits::{MIN_BUFFER_LIMIT, OutputLimits, out_of_range};

use crate::routing::RoutingMode;
use crate::tls::{AuthClients, TlsSection};

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
    /// Memory nodes reached with one-sided RDMA verbs (this build needs the `rdma`
    /// feature and the host a device; see `rdma-device`).
    Rdma,
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
    /// The CA of the memory nodes' certificates: dial them over TLS (plain TCP if
    /// unset). Nodes serve TLS with `tls_cert_file`/`tls_key_file`.
    pub tls_ca_cert_file: Option<PathBuf>,
    /// The ids of `nodes`, in order (a cluster member gets them from the manager).
    /// With them the agent connects to a node only when it first needs it.
    pub node_ids: Vec<u32>,
    /// Seconds after which an unused memory-node connection is closed (with
    /// `node_ids`; 0: never).
    pub idle_connection_timeout: u64,
    /// The RDMA device for the `rdma` backend, as `ibv_devices` names it (unset: the
    /// first one), its port, and the GID index (RoCE v2: usually 1 or 3).
    pub rdma_device: Option<String>,
    pub rdma_port: u8,
    pub rdma_gid_index: u8,
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
            node_ids: Vec::new(),
            tls_ca_cert_file: None,
            idle_connection_timeout: 60,
            rdma_device: None,
            rdma_port: 1,
            rdma_gid_index: 0,
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
    /// The experts `maxmemory-policy adaptive` weighs: lru, lfu, mru, size.
    pub adaptive_experts: String,
    pub requirepass: String,
    pub maxclients: u64,
    /// Close clients idle this many seconds (0: never), Redis's `timeout`.
    pub timeout: u64,
    /// Who may run DEBUG: `no`, `local` (loopback clients) or `yes`, Redis's
    /// `enable-debug-command`.
    pub enable_debug_command: String,
    /// `aclfile`: the ACL users, read at start and by ACL LOAD, written by ACL SAVE
    /// (empty: none). A standalone agent's; a cluster's users are the manager's.
    pub aclfile: String,
    /// `notify-keyspace-events`: the keyspace notification classes published (Redis's
    /// letters, e.g. `KEA`; empty: none). Per agent; `CONFIG SET` changes every agent's.
    pub notify_keyspace_events: String,
    pub databases: u8,
    /// `client-query-buffer-limit`: a client whose unparsed input passes this is closed.
    pub client_query_buffer_limit: ByteSize,
    /// `proto-max-bulk-len`: the longest bulk string a request may carry.
    pub proto_max_bulk_len: ByteSize,
    /// `client-output-buffer-limit`, Redis's form (`normal 0 0 0` is no limit): a
    /// client whose unsent replies pass the hard limit, or stay over the soft limit
    /// longer than its seconds, is closed.
    pub client_output_buffer_limit: String,
    /// The agent's local DRAM cache of hot keys (0: none). Unset: none when the pool's
    /// memory is on this host (`embedded`, `shm`: a second copy in the same DRAM buys
    /// no read and costs every write), 64 MiB over `tcp`.
    pub local_cache_size: Option<ByteSize>,
    /// Runtime threads serving clients (and the pool's verbs, inline). Unset: one per
    /// core (or `TOKIO_WORKER_THREADS`). Whenever the runtime has one worker (this set
    /// to 1, or a one-core host), each client's replies are written once that worker
    /// has read every client ready, as Redis's event loop does. On 2 cores shared with
    /// `redis-benchmark`, one thread served GET `-P 16` 19 % faster and depth-1
    /// commands 4–7 % faster, and pipelined SET and INCR up to 13 % slower (they need
    /// more than one core): docs/benchmarks.md, "Issue 14, session 26".
    pub threads: Option<usize>,
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
    /// The CA (PEM) of an `https://` manager's certificate.
    pub manager_ca_cert_file: Option<PathBuf>,
    /// The TLS client port (0: none), Redis's `tls-port`.
    pub tls_port: u16,
    /// The server's certificate chain (PEM).
    pub tls_cert_file: Option<PathBuf>,
    /// The server's private key (PEM).
    pub tls_key_file: Option<PathBuf>,
    /// The CA that signs client certificates (PEM).
    pub tls_ca_cert_file: Option<PathBuf>,
    /// `yes` (a client certificate is required), `optional` or `no`.
    pub tls_auth_clients: AuthClients,
    /// File holding the cluster secret (else `DMC_CLUSTER_SECRET`): presented to
    /// memory nodes, the manager and other agents, and demanded of agents forwarding
    /// here. Required with a manager or memory nodes; unused by a standalone agent.
    pub secret_file: Option<PathBuf>,
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
            adaptive_experts: "lru,lfu".into(),
            requirepass: String::new(),
            maxclients: 10_000,
            timeout: 0,
            enable_debug_command: "no".into(),
            aclfile: String::new(),
            notify_keyspace_events: String::new(),
            databases: 16,
            client_query_buffer_limit: ByteSize(1 << 30),
            proto_max_bulk_len: ByteSize(512 << 20),
            client_output_buffer_limit: OutputLimits::default().render(),
            local_cache_size: None,
            threads: None,
            log: "info".into(),
            metrics_listen: None,
            manager: None,
            instance: dmc_proto::cluster::DEFAULT_INSTANCE.into(),
            routing: RoutingMode::Proxy,
            drain_timeout: 10,
            manager_ca_cert_file: None,
            tls_port: 0,
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_cert_file: None,
            tls_auth_clients: AuthClients::Yes,
            secret_file: None,
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
    /// volatile-random, volatile-ttl, adaptive (experts weighted by regret), or one of
    /// Ditto's algorithms as allkeys-NAME / volatile-NAME (mru, fifo, size, gds, gdsf,
    /// lfuda, lirs, lrfu, lru-k, hyperbolic).
    #[arg(long)]
    pub maxmemory_policy: Option<String>,
    /// The experts `adaptive` weighs, comma-separated, e.g. lru,lfu (lru, lfu, mru,
    /// size).
    #[arg(long)]
    pub adaptive_experts: Option<String>,
    #[arg(long)]
    pub requirepass: Option<String>,
    #[arg(long)]
    pub maxclients: Option<u64>,
    /// Longest bulk string a request may carry, e.g. 512mb.
    #[arg(long)]
    pub proto_max_bulk_len: Option<ByteSize>,
    /// Largest unparsed input a client may have buffered, e.g. 1gb.
    #[arg(long)]
    pub client_query_buffer_limit: Option<ByteSize>,
    /// Redis's form, e.g. "normal 64mb 16mb 60".
    #[arg(long)]
    pub client_output_buffer_limit: Option<String>,
    /// Close clients idle this many seconds (0: never).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Who may run DEBUG: no, local (loopback clients) or yes.
    #[arg(long)]
    pub enable_debug_command: Option<String>,
    /// The ACL users file (ACL SAVE/LOAD; read at start when it exists).
    #[arg(long)]
    pub aclfile: Option<String>,
    /// Keyspace notification classes, Redis's letters (e.g. KEA).
    #[arg(long)]
    pub notify_keyspace_events: Option<String>,
    /// Local DRAM cache size, e.g. 64mb (0 disables it; default: none over embedded
    /// and shm pools, whose memory is this host's, 64mb over tcp).
    #[arg(long)]
    pub local_cache_size: Option<ByteSize>,
    /// embedded, shm, tcp or rdma.
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
    /// Runtime threads serving clients (default: one per core; 1 writes replies as
    /// Redis's event loop does).
    #[arg(long)]
    pub threads: Option<usize>,
    /// File holding the cluster secret (else DMC_CLUSTER_SECRET).
    #[arg(long)]
    pub secret_file: Option<PathBuf>,
    /// The CA (PEM) of an https manager's certificate.
    #[arg(long)]
    pub manager_ca_cert_file: Option<PathBuf>,
    /// Serve TLS clients on this port (0: none).
    #[arg(long)]
    pub tls_port: Option<u16>,
    /// The server certificate chain (PEM).
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// The server private key (PEM).
    #[arg(long)]
    pub tls_key_file: Option<PathBuf>,
    /// The CA certificate that signs client certificates (PEM).
    #[arg(long)]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// yes (require a client certificate), optional or no.
    #[arg(long, value_enum)]
    pub tls_auth_clients: Option<AuthClients>,
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
        if let Some(v) = &self.adaptive_experts {
            cfg.adaptive_experts = v.clone();
        }
        if let Some(v) = &self.requirepass {
            cfg.requirepass = v.clone();
        }
        if let Some(v) = self.maxclients {
            cfg.maxclients = v;
        }
        if let Some(v) = &self.secret_file {
            cfg.secret_file = Some(v.clone());
        }
        if let Some(v) = &self.manager_ca_cert_file {
            cfg.manager_ca_cert_file = Some(v.clone());
        }
        if let Some(v) = self.tls_port {
            cfg.tls_port = v;
        }
        for (flag, field) in [
            (&self.tls_cert_file, &mut cfg.tls_cert_file),
            (&self.tls_key_file, &mut cfg.tls_key_file),
            (&self.tls_ca_cert_file, &mut cfg.tls_ca_cert_file),
        ] {
            if let Some(v) = flag {
                *field = Some(v.clone());
            }
        }
        if let Some(v) = self.tls_auth_clients {
            cfg.tls_auth_clients = v;
        }
        if let Some(v) = self.proto_max_bulk_len {
            cfg.proto_max_bulk_len = v;
        }
        if let Some(v) = self.client_query_buffer_limit {
            cfg.client_query_buffer_limit = v;
        }
        if let Some(v) = &self.client_output_buffer_limit {
            cfg.client_output_buffer_limit = v.clone();
        }
        if let Some(v) = self.timeout {
            cfg.timeout = v;
        }
        if let Some(v) = &self.enable_debug_command {
            cfg.enable_debug_command = v.clone();
        }
        if let Some(v) = &self.aclfile {
            cfg.aclfile = v.clone();
        }
        if let Some(v) = &self.notify_keyspace_events {
            cfg.notify_keyspace_events = v.clone();
        }
        if let Some(v) = self.local_cache_size {
            cfg.local_cache_size = Some(v);
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
        if let Some(v) = self.threads {
            cfg.threads = Some(v);
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

impl Config {
    /// The TLS client port's settings.
    pub fn tls(&self) -> TlsSection {
        TlsSection {
            tls_port: self.tls_port,
            tls_cert_file: self.tls_cert_file.clone(),
            tls_key_file: self.tls_key_file.clone(),
            tls_ca_cert_file: self.tls_ca_cert_file.clone(),
            tls_auth_clients: self.tls_auth_clients,
        }
    }

    /// `client-output-buffer-limit` parsed over Redis's defaults.
    pub fn output_limits(&self) -> Result<OutputLimits> {
        OutputLimits::default()
            .parse_over(&self.client_output_buffer_limit)
            .map_err(|e| anyhow::anyhow!("client-output-buffer-limit: {e}"))
    }

    /// The aclfile, if one is configured.
    pub fn aclfile_path(&self) -> Option<std::path::PathBuf> {
        (!self.aclfile.is_empty()).then(|| std::path::PathBuf::from(&self.aclfile))
    }

    pub fn validate(&self) -> Result<()> {
        anyhow::ensure!(
            self.threads.is_none_or(|t| (1..=1024).contains(&t)),
            "threads must be 1..=1024"
        );
        anyhow::ensure!(
            RedisPolicy::parse(&self.maxmemory_policy).is_some(),
            "maxmemory-policy {:?} is not one of Redis's policies nor adaptive",
            self.maxmemory_policy
        );
        dmc_dht::adaptive::parse_experts(&self.adaptive_experts)
            .map_err(|e| anyhow::anyhow!("adaptive-experts: {e}"))?;
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
            dmc_engine::debug::Access::parse(&self.enable_debug_command).is_some(),
            "enable-debug-command must be no, local or yes"
        );
        anyhow::ensure!(
            dmc_engine::notify::parse(&self.notify_keyspace_events).is_some(),
            "notify-keyspace-events: use Redis's class letters (Ag$lshzxeKEtmdn)"
        );
        if let Some(path) = self.aclfile_path() {
            // A bad aclfile stops the agent, as it stops Redis.
            let pass = (!self.requirepass.is_empty()).then_some(self.requirepass.as_bytes());
            dmc_engine::acl_cmd::AclState::new(pass, Some(path))
                .map_err(|e| anyhow::anyhow!("aclfile: {e}"))?;
        }
        for (name, v) in [
            ("proto-max-bulk-len", self.proto_max_bulk_len),
            ("client-query-buffer-limit", self.client_query_buffer_limit),
        ] {
            anyhow::ensure!(
                v.0 >= MIN_BUFFER_LIMIT && v.0 <= i64::MAX as u64,
                "{name}: {}",
                out_of_range(MIN_BUFFER_LIMIT)
            );
        }
        self.output_limits()?;
        self.tls().validate()?;
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
