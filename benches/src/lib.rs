//! Shared setup for DMC's benches and measurement tools: a pool on the embedded
//! backend or on in-process memory nodes reached over `shm`, `tcp` or emulated `rdma`,
//! and bulk loading.

pub mod loadgen;
pub mod study;
pub mod traffic;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use dmc_dht::{Dht, DhtConfig, Ownership, SetExpiry, SetOptions, SystemClock};
use dmc_umo::{Pool, PoolConfig};
use dmc_verbs::backend::{self, BackendKind};
use dmc_verbs::server::LoopbackNode;
use dmc_verbs::{NodeConfig, RpcOptions, Storage, Transport};
use futures::StreamExt;

/// A table over `replicas` memory nodes served in this process and reached over `shm`
/// (region files under a temporary directory in /dev/shm when it exists).
pub struct PooledTable {
    pub dht: Arc<Dht>,
    _dirs: Vec<tempfile::TempDir>,
    _nodes: Vec<LoopbackNode>,
}

pub fn shm_dir() -> Result<tempfile::TempDir> {
    let base = std::path::Path::new("/dev/shm");
    Ok(if base.is_dir() {
        tempfile::tempdir_in(base)?
    } else {
        tempfile::tempdir()?
    })
}

pub async fn shm_table(replicas: usize, capacity: u64) -> Result<PooledTable> {
    pooled_table(Reach::Shm, replicas, capacity).await
}

/// How a [`pooled_table`] reaches its in-process memory nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Shm,
    Tcp,
    /// The `rdma` transport on the in-process emulation of RC verbs.
    EmulatedRdma,
}

/// A table over `replicas` memory nodes served in this process, reached with `reach`.
pub async fn pooled_table(reach: Reach, replicas: usize, capacity: u64) -> Result<PooledTable> {
    let fabric = dmc_verbs::rdma::EmulatedFabric::default();
    let mut nodes: Vec<Arc<dyn Transport>> = Vec::new();
    let (mut dirs, mut servers) = (Vec::new(), Vec::new());
    for id in 1..=replicas as u32 {
        let dir = shm_dir()?;
        let options = dmc_verbs::server::ServerOptions {
            rdma: (reach == Reach::EmulatedRdma)
                .then(|| Arc::new(dmc_verbs::rdma::RdmaResponder::new(fabric.device()))),
            ..Default::default()
        };
        let server = LoopbackNode::spawn_with(
            NodeConfig {
                id,
                capacity,
                storage: Storage::Dir(dir.path().to_path_buf()),
                secret: None,
            },
            options,
        )
        .await?;
        let endpoint = server.endpoint.clone();
        nodes.push(match reach {
            Reach::Shm => {
                backend::connect(BackendKind::Shm, endpoint, RpcOptions::default()).await?
            }
            Reach::Tcp => {
                backend::connect(BackendKind::Tcp, endpoint, RpcOptions::default()).await?
            }
            Reach::EmulatedRdma => Arc::new(
                dmc_verbs::rdma::RdmaTransport::connect(
                    endpoint,
                    RpcOptions::default(),
                    fabric.device(),
                )
                .await?,
            ),
        });
        dirs.push(dir);
        servers.push(server);
    }
    let config = PoolConfig {
        replicas,
        region_size: 256 << 20,
        ..PoolConfig::default()
    };
    let pool = Pool::open(config, nodes).await?;
    let dht = Dht::open(
        pool,
        DhtConfig::default(),
        Arc::new(SystemClock),
        Ownership::all(0, 1),
    )
    .await?;
    Ok(PooledTable {
        dht,
        _dirs: dirs,
        _nodes: servers,
    })
}

pub async fn embedded_table(capacity: u64) -> Result<Arc<Dht>> {
    let config = PoolConfig {
        replicas: 1,
        region_size: 256 << 20,
        ..PoolConfig::default()
    };
    let pool = Pool::embedded(capacity, config).await?;
    Ok(Dht::open(
        pool,
        DhtConfig::default(),
        Arc::new(SystemClock),
        Ownership::all(0, 1),
    )
    .await?)
}

/// The benchmark key `i`: 16 bytes.
pub fn key(i: u64) -> [u8; 16] {
    let mut k = *b"key:000000000000";
    let mut n = i;
    for d in k[4..].iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

/// The benchmark value: 32 bytes.
pub fn value(i: u64) -> [u8; 32] {
    let mut v = [b'v'; 32];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

/// Loads keys `0..n` with `in_flight` sets outstanding; returns the elapsed time.
pub async fn load(
    dht: &Arc<Dht>,
    n: u64,
    in_flight: usize,
    ttl: Option<Duration>,
    progress: bool,
) -> Result<Duration> {
    let start = Instant::now();
    let expiry = match ttl {
        Some(t) => SetExpiry::At(dmc_dht::Clock::now_ms(&SystemClock) + t.as_millis() as u64),
        None => SetExpiry::Clear,
    };
    let mut done = 0u64;
    let mut sets = futures::stream::iter(0..n)
        .map(|i| {
            let dht = dht.clone();
            async move {
                dht.set(
                    0,
                    &key(i),
                    &value(i),
                    SetOptions {
                        expiry,
                        ..Default::default()
                    },
                )
                .await
            }
        })
        .buffer_unordered(in_flight);
    while let Some(r) = sets.next().await {
        r?;
        done += 1;
        if progress && done.is_multiple_of(100_000) {
            eprintln!(
                "  loaded {done}/{n} keys ({:.0} keys/s)",
                done as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
    Ok(start.elapsed())
}

/// A table for the profiling examples: `n` keys loaded with 64 sets in flight, on the
/// embedded pool (`local`) or over `shm` with `r = 2`. Keep the returned `PooledTable`
/// alive as long as the table is used.
pub fn loaded_table(
    rt: &tokio::runtime::Runtime,
    n: u64,
    local: bool,
) -> (Option<PooledTable>, Arc<Dht>) {
    rt.block_on(async {
        let (keep, dht) = if local {
            (None, embedded_table(4 << 30).await.expect("embedded table"))
        } else {
            let t = shm_table(2, 2 << 30).await.expect("shm table");
            let d = t.dht.clone();
            (Some(t), d)
        };
        load(&dht, n, 64, None, false).await.expect("load");
        (keep, dht)
    })
}

/// The multi-threaded runtime the benches and examples use.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The n-th numeric command-line argument, or `default`.
pub fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
