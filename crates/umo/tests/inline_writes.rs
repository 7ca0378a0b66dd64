//! Inline object writes (`Pool::write_object_now`) that a copy declines half way (its
//! connection not open yet, its region file not mapped yet: `post_now` answers `None`)
//! are finished on every copy by the awaited path before their block is freed, so no
//! copy keeps bytes the others lack. Found by `tests/tests/node_failover.rs`: after a
//! paused node's copies were refilled, the first SET left a freed block's new bytes on
//! the primary only, and the copies never agreed again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

mod support;

use dmc_umo::object::ValueKind;
use dmc_umo::{Pool, PoolConfig};
use dmc_verbs::wire::{Request, Response};
use dmc_verbs::{
    LocalTransport, NodeConfig, NodeCore, NodeId, RegionId, Storage, Transport, Verb, VerbsError,
};
use futures::future::BoxFuture;
use support::region_copies;

const REGION_SIZE: u64 = 16 << 20;

/// A node in this process whose inline verbs are declined while `unready` is set, as a
/// lazy connection not yet open declines them; awaited verbs always run.
struct Unready {
    inner: LocalTransport,
    unready: Arc<AtomicBool>,
}

impl Transport for Unready {
    fn node(&self) -> NodeId {
        self.inner.node()
    }

    fn backend(&self) -> &'static str {
        "unready"
    }

    fn post<'a, 'b: 'a>(
        &'a self,
        verbs: &'a mut [Verb<'b>],
    ) -> BoxFuture<'a, Result<(), VerbsError>> {
        self.inner.post(verbs)
    }

    fn post_now(&self, verbs: &mut [Verb<'_>]) -> Option<Result<(), VerbsError>> {
        if self.unready.load(Ordering::Relaxed) {
            return None;
        }
        self.inner.post_now(verbs)
    }

    fn completes_inline(&self) -> bool {
        true
    }

    fn call(&self, req: Request) -> BoxFuture<'_, Result<Response, VerbsError>> {
        self.inner.call(req)
    }

    fn forget_region(&self, region: RegionId) {
        self.inner.forget_region(region)
    }
}

#[tokio::test]
async fn an_inline_write_declined_half_way_is_finished_on_every_copy() {
    let cores: Vec<_> = (1..=2)
        .map(|id| {
            NodeCore::open(NodeConfig {
                id,
                capacity: 64 << 20,
                storage: Storage::Heap,
                secret: None,
            })
            .expect("a node")
        })
        .collect();
    let flags: Vec<Arc<AtomicBool>> = (0..2).map(|_| Arc::new(AtomicBool::new(false))).collect();
    let nodes: Vec<Arc<dyn Transport>> = cores
        .iter()
        .zip(&flags)
        .map(|(core, unready)| -> Arc<dyn Transport> {
            Arc::new(Unready {
                inner: LocalTransport::new(core.clone()),
                unready: unready.clone(),
            })
        })
        .collect();
    let config = PoolConfig {
        replicas: 2,
        region_size: REGION_SIZE,
        segment_size: 1 << 20,
        ..PoolConfig::default()
    };
    let pool = Pool::open(config, nodes).await.expect("a pool");
    // The class's segment is claimed on the awaited path.
    // A value past the encode buffer's kept size too: its bytes must reach the
    // unfinished list, not the emptied buffer.
    let large = vec![b'x'; 5000];
    for value in [&b"v"[..], &large] {
        pool.write_object(0, b"seed", ValueKind::String, value)
            .await
            .expect("written");
    }
    let plain: Vec<Arc<dyn Transport>> = cores
        .iter()
        .map(|c| -> Arc<dyn Transport> { Arc::new(LocalTransport::new(c.clone())) })
        .collect();
    // Each node declines in turn: one of the two is a backup, reached after the primary.
    for (unready, value) in flags
        .iter()
        .flat_map(|f| [(f, &b"value"[..]), (f, &large[..])])
    {
        unready.store(true, Ordering::Relaxed);
        assert!(pool.write_object_now(0, b"key", value).is_none());
        unready.store(false, Ordering::Relaxed);
        pool.finish_object_writes().await;
        for (region, _) in plain[0].list_regions().await.expect("regions") {
            let copies = region_copies(&plain, region, REGION_SIZE).await;
            assert_eq!(copies.len(), 2, "region {region} has two copies");
            assert!(
                copies[0].1 == copies[1].1,
                "region {region}: the copies differ after an inline write was declined"
            );
        }
    }
}
