//! Builds a table on the `local` backend or on in-process memory nodes over `shm` or
//! over `rdma` on the software emulation of RC verbs.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use dmc_dht::{Clock, Dht, DhtConfig, Ownership};
use dmc_umo::{Pool, PoolConfig};
use dmc_verbs::backend::{self, BackendKind};
use dmc_verbs::rdma::{EmulatedFabric, RdmaResponder, RdmaTransport};
use dmc_verbs::server::{LoopbackNode, ServerOptions};
use dmc_verbs::{NodeConfig, RpcOptions, Storage, Transport};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Local,
    Shm,
    /// Two memory nodes reached with the `rdma` transport on an emulated fabric.
    Rdma,
}

/// Where a test's `ManualClock` starts: four hours past the wall clock at the first
/// call in this process. The table's clocks (LRU clock, expiry) count from the pool's
/// creation, which is wall time; a test clock behind it stamps every access 0 (LRU then
/// tells nothing apart) and never expires a key. A fixed date would do that once the
/// calendar passes it.
pub fn clock_start_ms() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        wall.as_millis() as u64 + 4 * 3_600_000
    })
}

/// Keeps the memory nodes of a test alive.
pub struct Harness {
    pub dht: Arc<Dht>,
    _dirs: Vec<tempfile::TempDir>,
    _nodes: Vec<LoopbackNode>,
}

pub fn pool_config(grace: Duration) -> PoolConfig {
    PoolConfig {
        replicas: 2,
        region_size: 8 << 20,
        segment_size: 1 << 20,
        grace,
        ..PoolConfig::default()
    }
}

/// A table with the default configuration, the system clock and no grace period.
pub async fn open_default(backend: Backend) -> Harness {
    open(
        backend,
        DhtConfig::default(),
        Arc::new(dmc_dht::SystemClock),
        Duration::ZERO,
    )
    .await
}

pub async fn open(
    backend: Backend,
    config: DhtConfig,
    clock: Arc<dyn Clock>,
    grace: Duration,
) -> Harness {
    let mut dirs = Vec::new();
    let mut servers = Vec::new();
    let pool = match backend {
        Backend::Local => Pool::embedded(256 << 20, pool_config(grace)).await.unwrap(),
        Backend::Shm | Backend::Rdma => {
            let fabric = EmulatedFabric::default();
            let mut nodes: Vec<Arc<dyn Transport>> = Vec::new();
            for id in 1..=2 {
                let dir = tempfile::tempdir().unwrap();
                let config = NodeConfig {
                    id,
                    capacity: 256 << 20,
                    storage: Storage::Dir(dir.path().to_path_buf()),
                    secret: None,
                };
                let options = ServerOptions {
                    rdma: (backend == Backend::Rdma)
                        .then(|| Arc::new(RdmaResponder::new(fabric.device()))),
                    ..ServerOptions::default()
                };
                let server = LoopbackNode::spawn_with(config, options).await.unwrap();
                let endpoint = server.endpoint.clone();
                nodes.push(if backend == Backend::Rdma {
                    let t =
                        RdmaTransport::connect(endpoint, RpcOptions::default(), fabric.device())
                            .await
                            .unwrap();
                    Arc::new(t)
                } else {
                    backend::connect(BackendKind::Shm, endpoint, RpcOptions::default())
                        .await
                        .unwrap()
                });
                dirs.push(dir);
                servers.push(server);
            }
            Pool::open(pool_config(grace), nodes).await.unwrap()
        }
    };
    let dht = Dht::open(pool, config, clock, Ownership::all(0, 1))
        .await
        .unwrap();
    Harness {
        dht,
        _dirs: dirs,
        _nodes: servers,
    }
}

/// A client of the shared pool (instance 1, epoch 1) owning `owned` as `shard`.
pub async fn client(
    nodes: &[LoopbackNode],
    id: u32,
    owned: std::ops::Range<u16>,
    shard: u32,
) -> Arc<Dht> {
    instance_client(nodes, id, owned, shard, 1, 1).await
}

/// A client of the pool whose superblock is region `super_region` (one cache
/// instance), owning `owned` under `shard` at `epoch`.
pub async fn instance_client(
    nodes: &[LoopbackNode],
    id: u32,
    owned: std::ops::Range<u16>,
    shard: u32,
    super_region: u16,
    epoch: u64,
) -> Arc<Dht> {
    let config = DhtConfig::default();
    let clock: Arc<dyn Clock> = Arc::new(dmc_dht::SystemClock);
    instance_client_with(
        nodes,
        id,
        owned,
        shard,
        (super_region, epoch),
        config,
        clock,
    )
    .await
}

/// [`instance_client`] (`instance`: superblock region and epoch) with a table config
/// and a clock.
pub async fn instance_client_with(
    nodes: &[LoopbackNode],
    id: u32,
    owned: std::ops::Range<u16>,
    shard: u32,
    (super_region, epoch): (u16, u64),
    config: DhtConfig,
    clock: Arc<dyn Clock>,
) -> Arc<Dht> {
    // Named as an agent names itself to the nodes (its prepared transactions are then
    // settled, not dropped, when it dies mid-commit).
    let options = RpcOptions {
        client: 0x00c1_1e47_0000 + u64::from(id),
        ..RpcOptions::default()
    };
    let mut ts = Vec::new();
    for n in nodes {
        ts.push(
            backend::connect(BackendKind::Shm, n.endpoint.clone(), options.clone())
                .await
                .unwrap(),
        );
    }
    let pool = Pool::open(
        PoolConfig {
            replicas: 2,
            region_size: 16 << 20,
            segment_size: 1 << 20,
            grace: Duration::from_millis(50),
            client_id: id,
            super_region,
            ..PoolConfig::default()
        },
        ts,
    )
    .await
    .unwrap();
    let own = dmc_dht::owner::Ownership::none();
    own.assign(owned, Some(dmc_dht::owner::Lease { shard, epoch }));
    Dht::open(pool, config, clock, own).await.unwrap()
}

/// Two memory nodes with their regions in files under `dirs`, reached over `shm`.
pub async fn two_nodes(dirs: &[tempfile::TempDir]) -> Vec<LoopbackNode> {
    let mut nodes = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        nodes.push(
            LoopbackNode::spawn(NodeConfig {
                id: i as u32 + 1,
                capacity: 512 << 20,
                storage: Storage::Dir(d.path().to_path_buf()),
                secret: None,
            })
            .await
            .unwrap(),
        );
    }
    nodes
}
