//! Read-modify-write of one key in one probe (INCR and its kin, and every collection
//! update): the current value is read from the very slot the write then replaces, so
//! the key is probed once, not once by a GET and again by a SET, and committed
//! one-sided like `set`. A key of another type than the update's is `WrongType`.
//!
//! Only the owner of the key's hash slot calls this; the engine's per-key lock keeps
//! its own read-modify-writes of one key from interleaving.

use bytes::Bytes;

use super::{Change, Dht, DhtError, Loc, MAX_RETRIES};
use crate::layout::{SlotMeta, SlotWord};
use crate::policy;
use dmc_umo::{TxOutcome, ValueKind};

impl Dht {
    /// Replaces the string `key` in `db` with what `f` makes of the current one (`None`:
    /// absent or expired), keeping its expiry. `f` may run more than once (a retry
    /// sees the newer value); an `Err` from it aborts with nothing written.
    pub async fn update<E>(
        &self,
        db: u8,
        key: &[u8],
        mut f: impl FnMut(Option<&[u8]>) -> Result<Vec<u8>, E>,
    ) -> Result<Result<(), E>, DhtError> {
        self.update_kind(db, key, ValueKind::String, |cur| {
            f(cur.map(|b| &b[..])).map(|v| Change::Write(v.into()))
        })
        .await
    }

    /// [`update`](Self::update) of a value of type `kind`: `f` sees the current value
    /// (`None`: absent or expired) and says what [`Change`] to make; an existing key of
    /// another type is [`DhtError::WrongType`] with nothing written.
    pub async fn update_kind<E>(
        &self,
        db: u8,
        key: &[u8],
        kind: ValueKind,
        mut f: impl FnMut(Option<&Bytes>) -> Result<Change, E>,
    ) -> Result<Result<(), E>, DhtError> {
        if self.is_staging() {
            return Box::pin(self.staged_update(db, key, kind, f)).await;
        }
        // What `update_now` left on some copies only (it declined this write) first.
        self.pool.finish_object_writes().await;
        let loc: Loc = self.loc(db, key);
        let lease = self.lease(loc.key_slot)?;
        for attempt in 0..MAX_RETRIES {
            let Some((split_guard, probe, found)) =
                self.probe_for_write(&loc, lease, key, true).await?
            else {
                continue;
            };
            let (abs, now) = self.now();
            let live = found.as_ref().filter(|f| !self.is_expired(f.meta, abs));
            if live.is_some_and(|l| !kind.replaces(l.kind)) {
                return Err(DhtError::WrongType);
            }
            let (value, sharing) = match f(live.and_then(|l| l.value.as_ref())) {
                Ok(Change::Write(v)) => (v, false),
                Ok(Change::WriteSharing(v)) => (v, true),
                Ok(Change::Keep) => return Ok(Ok(())),
                Ok(Change::Delete) => {
                    drop(split_guard);
                    if live.is_some() {
                        self.delete(db, key).await?;
                    }
                    return Ok(Ok(()));
                }
                Err(e) => return Ok(Err(e)),
            };
            let Some(target) = Self::target_slot(&probe, found.as_ref()) else {
                drop(split_guard);
                self.split(&loc, lease).await?;
                continue;
            };
            if target.1.is_locked() {
                // Held by another writer: wait before writing an object for nothing.
                drop(split_guard);
                self.backoff(attempt, true).await;
                continue;
            }
            let need = (dmc_umo::object::HEADER + key.len() + value.len()) as u64;
            self.make_room(need).await?;
            let obj = self.write_with_room(db, key, kind, &value).await?;
            let lfu = found
                .as_ref()
                .map(|f| f.meta.lfu())
                .unwrap_or(policy::LFU_INIT);
            let expire = live.map(|f| f.meta.expire()).unwrap_or(0);
            let meta = SlotMeta::new(expire, now.access, lfu);
            let new_entry = probe.ext_at(target.0);
            let committed = self
                .commit_one_sided(&loc, lease, target, SlotWord::new(loc.fp, obj), meta)
                .await;
            if matches!(committed, Ok(TxOutcome::Committed)) {
                // Under the rebuild lock still: the entry's subtable is not retired.
                let written = [(found.as_ref(), new_entry, obj, loc.fp)];
                self.note_writes(&written).await;
            }
            drop(split_guard);
            let outcome = match committed {
                Ok(outcome) => outcome,
                // Refused before anything was written: the object is not reachable.
                Err(e) => {
                    self.pool.free_object(obj).await;
                    return Err(e);
                }
            };
            match outcome {
                TxOutcome::Committed => {
                    match found
                        .as_ref()
                        .and_then(|f| f.word.object())
                        .filter(|_| sharing)
                    {
                        Some(prev) => {
                            self.count_key(loc.db, 0, found.as_ref().map(|f| f.meta), Some(meta));
                            self.pool.free_head(prev);
                        }
                        None => self.replaced(loc.db, found, meta).await,
                    }
                    return Ok(Ok(()));
                }
                TxOutcome::Conflict { .. } | TxOutcome::Locked => {
                    self.pool.free_object(obj).await;
                    self.backoff(attempt, matches!(outcome, TxOutcome::Locked))
                        .await;
                }
                TxOutcome::StaleEpoch { .. } => {
                    self.pool.free_object(obj).await;
                    return Err(DhtError::NotOwner(loc.key_slot));
                }
                // In doubt: the object may be reachable, so it is leaked, not freed.
                TxOutcome::Failed(e) => return Err(e.into()),
            }
        }
        Err(DhtError::Contention(loc.key_slot))
    }
}
