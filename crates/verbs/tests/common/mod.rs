//! A memory node served in this test process on a loopback port.

use std::sync::Arc;

use bytes::Bytes;
use dmc_verbs::rdma::RdmaResponder;
use dmc_verbs::server::{self, Listener, ServerOptions};
use dmc_verbs::{Endpoint, NodeConfig, NodeCore, RpcOptions, Storage};

/// Starts node 7 with region files in `dir`, taking frames of at most 1 MiB, serving
/// RDMA through `rdma` when given. The node stops when the sender is dropped.
#[allow(dead_code)]
pub async fn start_node_with(
    dir: &std::path::Path,
    secret: &[u8],
    rdma: Option<Arc<RdmaResponder>>,
) -> (Endpoint, tokio::sync::oneshot::Sender<()>) {
    let core = NodeCore::open(NodeConfig {
        id: 7,
        capacity: 64 << 20,
        storage: Storage::Dir(dir.to_path_buf()),
        secret: Some(Bytes::copy_from_slice(secret)),
    })
    .unwrap();
    let listener = Listener::bind(&"127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let endpoint = listener.endpoint().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server::serve(
        core,
        listener,
        ServerOptions {
            max_frame: 1 << 20,
            rdma,
            ..ServerOptions::default()
        },
        async {
            let _ = stopped.await;
        },
    ));
    (endpoint, stop)
}

#[allow(dead_code)]
pub async fn start_node(
    dir: &std::path::Path,
    secret: &[u8],
) -> (Endpoint, tokio::sync::oneshot::Sender<()>) {
    start_node_with(dir, secret, None).await
}

pub fn options(secret: &[u8]) -> RpcOptions {
    RpcOptions {
        secret: Bytes::copy_from_slice(secret),
        ..RpcOptions::default()
    }
}
