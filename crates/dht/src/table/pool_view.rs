//! What the layers above learn of the memory pool under the table, and the pool-level
//! actions they may ask for: its statistics and per-region usage, how many memory
//! nodes it spans, fencing a shard the agent gains, forgetting a region the manager
//! took back, following the manager's region placements (and the log of chunks
//! written in regions being filled). The engine and the agent go through these, never
//! to the pool itself.

use dmc_umo::{DirtyChunks, Placement, PoolStats, UmoError};
use dmc_verbs::RegionId;

use super::Dht;

impl Dht {
    /// The pool's counters (regions, segments, blocks, bytes).
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Each memory node's and region's latency as this client saw it since the last
    /// call (reported to the manager's load balancer).
    pub fn take_load(&self) -> dmc_umo::LoadReport {
        self.pool.take_load()
    }

    /// Bytes of this client's live blocks per region (reported to the manager).
    pub fn used_by_region(&self) -> Vec<(RegionId, u64)> {
        self.pool.used_by_region()
    }

    /// Whether the pool's memory is in this host's address space (an embedded pool or
    /// `shm` nodes): reads complete inline, as fast as a local cache would serve them.
    pub fn pool_is_local(&self) -> bool {
        self.inline_reads
    }

    /// Memory nodes the pool spans.
    pub fn memory_nodes(&self) -> usize {
        self.pool.nodes().len()
    }

    /// The ids of the memory nodes the pool can reach.
    pub fn memory_node_ids(&self) -> Vec<u32> {
        self.pool.nodes().iter().map(|n| n.node()).collect()
    }

    /// Fences `shard` at `epoch` on every memory node: from here no writer with an
    /// older epoch starts a change of it.
    pub async fn fence_shard(&self, shard: u32, epoch: u64) -> Result<(), UmoError> {
        self.pool.fence(shard, epoch).await
    }

    /// Settles `shard`'s transactions whose coordinator is gone (a previous owner
    /// killed mid-commit): each is committed on every memory node if any committed it,
    /// else undone everywhere. A new owner calls this after fencing, before it writes;
    /// on an error the maintenance tick tries again.
    pub async fn settle_shard(&self, shard: u32) -> Result<dmc_umo::Settled, UmoError> {
        let settled = self.pool.settle(shard).await;
        if settled.is_err() {
            self.pool.retry_settle(shard);
        }
        settled
    }

    /// Forgets a region the manager returned to the memory nodes.
    pub fn forget_region(&self, region: RegionId) {
        self.pool.forget_region(region);
    }

    /// Follows the manager's region placements; returns once the writes in flight
    /// under the old ones are drained (see [`dmc_umo::Pool::place_regions`]).
    pub async fn place_regions(&self, placements: &[Placement]) -> Result<(), UmoError> {
        self.pool.place_regions(placements).await
    }

    /// Takes the log of chunks written in regions being filled.
    pub fn take_dirty(&self) -> Vec<DirtyChunks> {
        self.pool.take_dirty()
    }

    /// Puts back a log that could not be reported.
    pub fn restore_dirty(&self, dirty: Vec<DirtyChunks>) {
        self.pool.restore_dirty(dirty)
    }

    /// Lets this client write until `until`: hash slots it owns
    /// ([`crate::owner::Ownership::renew_until`]) and the pool itself (counters and
    /// objects included, see [`dmc_umo::Pool::renew_write_lease`]).
    pub fn renew_lease(&self, until: std::time::Instant) {
        self.owner.renew_until(until);
        self.pool.renew_write_lease(until);
    }
}
