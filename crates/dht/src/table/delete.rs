//! Clearing a slot: `clear`, which delete, eviction and expiry share, and `delete`.
//!
//! Only the slot's owner clears it. The bucket header and slot word are validated on
//! commit, so a concurrent split or overwrite makes a clear fail rather than remove
//! another key.

use std::sync::atomic::Ordering;

use dmc_umo::{GlobalAddr, Tx, TxOutcome, TxWrite};

use super::{Dht, DhtError, Found, MAX_RETRIES};

impl Dht {
    /// Clears a found slot (delete, eviction, expiry) and frees its object.
    pub(super) async fn clear(
        &self,
        loc_slot: u16,
        probe_bucket: (GlobalAddr, u64),
        f: &Found,
        db: Option<u8>,
        expect_meta: bool,
    ) -> Result<bool, DhtError> {
        self.clear_leaving(loc_slot, probe_bucket, f, db, expect_meta, (0, 0))
            .await
    }

    /// [`clear`](Self::clear), leaving `leave` (slot word, metadata word) in the slot:
    /// 0 and 0, or an eviction-history entry (`adaptive::history_word`, the key's hash).
    pub(super) async fn clear_leaving(
        &self,
        loc_slot: u16,
        probe_bucket: (GlobalAddr, u64),
        f: &Found,
        db: Option<u8>,
        expect_meta: bool,
        leave: (u64, u64),
    ) -> Result<bool, DhtError> {
        let lease = self.lease(loc_slot)?;
        let tx = Tx {
            shard: lease.shard,
            epoch: lease.epoch,
            writes: vec![
                TxWrite {
                    addr: probe_bucket.0,
                    expect: Some(probe_bucket.1),
                    new: probe_bucket.1,
                    in_word_lock: false,
                },
                TxWrite {
                    addr: f.addr,
                    expect: Some(f.word.0),
                    new: leave.0,
                    in_word_lock: true,
                },
                TxWrite {
                    addr: f.addr.offset_by(8),
                    // Reclaiming an expired key must not act on a torn read (a fresh
                    // word with the old, expired metadata): validate the metadata too.
                    expect: expect_meta.then_some(f.meta.0),
                    new: leave.1,
                    in_word_lock: false,
                },
            ],
        };
        match self.commit(tx).await {
            TxOutcome::Committed => {
                if let Some(db) = db {
                    self.count_key(db, -1, Some(f.meta), None);
                }
                if let Some(obj) = f.word.object() {
                    self.pool.free_object(obj).await;
                }
                Ok(true)
            }
            TxOutcome::Conflict { .. } | TxOutcome::Locked => Ok(false),
            TxOutcome::StaleEpoch { .. } => Err(DhtError::NotOwner(loc_slot)),
            TxOutcome::Failed(e) => Err(e.into()),
        }
    }

    /// Deletes `key`; returns whether a live key was removed.
    pub async fn delete(&self, db: u8, key: &[u8]) -> Result<bool, DhtError> {
        if self.is_staging() {
            return Box::pin(self.staged_delete(db, key)).await;
        }
        let loc = self.loc(db, key);
        self.lease(loc.key_slot)?;
        for attempt in 0..MAX_RETRIES {
            let (probe, found) = self.lookup(&loc, key, false).await?;
            let (Some(probe), Some(f)) = (probe, found) else {
                return Ok(false);
            };
            let live = !self.is_expired(f.meta, self.clock.now_ms());
            if self
                .clear(
                    loc.slot,
                    (probe.buckets[f.bucket].0, probe.header(f.bucket)),
                    &f,
                    Some(loc.db),
                    false,
                )
                .await?
            {
                if !live {
                    self.counters.expired.fetch_add(1, Ordering::Relaxed);
                    self.removed(loc.db, key, super::Removal::Expired);
                }
                return Ok(live);
            }
            // The slot changed or is held: a one-sided writer holds it only for a few
            // memory operations, but its thread may be preempted meanwhile, so back
            // off progressively rather than spin through every retry.
            self.backoff(attempt, true).await;
        }
        Err(DhtError::Contention(loc.key_slot))
    }
}
