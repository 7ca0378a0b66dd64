//! What the pool's integration tests share: small pools over in-process memory-node
//! servers reached over `shm`, and the bytes of each region copy.

// Each test binary uses part of this.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use dmc_umo::PoolConfig;
use dmc_verbs::backend::{self, BackendKind};
use dmc_verbs::server::LoopbackNode;
use dmc_verbs::{NodeConfig, RpcOptions, Storage, Transport};

pub fn small(replicas: usize) -> PoolConfig {
    PoolConfig {
        replicas,
        region_size: 4 << 20,
        segment_size: 1 << 20,
        grace: Duration::from_millis(50),
        ..PoolConfig::default()
    }
}

pub struct Nodes {
    /// The nodes' region files, removed when the test ends.
    pub dirs: Vec<tempfile::TempDir>,
    pub servers: Vec<LoopbackNode>,
}

pub async fn start_nodes(n: u32, capacity: u64) -> Nodes {
    let mut nodes = Nodes {
        dirs: vec![],
        servers: vec![],
    };
    for id in 1..=n {
        let dir = tempfile::tempdir().unwrap();
        let config = NodeConfig {
            id,
            capacity,
            storage: Storage::Dir(dir.path().to_path_buf()),
            secret: None,
        };
        nodes
            .servers
            .push(LoopbackNode::spawn(config).await.unwrap());
        nodes.dirs.push(dir);
    }
    nodes
}

pub async fn connect(nodes: &Nodes) -> Vec<Arc<dyn Transport>> {
    let mut out = Vec::new();
    for node in &nodes.servers {
        out.push(
            backend::connect(
                BackendKind::Shm,
                node.endpoint.clone(),
                RpcOptions::default(),
            )
            .await
            .unwrap(),
        );
    }
    out
}

/// The copies of `region` on every node that holds it, as (node, bytes).
pub async fn region_copies(
    transports: &[Arc<dyn Transport>],
    region: u16,
    size: u64,
) -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    for t in transports {
        let held = t.list_regions().await.unwrap();
        if held.iter().any(|(r, _)| *r == region) {
            let mut buf = vec![0u8; size as usize];
            t.read(region, 0, &mut buf).await.unwrap();
            out.push((t.node(), buf));
        }
    }
    out
}
