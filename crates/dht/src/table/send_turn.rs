//! One sender at a time for a kind of advisory metadata (hit counts and clocks,
//! access-metadata entries). Two batches of one client in flight at once reach a
//! backup in either order: the older one landing last leaves the backup behind the
//! primary until the key's next update, possibly for good (a CI run of
//! `node_failover.rs` waited 30 s for a filled copy's LFU byte;
//! `dht/tests/hit_order.rs`). The request paths only try for the turn (under the lock
//! of the queue they take a batch from, so batches go in the order they were recorded)
//! and leave their batch queued when it is taken; an explicit flush waits for it.

use tokio::sync::{Semaphore, SemaphorePermit};

/// The turn to send one kind of metadata.
pub(super) struct SendTurn(Semaphore);

impl Default for SendTurn {
    fn default() -> Self {
        Self(Semaphore::new(1))
    }
}

impl SendTurn {
    /// The turn, if no one holds it; given back when dropped (a cancelled send too).
    pub(super) fn try_take(&self) -> Option<SemaphorePermit<'_>> {
        self.0.try_acquire().ok()
    }

    /// The turn, once the sender holding it is done.
    pub(super) async fn take(&self) -> Option<SemaphorePermit<'_>> {
        // The semaphore is never closed.
        self.0.acquire().await.ok()
    }
}
