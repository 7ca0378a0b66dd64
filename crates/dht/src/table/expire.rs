//! Expiry: `expire` (setting or removing a TTL), the lazy reclaim of an expired key a
//! reader owns, and `active_expire`, the sampling pass maintenance runs.
//!
//! A TTL change writes only the metadata word, which a split copies without
//! validating: it must hold the hash slot's split lock. A reclaim validates the
//! metadata too, so it never acts on a torn read.

use std::sync::atomic::Ordering;

use dmc_umo::{Tx, TxOutcome, TxWrite};

use super::probe::Probe;
use super::{Dht, DhtError, Found, Loc, MAX_RETRIES, Removal};

impl Dht {
    pub(super) async fn reclaim_expired(&self, loc: &Loc, key: &[u8], probe: &Probe, f: &Found) {
        if self.owner.lease(loc.slot).is_some()
            && let Ok(true) = self
                .clear(
                    loc.slot,
                    (probe.buckets[f.bucket].0, probe.header(f.bucket)),
                    f,
                    Some(loc.db),
                    true,
                )
                .await
        {
            self.counters.expired.fetch_add(1, Ordering::Relaxed);
            self.removed(loc.db, key, Removal::Expired);
        }
    }

    /// Sets (`Some(unix ms)`) or removes (`None`) the key's expiry. Returns whether the
    /// key existed. An expiry in the past deletes the key, as Redis does.
    pub async fn expire(&self, db: u8, key: &[u8], at: Option<u64>) -> Result<bool, DhtError> {
        if self.is_staging() {
            return Box::pin(self.staged_expire(db, key, at)).await;
        }
        let loc = self.loc(db, key);
        let lease = self.lease(loc.key_slot)?;
        // Only the metadata word changes, which a split copies without validating: hold
        // the hash slot's split lock so a split cannot carry the old metadata over.
        let _split_guard = self.no_rebuild(loc.slot).await;
        for attempt in 0..MAX_RETRIES {
            let (probe, found) = self.lookup(&loc, key, false).await?;
            let (Some(probe), Some(f)) = (probe, found) else {
                return Ok(false);
            };
            let abs = self.clock.now_ms();
            if self.is_expired(f.meta, abs) {
                self.reclaim_expired(&loc, key, &probe, &f).await;
                return Ok(false);
            }
            if let Some(at) = at
                && at <= abs
            {
                return self.delete(db, key).await;
            }
            let meta = f
                .meta
                .with_expire(at.map(|a| self.encode_expire(a)).unwrap_or(0));
            let tx = Tx {
                shard: lease.shard,
                epoch: lease.epoch,
                writes: vec![
                    Self::header_guard(&probe, f.bucket),
                    TxWrite {
                        addr: f.addr,
                        expect: Some(f.word.0),
                        new: f.word.0,
                        in_word_lock: true,
                    },
                    TxWrite {
                        addr: f.addr.offset_by(8),
                        expect: None,
                        new: meta.0,
                        in_word_lock: false,
                    },
                ],
            };
            match self.commit(tx).await {
                TxOutcome::Committed => {
                    self.count_key(db, 0, Some(f.meta), Some(meta));
                    return Ok(true);
                }
                TxOutcome::Conflict { .. } => self.backoff(attempt, false).await,
                TxOutcome::Locked => self.backoff(attempt, true).await,
                TxOutcome::StaleEpoch { .. } => return Err(DhtError::NotOwner(loc.key_slot)),
                TxOutcome::Failed(e) => return Err(e.into()),
            }
        }
        Err(DhtError::Contention(loc.key_slot))
    }

    /// One active-expiry pass: samples `buckets` random buckets of owned partitions and
    /// deletes the expired keys found. Returns how many were deleted.
    pub async fn active_expire(&self, buckets: usize) -> Result<usize, DhtError> {
        let parts = self.owned_partitions();
        if parts.is_empty() {
            return Ok(0);
        }
        let abs = self.clock.now_ms();
        let mut n = 0;
        for _ in 0..buckets {
            for (slot, bucket, header, f) in self.sample_bucket(&parts).await? {
                if !self.is_expired(f.meta, abs) {
                    continue;
                }
                let object = match f.word.object() {
                    Some(obj) => self.pool.read_any(obj).await?,
                    None => None,
                };
                let db = object.as_ref().map(|o| o.db);
                if self.clear(slot, (bucket, header), &f, db, true).await? {
                    self.counters.expired.fetch_add(1, Ordering::Relaxed);
                    if let Some(o) = &object {
                        self.removed(o.db, &o.key, Removal::Expired);
                    }
                    n += 1;
                }
            }
        }
        Ok(n)
    }
}
