//! Opening the memory pool the agent runs on: the embedded in-process pool of a
//! standalone agent, or a cluster's memory nodes (over `shm` or `tcp`, connected on
//! first use), growing only by regions the cluster manager grants. Called once by
//! [`crate::run`]; it never touches the hash table or serves a client.

use std::sync::Arc;

use anyhow::{Context, Result};
use dmc_proto::cluster::{ClusterMap, PoolTransport};
use dmc_umo::{Pool, PoolConfig};
use dmc_verbs::{BackendKind, Endpoint, RpcOptions};

use crate::config::{PoolBackend, PoolSection};

/// Regions granted by the cluster manager: the pool of a cluster member grows only
/// through it (on-demand allocation within the instance's maxmemory).
pub(crate) struct ManagerRegions {
    pub(crate) url: String,
    pub(crate) instance: String,
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
/// `verb_timeout`: how long a memory node may take to answer (default: the RPC
/// default); a cluster bounds it by its lease, so a hung node counts as failed about
/// when the manager fails it over. `client`: this process's id to the memory nodes.
pub(crate) async fn open_pool(
    cfg: &PoolSection,
    super_region: u16,
    source: Option<Arc<dyn dmc_umo::RegionSource>>,
    verb_timeout: Option<std::time::Duration>,
    client: u64,
) -> Result<(Arc<Pool>, Arc<NodeDialer>)> {
    let mut lazy = Vec::new();
    let mut dial = None;
    let revoked = Arc::new(std::sync::atomic::AtomicBool::new(false));
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
        PoolBackend::Shm | PoolBackend::Tcp | PoolBackend::Rdma => {
            let kind = match cfg.backend {
                PoolBackend::Shm => BackendKind::Shm,
                PoolBackend::Rdma => {
                    dmc_verbs::rdma::choose_device(dmc_verbs::rdma::DeviceChoice {
                        name: cfg.rdma_device.clone(),
                        port: cfg.rdma_port,
                        gid_index: cfg.rdma_gid_index,
                    });
                    BackendKind::Rdma
                }
                _ => BackendKind::Tcp,
            };
            // Memory nodes demand the cluster secret (installed by `run`).
            let secret = dmc_process::secret::installed()
                .map(|s| s.bytes().clone())
                .unwrap_or_default();
            let tls = cfg
                .tls_ca_cert_file
                .as_deref()
                .map(dmc_verbs::tls::ClientTls::from_ca_file)
                .transpose()
                .context("the memory nodes' TLS CA")?;
            let mut nodes: Vec<Arc<dyn dmc_verbs::Transport>> = Vec::new();
            let on_demand = cfg.node_ids.len() == cfg.nodes.len();
            for (i, n) in cfg.nodes.iter().enumerate() {
                let ep: Endpoint = n
                    .parse()
                    .map_err(|e| anyhow::anyhow!("pool node {n}: {e}"))?;
                let defaults = RpcOptions::default();
                let options = RpcOptions {
                    secret: secret.clone(),
                    tls: tls.clone(),
                    timeout: verb_timeout.unwrap_or(defaults.timeout),
                    client,
                    revoked: Some(revoked.clone()),
                    ..defaults
                };
                if on_demand {
                    dial = Some((kind, options.clone()));
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
    Ok((
        pool,
        Arc::new(NodeDialer {
            dial,
            connections: parking_lot::Mutex::new(lazy),
            revoked,
        }),
    ))
}

/// The agent's memory-node connections that open on demand, and how to open one to
/// a node a cluster map names that the pool does not reach yet (a node added to the
/// cluster after this agent started): the pool gains it, the heartbeats report it,
/// and the manager may then place copies there.
pub(crate) struct NodeDialer {
    /// The backend and options of the first nodes (none: every node was connected up
    /// front, or the pool is embedded, and no node can be added).
    dial: Option<(BackendKind, RpcOptions)>,
    connections: parking_lot::Mutex<Vec<Arc<dmc_verbs::LazyTransport>>>,
    /// A memory node said the manager revoked this process (it was failed over).
    revoked: Arc<std::sync::atomic::AtomicBool>,
}

impl NodeDialer {
    /// Whether a memory node answered that the manager revoked this process: it was
    /// failed over (paused or cut off too long), and nothing it sends runs any more.
    pub(crate) fn revoked(&self) -> bool {
        self.revoked.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The on-demand connections (to close idle ones and count open ones).
    pub(crate) fn connections(&self) -> Vec<Arc<dmc_verbs::LazyTransport>> {
        self.connections.lock().clone()
    }

    /// Adds to `pool` every node of `spec` it does not reach; returns their ids.
    pub(crate) fn add_new(&self, pool: &Pool, spec: &dmc_proto::cluster::PoolSpec) -> Vec<u32> {
        let Some((kind, options)) = &self.dial else {
            return Vec::new();
        };
        let known = pool.nodes().iter().map(|n| n.node()).collect::<Vec<_>>();
        let mut added = Vec::new();
        for (id, endpoint) in spec.node_ids.iter().zip(&spec.nodes) {
            if known.contains(id) {
                continue;
            }
            let ep: Endpoint = match endpoint.parse() {
                Ok(ep) => ep,
                Err(e) => {
                    tracing::warn!(node = id, endpoint, error = %e, "a new memory node's endpoint does not parse");
                    continue;
                }
            };
            let t = Arc::new(dmc_verbs::LazyTransport::new(
                *id,
                *kind,
                ep,
                options.clone(),
            ));
            match pool.add_node(t.clone()) {
                Ok(true) => {
                    self.connections.lock().push(t);
                    added.push(*id);
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(node = id, error = %e, "cannot add a memory node"),
            }
        }
        if !added.is_empty() {
            tracing::info!(nodes = ?added, "reaching memory nodes the cluster gained");
        }
        added
    }
}

/// The pool settings a cluster map names, unless the agent's own config names a pool.
pub(crate) fn pool_from_map(own: &PoolSection, map: &ClusterMap) -> PoolSection {
    if own.backend != PoolBackend::Embedded {
        return own.clone();
    }
    PoolSection {
        backend: match map.pool.transport {
            PoolTransport::Shm => PoolBackend::Shm,
            PoolTransport::Tcp => PoolBackend::Tcp,
            PoolTransport::Rdma => PoolBackend::Rdma,
        },
        nodes: map.pool.nodes.clone(),
        node_ids: map.pool.node_ids.clone(),
        replicas: map.pool.replicas,
        region_size: map.pool.region_size,
        segment_size: map.pool.segment_size,
        ..own.clone()
    }
}
