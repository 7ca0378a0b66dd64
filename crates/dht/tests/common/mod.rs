//! Builds a table on the `local` backend or on in-process memory nodes over `shm`.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use dmc_dht::{Clock, Dht, DhtConfig, Ownership};
use dmc_umo::{Pool, PoolConfig};
use dmc_verbs::backend::{self, BackendKind};
use dmc_verbs::server::LoopbackNode;
use dmc_verbs::{NodeConfig, RpcOptions, Storage, Transport};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Local,
    Shm,
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
        Backend::Shm => {
            let mut nodes: Vec<Arc<dyn Transport>> = Vec::new();
            for id in 1..=2 {
                let dir = tempfile::tempdir().unwrap();
                let config = NodeConfig {
                    id,
                    capacity: 256 << 20,
                    storage: Storage::Dir(dir.path().to_path_buf()),
                    secret: None,
                };
                let server = LoopbackNode::spawn(config).await.unwrap();
                nodes.push(
                    backend::connect(
                        BackendKind::Shm,
                        server.endpoint.clone(),
                        RpcOptions::default(),
                    )
                    .await
                    .unwrap(),
                );
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
