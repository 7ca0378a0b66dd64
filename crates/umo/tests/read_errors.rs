//! A read of a large (chained) object that fails on the way to a memory node is an
//! error, not an absent key: only an address the node refuses (a reference into freed
//! and reused memory) reads as a stale entry. Before this, a transport failure in the
//! middle of a large value's read (a frame too large for tcp, a timeout) made the key
//! look missing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dmc_umo::object::ValueKind;
use dmc_umo::{Pool, PoolConfig, ReadObject, UmoError};
use dmc_verbs::wire::{Request, Response};
use dmc_verbs::{
    LocalTransport, NodeConfig, NodeCore, NodeId, RegionId, Storage, Transport, Verb, VerbsError,
};
use futures::future::BoxFuture;

/// A node whose reads of more than a few KiB time out while `failing` is set.
struct Flaky {
    inner: LocalTransport,
    failing: Arc<AtomicBool>,
}

impl Transport for Flaky {
    fn node(&self) -> NodeId {
        self.inner.node()
    }

    fn backend(&self) -> &'static str {
        "flaky"
    }

    fn post<'a, 'b: 'a>(
        &'a self,
        verbs: &'a mut [Verb<'b>],
    ) -> BoxFuture<'a, Result<(), VerbsError>> {
        let big_read = verbs
            .iter()
            .any(|v| matches!(v, Verb::Read { buf, .. } if buf.len() > 8 << 10));
        if big_read && self.failing.load(Ordering::Relaxed) {
            return Box::pin(async { Err(VerbsError::Timeout(1)) });
        }
        self.inner.post(verbs)
    }

    fn call(&self, req: Request) -> BoxFuture<'_, Result<Response, VerbsError>> {
        self.inner.call(req)
    }

    fn forget_region(&self, region: RegionId) {
        self.inner.forget_region(region)
    }
}

#[tokio::test]
async fn a_failed_read_of_a_large_value_is_an_error_not_a_missing_key() {
    let failing = Arc::new(AtomicBool::new(false));
    let core = NodeCore::open(NodeConfig {
        id: 1,
        capacity: 64 << 20,
        storage: Storage::Heap,
        secret: None,
    })
    .expect("a node");
    let node: Arc<dyn Transport> = Arc::new(Flaky {
        inner: LocalTransport::new(core),
        failing: failing.clone(),
    });
    let config = PoolConfig {
        replicas: 1,
        region_size: 16 << 20,
        segment_size: 1 << 20,
        ..PoolConfig::default()
    };
    let pool = Pool::open(config, vec![node]).await.expect("a pool");
    let value = vec![7u8; 3 << 20];
    let obj = pool
        .write_object(0, b"big", ValueKind::String, &value)
        .await
        .expect("written");
    assert!(obj.chained, "three megabytes are a chained object");
    match pool.read_object(obj, 0, b"big").await {
        Ok(ReadObject::Value(v, _)) => assert_eq!(v.len(), value.len()),
        other => panic!("{other:?}"),
    }
    failing.store(true, Ordering::Relaxed);
    match pool.read_object(obj, 0, b"big").await {
        Err(e) => assert!(
            matches!(
                e,
                UmoError::Node {
                    source: VerbsError::Timeout(_),
                    ..
                }
            ),
            "{e}"
        ),
        Ok(other) => panic!("a failed read answered {other:?}"),
    }
}
