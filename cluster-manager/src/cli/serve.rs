//! `cluster-manager serve`: its flags and TOML config (flags over the file), and the
//! daemon itself: the manager, the agent launcher, the loop returning vacated regions,
//! and the HTTP API. Called by [`super::run`]. Its stdout carries only the
//! `cluster-manager ready listen=ADDR` line scripts and tests wait for; logs go to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use dmc_proto::ByteSize;
use dmc_proto::cluster::PoolTransport;
use serde::{Deserialize, Serialize};

use crate::api::{App, router};
use crate::launcher::{LocalLauncher, LocalSettings};
use crate::manager::{Manager, PoolSettings};
use crate::scale::ScaleTimes;
use crate::state::StateFile;

/// `serve`'s configuration: a TOML file (`--config`) with flags over it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct ServeConfig {
    pub listen: String,
    /// The durable state file.
    pub state: PathBuf,
    /// Logical shards of each new instance (existing instances keep theirs).
    pub shards: u32,
    /// A member missing heartbeats this long is reported dead.
    pub lease_ms: u64,
    pub log: String,
    /// The memory pool agents open.
    pub pool: PoolSettings,
    pub launcher: LauncherConfig,
    /// The CA of the memory nodes' certificates: reach them over TLS (plain TCP if
    /// unset).
    pub node_tls_ca_cert_file: Option<PathBuf>,
    /// Serve the admin API over https with this certificate chain and key (PEM);
    /// clients then use an `https://` URL and trust its CA (`manager-ca-cert-file`).
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// The CA that signed `tls-cert-file`, which launched agents are told to trust.
    pub tls_ca_cert_file: Option<PathBuf>,
    /// File holding the cluster secret (else `DMC_CLUSTER_SECRET`): every API request,
    /// every memory node and every agent must present it. Required.
    pub secret_file: Option<PathBuf>,
    /// Bytes a second copied into a new region copy (re-replication after a node
    /// failure): bounded so foreground traffic keeps the memory nodes' bandwidth.
    pub fill_rate: ByteSize,
    /// Restore every region's `replicas` copies in the background after a memory node
    /// fails.
    pub rereplicate: bool,
    /// Move primary roles off memory nodes agents see as slow (automatic load
    /// balancing).
    pub balance: bool,
    /// How often the balancer looks at the agents' latency reports (ms).
    pub balance_interval_ms: u64,
    /// How many times slower than a node holding a backup a node must be, for two
    /// windows in a row (and by at least 1 ms), before a primary moves off it.
    pub balance_factor: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct LauncherConfig {
    /// The `compute-agent` binary (default: the one next to this binary).
    pub agent_binary: Option<PathBuf>,
    /// A TOML config every launched agent gets.
    pub agent_config: Option<PathBuf>,
    /// Where launched agents log (default: `agents/` beside the state file).
    pub log_dir: Option<PathBuf>,
    /// Address launched agents listen on.
    pub bind: String,
    /// Agents get the first free port from here (0: any free port).
    pub port_base: u16,
    /// How long a stopping agent may drain its clients before it is killed.
    pub drain_ms: u64,
    /// How long `agents scale` waits for started agents to serve.
    pub ready_ms: u64,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: "127.0.0.1:7100".into(),
            state: PathBuf::from("dmc-cluster.json"),
            shards: 1024,
            lease_ms: 5000,
            log: "info".into(),
            pool: PoolSettings::default(),
            launcher: LauncherConfig::default(),
            secret_file: None,
            node_tls_ca_cert_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_cert_file: None,
            fill_rate: ByteSize(256 << 20),
            rereplicate: true,
            balance: true,
            balance_interval_ms: 10_000,
            balance_factor: 3.0,
        }
    }
}

impl Default for LauncherConfig {
    fn default() -> Self {
        LauncherConfig {
            agent_binary: None,
            agent_config: None,
            log_dir: None,
            bind: "127.0.0.1".into(),
            port_base: 0,
            drain_ms: 10_000,
            ready_ms: 60_000,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// TOML config file; flags override it.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    #[arg(long)]
    listen: Option<String>,
    /// The durable state file.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Logical shards of each new instance (existing instances keep theirs).
    #[arg(long)]
    shards: Option<u32>,
    /// A member missing heartbeats this long is reported dead.
    #[arg(long)]
    lease_ms: Option<u64>,
    #[arg(long)]
    log: Option<String>,
    /// shm, tcp or rdma: how agents reach the memory nodes.
    #[arg(long, value_parser = parse_transport)]
    pool_transport: Option<PoolTransport>,
    /// Copies of every region.
    #[arg(long)]
    replicas: Option<usize>,
    #[arg(long)]
    region_size: Option<ByteSize>,
    #[arg(long)]
    segment_size: Option<ByteSize>,
    /// The compute-agent binary the launcher starts.
    #[arg(long)]
    agent_binary: Option<PathBuf>,
    /// A TOML config every launched agent gets.
    #[arg(long)]
    agent_config: Option<PathBuf>,
    /// Where launched agents log.
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// How long a stopping agent may drain its clients.
    #[arg(long)]
    drain_ms: Option<u64>,
    /// Launched agents get the first free port from here (0: any).
    #[arg(long)]
    agent_port_base: Option<u16>,
    /// Serve the admin API over https with this certificate chain (PEM).
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// The https private key (PEM).
    #[arg(long)]
    tls_key_file: Option<PathBuf>,
    /// The CA of the API's certificate, handed to launched agents.
    #[arg(long)]
    tls_ca_cert_file: Option<PathBuf>,
    /// Reach memory nodes over TLS, trusting this CA (PEM).
    #[arg(long)]
    node_tls_ca_cert_file: Option<PathBuf>,
    /// Bytes a second copied into a new region copy (e.g. 256mb).
    #[arg(long)]
    fill_rate: Option<ByteSize>,
    /// Restore regions' copies after a memory node fails (true or false).
    #[arg(long)]
    rereplicate: Option<bool>,
    /// Move primaries off memory nodes agents see as slow (true or false).
    #[arg(long)]
    balance: Option<bool>,
    /// The load balancer's window (ms).
    #[arg(long)]
    balance_interval_ms: Option<u64>,
    /// How much slower a node must be before its primaries move (e.g. 3.0).
    #[arg(long)]
    balance_factor: Option<f64>,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    pub(super) print_config: bool,
}

fn parse_transport(s: &str) -> Result<PoolTransport, String> {
    match s {
        "shm" => Ok(PoolTransport::Shm),
        "tcp" => Ok(PoolTransport::Tcp),
        "rdma" => Ok(PoolTransport::Rdma),
        _ => Err(format!("{s}: expected shm, tcp or rdma")),
    }
}

impl ServeArgs {
    pub fn resolve(&self) -> Result<ServeConfig> {
        let mut c: ServeConfig = dmc_process::load_config(self.config.as_deref())?;
        macro_rules! over {
            ($($field:ident => $($path:ident).+),* $(,)?) => {
                $(if let Some(v) = &self.$field { c.$($path).+ = v.clone().into(); })*
            };
        }
        over!(listen => listen, state => state, shards => shards, lease_ms => lease_ms,
            log => log, pool_transport => pool.transport, replicas => pool.replicas,
            region_size => pool.region_size, segment_size => pool.segment_size,
            drain_ms => launcher.drain_ms, agent_port_base => launcher.port_base,
            fill_rate => fill_rate, rereplicate => rereplicate, balance => balance,
            balance_interval_ms => balance_interval_ms, balance_factor => balance_factor);
        if let Some(v) = &self.agent_binary {
            c.launcher.agent_binary = Some(v.clone());
        }
        if let Some(v) = &self.agent_config {
            c.launcher.agent_config = Some(v.clone());
        }
        if let Some(v) = &self.log_dir {
            c.launcher.log_dir = Some(v.clone());
        }
        for (flag, field) in [
            (&self.tls_cert_file, &mut c.tls_cert_file),
            (&self.tls_key_file, &mut c.tls_key_file),
            (&self.tls_ca_cert_file, &mut c.tls_ca_cert_file),
            (&self.node_tls_ca_cert_file, &mut c.node_tls_ca_cert_file),
        ] {
            if let Some(v) = flag {
                *field = Some(v.clone());
            }
        }
        Ok(c)
    }
}
pub(super) fn serve(config: ServeConfig) -> Result<()> {
    dmc_process::init_logging(&config.log);
    let secret = dmc_process::secret::ClusterSecret::load(config.secret_file.as_deref())?.context(
        "the manager needs the cluster secret: set secret-file (or --secret-file) or \
             DMC_CLUSTER_SECRET",
    )?;
    dmc_process::secret::install(Some(secret));
    let state = config.state.clone();
    let manager = Arc::new(
        Manager::open(
            StateFile::new(&state),
            config.shards,
            Duration::from_millis(config.lease_ms),
            config.pool.clone(),
        )
        .with_context(|| format!("opening state {}", state.display()))?
        .with_node_tls(
            config
                .node_tls_ca_cert_file
                .as_deref()
                .map(dmc_verbs::tls::ClientTls::from_ca_file)
                .transpose()
                .context("the memory nodes' TLS CA")?,
        ),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listen = &config.listen;
        let l = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let addr = l.local_addr()?;
        let l_cfg = &config.launcher;
        let log_dir = l_cfg.log_dir.clone().unwrap_or_else(|| {
            state
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("agents"), |p| p.join("agents"))
        });
        let launcher = LocalLauncher::new(LocalSettings {
            binary: l_cfg
                .agent_binary
                .clone()
                .unwrap_or_else(LocalLauncher::sibling_binary),
            config: l_cfg.agent_config.clone(),
            log_dir,
            bind: l_cfg.bind.clone(),
            manager_url: match config.tls_cert_file {
                Some(_) => format!("https://{addr}"),
                None => format!("http://{addr}"),
            },
            manager_ca: config.tls_ca_cert_file.clone(),
            port_base: l_cfg.port_base,
        });
        let app = Arc::new(App {
            manager,
            launcher: Arc::new(launcher),
            times: ScaleTimes {
                ready: Duration::from_millis(l_cfg.ready_ms),
                drain: Duration::from_millis(l_cfg.drain_ms),
            },
            scaling: tokio::sync::Mutex::new(()),
            metrics: dmc_process::metrics::install(dmc_process::metrics::manager::ALL),
            fill_rate: config.fill_rate.0,
        });
        // Returns draining regions once every agent vacated them (after a grace
        // period for reads still in flight).
        {
            let manager = app.manager.clone();
            tokio::spawn(async move {
                let mut ready_since: std::collections::HashMap<u16, std::time::Instant> =
                    std::collections::HashMap::new();
                loop {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let done = manager.vacated_regions();
                    ready_since.retain(|r, _| done.contains(r));
                    for r in done {
                        let since = *ready_since.entry(r).or_insert_with(std::time::Instant::now);
                        if since.elapsed() < Duration::from_secs(1) {
                            continue;
                        }
                        if let Err(e) = manager.return_region(r).await {
                            tracing::warn!(region = r, error = %e, "returning a region failed; retrying");
                        }
                    }
                }
            });
        }
        // Agent failover: an agent silent for a whole lease leaves its instance, its
        // shards go to the live agents, and a launched one is replaced.
        crate::failover::spawn(app.clone(), Duration::from_millis(config.lease_ms));
        if config.rereplicate {
            crate::rereplicate::spawn(app.clone(), Duration::from_millis(config.lease_ms));
        }
        // What a previous manager process left half-done (a migration, a fill, a
        // drain) is finished now that agents can report to this one.
        {
            let app = app.clone();
            tokio::spawn(async move {
                let done = app.manager.finish_unfinished(app.fill_rate).await;
                if done != crate::manager::Resumed::default() {
                    tracing::info!(?done, "finished what a previous manager started");
                }
            });
        }
        if config.balance {
            crate::balance::spawn(
                app.clone(),
                Duration::from_millis(config.balance_interval_ms.max(100)),
                config.balance_factor.max(1.0),
            );
        }
        tracing::info!(%addr, state = %state.display(), "cluster manager serving");
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "cluster-manager ready listen={addr}")?;
            out.flush()?;
        }
        let tls = match (&config.tls_cert_file, &config.tls_key_file) {
            (Some(cert), Some(key)) => Some(
                dmc_verbs::tls::ServerTls::from_files(cert, key)
                    .context("the admin API's TLS certificate")?
                    .acceptor(),
            ),
            (None, None) => None,
            _ => anyhow::bail!("tls-cert-file and tls-key-file go together"),
        };
        axum::serve(crate::listener::GuardedListener::new(l, tls)?, router(app))
            .with_graceful_shutdown(dmc_process::shutdown_signal())
            .await?;
        Ok(())
    })
}
