//! What this client sees of each memory node's and region's latency, for the manager's
//! load balancer (DESIGN.md §6: it moves primaries off a node whose clients see it
//! slow). [`Timed`] wraps a node's transport and times every awaited batch of verbs:
//! the batch's time counts for the node, and for the region of every read in it (reads
//! go to the primary, so a region's read latency is its primary's). Verbs completed
//! inline (`shm`, the embedded pool) are not timed: they wait on nothing but memory.
//! [`Pool::take_load`] hands the counts gathered since its last call to the heartbeat.
//! It never changes a verb or its result.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use dmc_verbs::wire::{Request, Response};
use dmc_verbs::{NodeId, RegionId, Transport, Verb, VerbsError};
use futures::future::BoxFuture;

use super::Pool;
use crate::layout::MAX_REGIONS;

/// Operations and their total time (µs) since the last report.
#[derive(Default)]
struct Tally {
    ops: AtomicU64,
    micros: AtomicU64,
}

impl Tally {
    fn add(&self, ops: u64, micros: u64) {
        self.ops.fetch_add(ops, Ordering::Relaxed);
        self.micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn take(&self) -> (u64, u64) {
        (
            self.ops.swap(0, Ordering::Relaxed),
            self.micros.swap(0, Ordering::Relaxed),
        )
    }
}

/// Per-region read tallies, shared by the pool's timed transports.
pub(crate) struct RegionTallies(Box<[Tally]>);

impl RegionTallies {
    pub(crate) fn new() -> Arc<RegionTallies> {
        Arc::new(RegionTallies(
            (0..=MAX_REGIONS).map(|_| Tally::default()).collect(),
        ))
    }
}

/// One node's or region's latency over a report's period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencySample {
    /// A memory node id, or a region id.
    pub id: u32,
    /// Batches (a node) or reads (a region) timed.
    pub ops: u64,
    /// Their total time in microseconds.
    pub micros: u64,
}

/// What [`Pool::take_load`] reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    pub nodes: Vec<LatencySample>,
    pub regions: Vec<LatencySample>,
}

/// A node's transport whose awaited batches are timed.
pub(crate) struct Timed {
    inner: Arc<dyn Transport>,
    node: Tally,
    regions: Arc<RegionTallies>,
}

impl Timed {
    pub(crate) fn wrap(inner: Arc<dyn Transport>, regions: Arc<RegionTallies>) -> Arc<Timed> {
        Arc::new(Timed {
            inner,
            node: Tally::default(),
            regions,
        })
    }
}

impl Transport for Timed {
    fn node(&self) -> NodeId {
        self.inner.node()
    }

    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn post<'a, 'b: 'a>(
        &'a self,
        verbs: &'a mut [Verb<'b>],
    ) -> BoxFuture<'a, Result<(), VerbsError>> {
        Box::pin(async move {
            let started = Instant::now();
            let done = self.inner.post(verbs).await;
            let micros = started.elapsed().as_micros() as u64;
            self.node.add(1, micros);
            for v in verbs.iter() {
                if let Verb::Read { region, .. } = v
                    && let Some(t) = self.regions.0.get(*region as usize)
                {
                    t.add(1, micros);
                }
            }
            done
        })
    }

    fn post_now(&self, verbs: &mut [Verb<'_>]) -> Option<Result<(), VerbsError>> {
        self.inner.post_now(verbs)
    }

    fn prefetch(&self, region: RegionId, offset: u64, len: usize) {
        self.inner.prefetch(region, offset, len)
    }

    fn prefetch_many(&self, hints: &[(RegionId, u64, usize)]) {
        self.inner.prefetch_many(hints)
    }

    fn completes_inline(&self) -> bool {
        self.inner.completes_inline()
    }

    fn calls_inline(&self) -> bool {
        self.inner.calls_inline()
    }

    fn forget_region(&self, region: RegionId) {
        self.inner.forget_region(region)
    }

    fn abort(&self) -> BoxFuture<'_, ()> {
        self.inner.abort()
    }

    fn call(&self, req: Request) -> BoxFuture<'_, Result<Response, VerbsError>> {
        self.inner.call(req)
    }
}

impl Pool {
    /// Latency of every node and region timed since the last call (those with no
    /// timed operation are left out), and starts a new period.
    pub fn take_load(&self) -> LoadReport {
        let mut report = LoadReport::default();
        for t in self.nodes.timed() {
            let (ops, micros) = t.node.take();
            if ops > 0 {
                report.nodes.push(LatencySample {
                    id: t.node(),
                    ops,
                    micros,
                });
            }
        }
        for (id, t) in self.region_tallies.0.iter().enumerate() {
            let (ops, micros) = t.take();
            if ops > 0 {
                report.regions.push(LatencySample {
                    id: id as u32,
                    ops,
                    micros,
                });
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmc_verbs::{LocalTransport, NodeConfig, NodeCore, Storage};

    /// A transport that is never inline, over a local node.
    struct Awaited(LocalTransport);

    impl Transport for Awaited {
        fn node(&self) -> NodeId {
            self.0.node()
        }
        fn backend(&self) -> &'static str {
            "awaited"
        }
        fn post<'a, 'b: 'a>(
            &'a self,
            verbs: &'a mut [Verb<'b>],
        ) -> BoxFuture<'a, Result<(), VerbsError>> {
            self.0.post(verbs)
        }
        fn call(&self, req: Request) -> BoxFuture<'_, Result<Response, VerbsError>> {
            self.0.call(req)
        }
    }

    #[tokio::test]
    async fn awaited_batches_count_for_the_node_and_reads_for_their_regions() {
        let core = NodeCore::open(NodeConfig {
            id: 7,
            capacity: 1 << 20,
            storage: Storage::Heap,
            secret: None,
        })
        .unwrap();
        let regions = RegionTallies::new();
        let timed = Timed::wrap(
            Arc::new(Awaited(LocalTransport::new(core))),
            regions.clone(),
        );
        timed
            .call(Request::CreateRegion {
                region: 3,
                size: 1 << 16,
            })
            .await
            .unwrap();
        let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
        let mut verbs = [
            Verb::Read {
                region: 3,
                offset: 0,
                buf: &mut a,
            },
            Verb::Read {
                region: 3,
                offset: 8,
                buf: &mut b,
            },
            Verb::Write {
                region: 3,
                offset: 16,
                data: &[1; 8],
            },
        ];
        timed.post(&mut verbs).await.unwrap();
        assert_eq!(timed.node.take().0, 1, "one batch for the node");
        assert_eq!(regions.0[3].take().0, 2, "two reads for the region");
        assert_eq!(regions.0[3].take().0, 0, "taking starts a new period");
    }
}
