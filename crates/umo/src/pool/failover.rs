//! Riding out a memory node's failure: a verb that fails because a node is gone
//! (connection refused or closed, timed out) waits until the cluster manager's map takes
//! that node out of the region's copies (a backup promoted in its place), then the
//! caller retries on the new copies, so a client sees a slower command instead of an
//! error. The wait is bounded by [`Pool::set_failover_wait`] (an agent sets it from the
//! manager's lease: the node's lease lapses, then the map reaches the agent); with no
//! bound set (a standalone pool) nothing waits.
//!
//! A client whose lease with the manager ran out writes nothing at all, counters
//! included ([`Pool::renew_write_lease`]): a paused agent that wakes up after the
//! manager gave its work away and moved copies without it must not add to a copy it
//! no longer knows about.
//!
//! Called by the read and write paths; `place_regions` wakes the waiters.

use std::sync::atomic::Ordering;
use std::time::Duration;

use dmc_verbs::RegionId;

use super::Pool;
use crate::error::UmoError;

/// Retries of one operation across failovers (each waits for a new placement).
pub(super) const FAILOVER_RETRIES: usize = 3;

impl Pool {
    /// Lets this client write until `until` (one lease after its last accepted
    /// heartbeat was sent); never called, it writes without a deadline.
    pub fn renew_write_lease(&self, until: std::time::Instant) {
        // One past the microsecond, as `Ownership::renew_until` stores it: 0 keeps
        // meaning "no deadline" and a deadline at `lease_base` itself still lapses.
        let us = until.saturating_duration_since(self.lease_base).as_micros() as u64;
        self.writable_until_us.fetch_max(us + 1, Ordering::SeqCst);
    }

    /// Whether this client's lease ran out: its writes fail with
    /// [`UmoError::LeaseLapsed`] before any verb.
    pub(super) fn lease_lapsed(&self) -> bool {
        let until = self.writable_until_us.load(Ordering::Relaxed);
        let lapsed = until != 0 && self.lease_base.elapsed().as_micros() as u64 + 1 >= until;
        if lapsed {
            self.counters.lease_refusals.fetch_add(1, Ordering::Relaxed);
        }
        lapsed
    }

    /// How long an operation that hit a failed memory node waits for the map that
    /// takes the node out (zero: it fails at once).
    pub fn set_failover_wait(&self, wait: Duration) {
        self.failover_wait_ms
            .store(wait.as_millis() as u64, Ordering::Relaxed);
    }

    /// After `err`: when it is a memory node's failure and that node still holds a
    /// copy of one of `regions`, waits (bounded) until a new placement takes it out of
    /// all of them. True when the caller should retry on the new copies.
    pub(super) async fn failed_over(&self, err: &UmoError, regions: &[RegionId]) -> bool {
        let UmoError::Node { node, source } = err else {
            return false;
        };
        if !source.is_node_failure() {
            return false;
        }
        let Some(index) = self.nodes.index_of(*node) else {
            return false;
        };
        let wait = Duration::from_millis(self.failover_wait_ms.load(Ordering::Relaxed));
        if wait.is_zero() {
            return false;
        }
        let holds = |pool: &Pool| {
            regions
                .iter()
                .any(|r| pool.entry(*r).is_ok_and(|e| e.copies().any(|c| c == index)))
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let placed = self.placed.notified();
            tokio::pin!(placed);
            placed.as_mut().enable();
            if !holds(self) {
                tracing::debug!(node, "retrying on the copies that replaced a failed node");
                self.counters
                    .failover_retries
                    .fetch_add(1, Ordering::Relaxed);
                return true;
            }
            if tokio::time::timeout_at(deadline, placed).await.is_err() {
                return false;
            }
        }
    }
}
