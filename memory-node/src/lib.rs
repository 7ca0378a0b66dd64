//! The `memory-node` process: configuration and the serve loop around
//! [`dmc_verbs::NodeCore`].
//!
//! `main.rs` parses flags and calls [`run`]; tests build a [`Config`] and call [`run`]
//! the same way. Once listening, the node prints one line to stdout,
//! `memory-node ready listen=ADDR node=ID`, so a launcher that asked for port 0 can learn
//! the real port.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use dmc_proto::ByteSize;
use dmc_verbs::server::{self, Listener, ServerOptions};
use dmc_verbs::{Endpoint, NodeConfig, NodeCore, Storage};
use serde::{Deserialize, Serialize};

/// Effective configuration: the TOML file, then flags on top.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// This node's id in the pool; unique among memory nodes.
    pub id: u32,
    /// `host:port` or `unix:/path`.
    pub listen: String,
    /// Directory of region files; a tmpfs (`/dev/shm`) keeps the pool in memory.
    /// Defaults to `/dev/shm/dmc-node-<id>`.
    pub dir: Option<PathBuf>,
    /// Most bytes of regions this node will hold.
    pub capacity: ByteSize,
    /// File holding the cluster secret every peer must present (else the
    /// `DMC_CLUSTER_SECRET` environment variable). Required: the node serves no request
    /// without it.
    pub secret_file: Option<PathBuf>,
    /// Largest RPC frame accepted.
    pub max_frame: ByteSize,
    /// Serve the RPC port over TLS with this certificate chain (PEM) and key; plain
    /// TCP if unset.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// The CA of other nodes' certificates, for dialling a peer over TLS (region
    /// copies).
    pub tls_ca_cert_file: Option<PathBuf>,
    /// The CA (PEM) of an `https://` manager's certificate.
    pub manager_ca_cert_file: Option<PathBuf>,
    /// `tracing` filter, e.g. `info` or `dmc_verbs=debug`.
    pub log: String,
    /// Where to serve Prometheus metrics (`host:port`); none if unset.
    pub metrics_listen: Option<String>,
    /// The cluster manager's admin API (`http://host:port`) to register with; none if
    /// unset.
    pub manager: Option<String>,
    /// Serve one-sided RDMA verbs on this device (`auto`: the first one) besides the
    /// RPC port; needs the `rdma` build. Unset: no RDMA.
    pub rdma_device: Option<String>,
    pub rdma_port: u8,
    /// The GID table index (RoCE v2: usually 1 or 3; InfiniBand: 0).
    pub rdma_gid_index: u8,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            id: 1,
            listen: "127.0.0.1:7000".into(),
            dir: None,
            capacity: ByteSize(4 << 30),
            secret_file: None,
            max_frame: ByteSize(dmc_verbs::wire::DEFAULT_MAX_FRAME),
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_cert_file: None,
            manager_ca_cert_file: None,
            log: "info".into(),
            metrics_listen: None,
            manager: None,
            rdma_device: None,
            rdma_port: 1,
            rdma_gid_index: 0,
        }
    }
}

/// DMC memory node: holds replicated pool regions and serves commit RPCs.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Args {
    /// TOML config file; flags override it.
    #[arg(long, short = 'c')]
    pub config: Option<PathBuf>,
    /// Node id, unique in the pool.
    #[arg(long)]
    pub id: Option<u32>,
    /// Listen address: host:port or unix:/path (port 0 picks a free port).
    #[arg(long)]
    pub listen: Option<String>,
    /// Directory for region files (default /dev/shm/dmc-node-<id>).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Capacity in bytes, e.g. 4gb.
    #[arg(long)]
    pub capacity: Option<ByteSize>,
    /// File holding the cluster secret.
    #[arg(long)]
    pub secret_file: Option<PathBuf>,
    /// Largest RPC frame accepted, e.g. 64mb.
    #[arg(long)]
    pub max_frame: Option<ByteSize>,
    /// Serve the RPC port over TLS with this certificate chain (PEM).
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// The TLS private key (PEM).
    #[arg(long)]
    pub tls_key_file: Option<PathBuf>,
    /// The CA of peer nodes' certificates (for region copies over TLS).
    #[arg(long)]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// The CA (PEM) of an https manager's certificate.
    #[arg(long)]
    pub manager_ca_cert_file: Option<PathBuf>,
    /// Log filter (also RUST_LOG).
    #[arg(long)]
    pub log: Option<String>,
    /// Serve Prometheus metrics on host:port.
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// Register with the cluster manager at this URL (http://host:port) and heartbeat.
    #[arg(long)]
    pub manager: Option<String>,
    /// Serve one-sided RDMA verbs on this device (`auto`: the first); needs the `rdma`
    /// build.
    #[arg(long)]
    pub rdma_device: Option<String>,
    /// The RDMA device's GID index (RoCE v2: usually 1 or 3).
    #[arg(long)]
    pub rdma_gid_index: Option<u8>,
    /// Validate the configuration and exit.
    #[arg(long)]
    pub check_config: bool,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    pub print_config: bool,
}

impl Args {
    /// Loads the config file (if any) and applies the flags.
    pub fn resolve(&self) -> Result<Config> {
        let mut cfg: Config = dmc_process::load_config(self.config.as_deref())?;
        if let Some(v) = self.id {
            cfg.id = v;
        }
        if let Some(v) = &self.listen {
            cfg.listen = v.clone();
        }
        if let Some(v) = &self.dir {
            cfg.dir = Some(v.clone());
        }
        if let Some(v) = self.capacity {
            cfg.capacity = v;
        }
        if let Some(v) = &self.secret_file {
            cfg.secret_file = Some(v.clone());
        }
        if let Some(v) = self.max_frame {
            cfg.max_frame = v;
        }
        for (flag, field) in [
            (&self.tls_cert_file, &mut cfg.tls_cert_file),
            (&self.tls_key_file, &mut cfg.tls_key_file),
            (&self.tls_ca_cert_file, &mut cfg.tls_ca_cert_file),
            (&self.manager_ca_cert_file, &mut cfg.manager_ca_cert_file),
        ] {
            if let Some(v) = flag {
                *field = Some(v.clone());
            }
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
        if let Some(v) = &self.rdma_device {
            cfg.rdma_device = Some(v.clone());
        }
        if let Some(v) = self.rdma_gid_index {
            cfg.rdma_gid_index = v;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

impl Config {
    pub fn validate(&self) -> Result<()> {
        self.listen
            .parse::<Endpoint>()
            .map_err(|e| anyhow::anyhow!("listen: {e}"))?;
        anyhow::ensure!(self.capacity.0 > 0, "capacity must be positive");
        anyhow::ensure!(
            self.max_frame.0 >= 1 << 20,
            "max_frame must be at least 1mb"
        );
        anyhow::ensure!(
            self.tls_cert_file.is_some() == self.tls_key_file.is_some(),
            "tls_cert_file and tls_key_file go together"
        );
        Ok(())
    }

    pub fn dir(&self) -> PathBuf {
        self.dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("/dev/shm/dmc-node-{}", self.id)))
    }

    /// The cluster secret (required).
    fn secret(&self) -> Result<dmc_process::secret::ClusterSecret> {
        dmc_process::secret::ClusterSecret::load(self.secret_file.as_deref())?.context(
            "a memory node needs the cluster secret: set secret_file (or --secret-file) \
             or DMC_CLUSTER_SECRET",
        )
    }
}

/// Runs the node until `shutdown` completes.
pub async fn run(cfg: Config, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
    let secret = cfg.secret()?;
    // Heartbeats to the manager carry it too.
    dmc_process::secret::install(Some(secret.clone()));
    dmc_process::secret::install_manager_ca(cfg.manager_ca_cert_file.as_deref())?;
    let dir = cfg.dir();
    let rdma = serve_rdma(&cfg)?;
    let core = NodeCore::open(NodeConfig {
        id: cfg.id,
        capacity: cfg.capacity.0,
        storage: Storage::Dir(dir.clone()),
        secret: Some(secret.bytes().clone()),
    })
    .with_context(|| format!("opening region directory {}", dir.display()))?;
    let endpoint: Endpoint = cfg
        .listen
        .parse()
        .map_err(|e| anyhow::anyhow!("listen: {e}"))?;
    let listener = Listener::bind(&endpoint)
        .await
        .context("binding listen address")?;
    let bound = listener.endpoint()?;
    if let Some(addr) = &cfg.metrics_listen {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding metrics address {addr}"))?;
        let core = core.clone();
        let handle = dmc_process::metrics::install(dmc_process::metrics::node::ALL);
        tokio::spawn(dmc_process::metrics::serve(l, handle, move || {
            collect(&core.stats())
        }));
    }
    let stats = core.stats();
    tracing::info!(
        node = cfg.id,
        listen = %bound,
        dir = %dir.display(),
        capacity = cfg.capacity.0,
        regions = stats.regions,
        "memory node serving"
    );
    if let Some(url) = &cfg.manager {
        dmc_process::membership::spawn(
            url.clone(),
            dmc_process::membership::Registration::Node {
                id: cfg.id,
                endpoint: bound.to_string(),
                capacity: cfg.capacity.0,
            },
            std::time::Duration::from_secs(1),
        );
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "memory-node ready listen={bound} node={}", cfg.id)?;
        out.flush()?;
    }
    server::serve(
        core,
        listener,
        ServerOptions {
            max_frame: cfg.max_frame.0,
            tls: match (&cfg.tls_cert_file, &cfg.tls_key_file) {
                (Some(c), Some(k)) => Some(dmc_verbs::tls::ServerTls::from_files(c, k)?),
                _ => None,
            },
            peer_tls: cfg
                .tls_ca_cert_file
                .as_deref()
                .map(dmc_verbs::tls::ClientTls::from_ca_file)
                .transpose()?,
            rdma,
        },
        shutdown,
    )
    .await;
    tracing::info!("memory node stopped");
    Ok(())
}

/// The node's RDMA side, when the config names a device: opening it fails loudly (a
/// build without the feature, no such device) rather than serving without RDMA.
fn serve_rdma(cfg: &Config) -> Result<Option<Arc<dmc_verbs::rdma::RdmaResponder>>> {
    let Some(name) = &cfg.rdma_device else {
        return Ok(None);
    };
    let choice = dmc_verbs::rdma::DeviceChoice {
        name: (name != "auto").then(|| name.clone()),
        port: cfg.rdma_port,
        gid_index: cfg.rdma_gid_index,
    };
    let device = dmc_verbs::rdma::open_device(&choice)
        .context("rdma_device")?
        .ok_or_else(|| {
            anyhow::anyhow!("rdma_device = {name:?}: no such RDMA device on this machine")
        })?;
    anyhow::ensure!(
        device.atomics_coherent_with_cpu(),
        "rdma_device {}: its atomics are not atomic against the CPU's (atomic_cap is not \
         IBV_ATOMIC_GLOB), and this node's commit locks are CPU atomics on the words agents \
         CAS through the NIC; serve this pool over tcp",
        device.name()
    );
    tracing::info!(device = %device.name(), "serving one-sided RDMA verbs");
    Ok(Some(Arc::new(dmc_verbs::rdma::RdmaResponder::new(device))))
}

/// Copies the node's counters into the metrics recorder (run before every scrape);
/// request latencies and verb counts are recorded as requests are served.
pub fn collect(s: &dmc_verbs::wire::NodeStats) {
    use dmc_process::metrics::{node, set_counter as counter, set_gauge as gauge};
    gauge(node::CAPACITY, s.capacity);
    gauge(node::USED, s.used);
    gauge(node::REGIONS, u64::from(s.regions));
    counter(node::PREPARED, s.prepared);
    counter(node::COMMITTED, s.committed);
    counter(node::ABORTED, s.aborted);
    counter(node::CONFLICTS, s.conflicts);
    counter(node::STALE_EPOCH_REJECTS, s.stale_epoch_rejects);
    counter(node::RPC_ERRORS, s.rpc_errors);
    gauge(node::UPTIME, s.uptime_ms / 1000);
}

#[cfg(test)]
mod tests {
    /// Everything the node exports is in its catalog (request latencies and verb
    /// counts appear once the network serves requests; the e2e tests scrape them).
    #[test]
    fn metrics_follow_the_catalog() {
        let handle = dmc_process::metrics::install(dmc_process::metrics::node::ALL);
        super::collect(&Default::default());
        let exported = dmc_process::metrics::names_in(&handle.render());
        let declared: std::collections::BTreeSet<String> = dmc_process::metrics::node::ALL
            .iter()
            .map(|d| d.name.to_string())
            .collect();
        assert!(exported.is_subset(&declared), "{exported:?}");
        assert!(exported.contains("dmc_node_committed_total"));
    }

    use super::*;

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.toml");
        std::fs::write(
            &path,
            "id = 3\ncapacity = \"1gb\"\nlisten = \"127.0.0.1:7100\"\n",
        )
        .unwrap();
        let args = Args::parse_from([
            "memory-node",
            "-c",
            path.to_str().unwrap(),
            "--capacity",
            "2mb",
        ]);
        let cfg = args.resolve().unwrap();
        assert_eq!(
            (cfg.id, cfg.capacity.0, cfg.listen.as_str()),
            (3, 2 << 20, "127.0.0.1:7100")
        );
        assert_eq!(cfg.dir(), PathBuf::from("/dev/shm/dmc-node-3"));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_rejected() {
        assert!(toml::from_str::<Config>("bogus = 1").is_err());
        let args = Args::parse_from(["memory-node", "--listen", "nowhere"]);
        assert!(args.resolve().is_err());
    }

    #[test]
    fn shipped_example_config_is_valid() {
        let text = include_str!("../memory-node.example.toml");
        let cfg: Config = toml::from_str(text).unwrap();
        cfg.validate().unwrap();
    }

    /// Asking for RDMA where it cannot be served stops the node with the reason
    /// (a build without the feature, or no such device here), never a silent tcp-only
    /// node.
    #[test]
    fn an_rdma_device_that_cannot_be_opened_is_an_error() {
        let args = Args::parse_from(["memory-node", "--rdma-device", "auto"]);
        let cfg = args.resolve().unwrap();
        assert_eq!(cfg.rdma_device.as_deref(), Some("auto"));
        match serve_rdma(&cfg) {
            Err(e) => {
                let msg = format!("{e:#}");
                assert!(
                    msg.contains("no RDMA support") || msg.contains("no such RDMA device"),
                    "{msg}"
                );
            }
            Ok(Some(_)) => eprintln!("this machine has an RDMA device"),
            Ok(None) => panic!("a configured device is never silently skipped"),
        }
        let plain = Args::parse_from(["memory-node"]).resolve().unwrap();
        assert!(serve_rdma(&plain).unwrap().is_none());
    }
}
