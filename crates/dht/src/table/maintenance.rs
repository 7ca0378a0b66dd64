//! Background upkeep (Redis's `serverCron` share of it): active expiry, flushing
//! combined hits, evicting down to maxmemory, keeping a spare segment, merging the
//! adaptive policy's regrets, and reloading the db map, on a timer.
//!
//! Started by the table's owner with `spawn_maintenance`. The task holds only a weak
//! reference, so it ends with the table; a failed step is logged, never fatal.

use std::sync::Arc;

use super::Dht;
use crate::layout::SLOTS_PER_BUCKET;

impl Dht {
    /// Starts the background upkeep an owner runs (Redis's `serverCron` share of it):
    /// every `every`, active expiry over a sample of buckets, repeated while more than a
    /// quarter of the sample had expired, and a flush of combined access metadata. The
    /// task ends when the table is dropped.
    pub fn spawn_maintenance(
        self: &Arc<Self>,
        every: std::time::Duration,
    ) -> tokio::task::JoinHandle<()> {
        const SAMPLE: usize = 20;
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(dht) = weak.upgrade() else { return };
                for _ in 0..16 {
                    match dht.active_expire(SAMPLE).await {
                        Ok(n) if n * 4 > SAMPLE * SLOTS_PER_BUCKET / 2 => continue,
                        Ok(_) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, "active expiry failed");
                            break;
                        }
                    }
                }
                dht.flush_hits().await;
                // Slots this client's commits left locked when a node stopped
                // answering: resolved once it answers again.
                dht.recover_in_doubt().await;
                // Blocks idle threads hold, and their frees, back to the allocator; and
                // inline object writes that reached only some copies, finished.
                dht.pool.flush_block_caches();
                dht.pool.finish_object_writes().await;
                dht.pool.sync_usage().await;
                // Over maxmemory without writes (it was lowered): evict down to it.
                if let Err(e) = dht.shrink_to_maxmemory(1024).await {
                    tracing::warn!(error = %e, "evicting down to maxmemory failed");
                }
                // A pool at its limit keeps a segment emptying ahead of need, so a
                // write of a size class without free blocks rarely waits for one.
                if let Err(e) = dht.keep_spare_segment().await {
                    tracing::warn!(error = %e, "freeing a spare segment failed");
                }
                // The adaptive policy's weights: this agent's regrets out, every
                // agent's back in.
                if let Err(e) = dht.sync_adaptive(true).await {
                    tracing::warn!(error = %e, "merging the adaptive policy's regrets failed");
                }
                // Another agent's SWAPDB reaches this one within a tick (until the
                // cluster manager pushes such changes).
                if let Err(e) = dht.load_db_map().await {
                    tracing::warn!(error = %e, "reloading the database map failed");
                }
            }
        })
    }
}
