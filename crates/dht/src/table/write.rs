//! Writes: `set` (NX/XX, expiry, GET), `set_many` (MSET/MSETNX in one transaction),
//! and installing a written object's slot word: a single key with one-sided verbs
//! ([`dmc_umo::Pool::commit_slot`], inside an ownership [`crate::owner::WriteGuard`]),
//! many keys with a two-phase commit whose slot words carry their locks in place, so
//! the two kinds of writers see each other.
//!
//! Only the owner of a key's hash slot writes it. The object is written out of place
//! first and freed if the install fails or is refused, but never after an in-doubt
//! commit: that may have made it reachable, so it is leaked instead.

use dmc_umo::{GlobalAddr, ObjectRef, SlotWrite, Tx, TxOutcome, TxWrite, ValueKind};

use super::probe::Probe;
use super::{Dht, DhtError, Found, Loc, MAX_RETRIES, SetCond, SetExpiry, SetOptions, SetOutcome};
use crate::layout::{SLOTS_PER_BUCKET, SlotMeta, SlotWord};
use crate::owner::Lease;
use crate::policy;
use crate::rng;

impl Dht {
    /// After a committed insert or overwrite: counts the key and frees the object the
    /// slot held before (`found`), if any.
    pub(super) async fn replaced(&self, db: u8, found: Option<Found>, meta: SlotMeta) {
        if let Some(prev) = self.count_replaced(db, found, meta) {
            self.pool.free_object(prev).await
        }
    }

    /// The counting half of [`replaced`](Self::replaced): returns the object to free.
    pub(super) fn count_replaced(
        &self,
        db: u8,
        found: Option<Found>,
        meta: SlotMeta,
    ) -> Option<ObjectRef> {
        let prev_meta = found.as_ref().map(|f| f.meta);
        let prev = found.and_then(|f| f.word.object());
        match prev {
            Some(_) => self.count_key(db, 0, prev_meta, Some(meta)),
            None => self.count_key(db, 1, None, Some(meta)),
        }
        prev
    }

    /// Sets `key` to `value` in `db`.
    pub async fn set(
        &self,
        db: u8,
        key: &[u8],
        value: &[u8],
        opts: SetOptions,
    ) -> Result<SetOutcome, DhtError> {
        if self.is_staging() {
            return Box::pin(self.staged_set(db, key, value, opts)).await;
        }
        // What `set_now` left on some copies only (it declined this write) first.
        self.pool.finish_object_writes().await;
        let loc = self.loc(db, key);
        let lease = self.lease(loc.key_slot)?;
        let need = (dmc_umo::object::HEADER + key.len() + value.len()) as u64;
        self.make_room(need).await?;
        let obj = self.write_with_room(db, key, opts.kind, value).await?;
        match self.install(&loc, lease, key, obj, opts).await {
            Ok(out) => {
                if !out.written {
                    self.pool.free_object(obj).await;
                }
                Ok(out)
            }
            Err(e) => {
                // An in-doubt commit may have made the object reachable: leak it rather
                // than risk freeing live data.
                if !matches!(e, DhtError::Pool(_)) {
                    self.pool.free_object(obj).await;
                }
                Err(e)
            }
        }
    }

    /// Sets many keys of `db` in one transaction (Redis's MSET and MSETNX): readers see
    /// all of the new values or none. A repeated key keeps its last value. With
    /// `only_if_all_absent` nothing is written if any key exists (returns false). Keys
    /// in hash slots of several shard leases are written one by one, not atomically
    /// (a standalone agent holds one lease; Redis Cluster would refuse CROSSSLOT).
    pub async fn set_many(
        &self,
        db: u8,
        pairs: &[(&[u8], &[u8])],
        only_if_all_absent: bool,
    ) -> Result<bool, DhtError> {
        if self.is_staging() {
            // Staged key by key: the transaction commits them together.
            return Box::pin(self.set_each(db, pairs, only_if_all_absent)).await;
        }
        let mut seen: std::collections::HashSet<&[u8]> =
            std::collections::HashSet::with_capacity(pairs.len());
        let mut unique: Vec<(&[u8], &[u8])> = Vec::with_capacity(pairs.len());
        for (k, v) in pairs.iter().rev() {
            if seen.insert(k) {
                unique.push((k, v));
            }
        }
        unique.reverse();
        let locs: Vec<Loc> = unique.iter().map(|(k, _)| self.loc(db, k)).collect();
        let mut lease = None;
        for loc in &locs {
            let l = self.lease(loc.key_slot)?;
            match lease {
                None => lease = Some(l),
                Some(first) if (first.shard, first.epoch) != (l.shard, l.epoch) => {
                    // Hash slots of several shards cannot share one transaction: write
                    // key by key (not atomic), as Redis Cluster would refuse CROSSSLOT.
                    return self.set_each(db, &unique, only_if_all_absent).await;
                }
                Some(_) => {}
            }
        }
        let Some(lease) = lease else {
            return Ok(true);
        };
        let need: u64 = unique
            .iter()
            .map(|(k, v)| (dmc_umo::object::HEADER + k.len() + v.len()) as u64)
            .sum();
        // Every key's buckets and old object started loading together: over in-process
        // memory their cache misses then overlap instead of coming one key at a time.
        self.prefetch_buckets(db, unique.iter().map(|(k, _)| *k));
        self.make_room(need).await?;
        let mut objects = Vec::with_capacity(unique.len());
        for (k, v) in &unique {
            // Without awaiting where the pool's memory is in this address space; any
            // reason it cannot (a segment to claim, no room, a copy not reached) is the
            // awaited path's to handle.
            let written = match self.pool.write_object_now(db, k, v) {
                Some(Ok(o)) => Ok(o),
                _ => {
                    // What the inline write left on some copies only, first.
                    self.pool.finish_object_writes().await;
                    self.write_with_room(db, k, ValueKind::String, v).await
                }
            };
            match written {
                Ok(o) => objects.push(o),
                Err(e) => {
                    for o in objects {
                        self.pool.free_object(o).await;
                    }
                    return Err(e);
                }
            }
        }
        let result = self
            .install_many(&locs, lease, &unique, &objects, only_if_all_absent)
            .await;
        match result {
            Ok(true) => Ok(true),
            Ok(false) => {
                for o in objects {
                    self.pool.free_object(o).await;
                }
                Ok(false)
            }
            // In doubt (the commit's outcome is unknown): the objects may be reachable;
            // leak them rather than free live data.
            Err((e, true)) => Err(e),
            Err((e, false)) => {
                for o in objects {
                    self.pool.free_object(o).await;
                }
                Err(e)
            }
        }
    }

    /// The keys of `pairs` one `set` at a time (not atomic), for batches whose keys
    /// span shards; with `only_if_all_absent`, checked first.
    async fn set_each(
        &self,
        db: u8,
        pairs: &[(&[u8], &[u8])],
        only_if_all_absent: bool,
    ) -> Result<bool, DhtError> {
        if only_if_all_absent {
            for (k, _) in pairs {
                if self.exists(db, k).await? {
                    return Ok(false);
                }
            }
        }
        for (k, v) in pairs {
            self.set(db, k, v, SetOptions::default()).await?;
        }
        Ok(true)
    }

    async fn install_many(
        &self,
        locs: &[Loc],
        lease: Lease,
        pairs: &[(&[u8], &[u8])],
        objects: &[ObjectRef],
        only_if_all_absent: bool,
    ) -> Result<bool, (DhtError, bool)> {
        // Errors before the commit leave nothing reachable (`false`); a failed commit
        // is in doubt (`true`).
        let early = |e: DhtError| (e, false);
        'retry: for attempt in 0..MAX_RETRIES {
            let (abs, now) = self.now();
            let mut writes: Vec<TxWrite> = Vec::with_capacity(3 * pairs.len());
            let mut taken: Vec<GlobalAddr> = Vec::new();
            // (previous found slot, new metadata, the slot's access-metadata entry) per
            // key, for the bookkeeping.
            let mut done: Vec<(Option<Found>, SlotMeta, Option<GlobalAddr>)> =
                Vec::with_capacity(pairs.len());
            for ((loc, (key, _)), obj) in locs.iter().zip(pairs).zip(objects) {
                let (probe, found) = match self.lookup_now(loc, key, false) {
                    Some(Ok((probe, found))) => (Some(probe), found),
                    // A stale directory, a node that failed: the awaited lookup.
                    _ => self.lookup(loc, key, false).await.map_err(early)?,
                };
                let Some(probe) = probe else {
                    self.create_partition(loc.slot, lease)
                        .await
                        .map_err(early)?;
                    continue 'retry;
                };
                let live = found.as_ref().filter(|f| !self.is_expired(f.meta, abs));
                if only_if_all_absent && live.is_some() {
                    return Ok(false);
                }
                let lfu = found
                    .as_ref()
                    .map(|f| f.meta.lfu())
                    .unwrap_or(policy::LFU_INIT);
                let meta = SlotMeta::new(0, now.access, lfu);
                let (bucket, addr, expect) = match &found {
                    Some(f) => (f.bucket, f.addr, f.word),
                    None => {
                        // An empty slot no earlier key of this batch took.
                        let free = (0..2).flat_map(|b| (0..SLOTS_PER_BUCKET).map(move |i| (b, i)));
                        let pick = free
                            .map(|(b, i)| (b, probe.slot(b, i)))
                            .find(|(_, (a, w, _))| w.is_empty() && !taken.contains(a));
                        match pick {
                            Some((b, (a, w, _))) => (b, a, w.unlocked()),
                            None => {
                                self.split(loc, lease).await.map_err(early)?;
                                continue 'retry;
                            }
                        }
                    }
                };
                taken.push(addr);
                let guard = Self::header_guard(&probe, bucket);
                if !writes.iter().any(|w| w.addr == guard.addr) {
                    writes.push(guard);
                }
                writes.push(TxWrite {
                    addr,
                    expect: Some(expect.0),
                    new: SlotWord::new(loc.fp, *obj).0,
                    in_word_lock: true,
                });
                writes.push(TxWrite {
                    addr: addr.offset_by(8),
                    expect: None,
                    new: meta.0,
                    in_word_lock: false,
                });
                done.push((found, meta, probe.ext_at(addr)));
            }
            let tx = Tx {
                shard: lease.shard,
                epoch: lease.epoch,
                writes,
            };
            match self.commit(tx).await {
                TxOutcome::Committed => {
                    let written: Vec<_> = locs
                        .iter()
                        .zip(&done)
                        .zip(objects)
                        .map(|((loc, (found, _, entry)), obj)| {
                            (found.as_ref(), *entry, *obj, loc.fp)
                        })
                        .collect();
                    self.note_writes(&written).await;
                    for (loc, (found, meta, _)) in locs.iter().zip(done) {
                        self.replaced(loc.db, found, meta).await;
                    }
                    return Ok(true);
                }
                TxOutcome::Conflict { .. } => self.backoff(attempt, false).await,
                TxOutcome::Locked => self.backoff(attempt, true).await,
                TxOutcome::StaleEpoch { .. } => {
                    return Err(early(DhtError::NotOwner(locs[0].slot)));
                }
                TxOutcome::Failed(e) => return Err((e.into(), true)),
            }
        }
        Err(early(DhtError::Contention(locs[0].slot)))
    }

    /// What a SET with `opts` does to a key found as `found`: `Err` with its outcome
    /// when it writes nothing (its condition is not met), else the new value's expiry
    /// word and the previous value (for `GET`). A previous value of another type is
    /// [`DhtError::WrongType`] when `opts.get` asks for it; `abs` is now (Unix ms).
    /// Shared by the one-sided and
    /// the staged (transaction) paths.
    pub(super) fn set_decision(
        &self,
        found: Option<&Found>,
        opts: &SetOptions,
        abs: u64,
    ) -> Result<Result<(u64, Option<bytes::Bytes>), SetOutcome>, DhtError> {
        let live = found.filter(|f| !self.is_expired(f.meta, abs));
        if opts.get && live.is_some_and(|f| f.kind != ValueKind::String) {
            return Err(DhtError::WrongType);
        }
        let old = live.and_then(|f| f.value.clone());
        let blocked = match opts.cond {
            SetCond::Always => false,
            SetCond::IfAbsent => live.is_some(),
            SetCond::IfPresent => live.is_none(),
        };
        if blocked {
            return Ok(Err(SetOutcome {
                written: false,
                old,
            }));
        }
        let expire = match opts.expiry {
            SetExpiry::Clear => 0,
            SetExpiry::Keep => live.map(|f| f.meta.expire()).unwrap_or(0),
            SetExpiry::At(at) => self.encode_expire(at),
        };
        Ok(Ok((expire, old)))
    }

    async fn install(
        &self,
        loc: &Loc,
        lease: Lease,
        key: &[u8],
        obj: ObjectRef,
        opts: SetOptions,
    ) -> Result<SetOutcome, DhtError> {
        let new_word = SlotWord::new(loc.fp, obj);
        for attempt in 0..MAX_RETRIES {
            let Some((split_guard, probe, found)) =
                self.probe_for_write(loc, lease, key, opts.get).await?
            else {
                continue;
            };
            let (abs, now) = self.now();
            let (expire, old) = match self.set_decision(found.as_ref(), &opts, abs)? {
                Ok(go) => go,
                Err(nothing) => return Ok(nothing),
            };
            let lfu = found
                .as_ref()
                .map(|f| f.meta.lfu())
                .unwrap_or(policy::LFU_INIT);
            let meta = SlotMeta::new(expire, now.access, lfu);
            let Some(target) = Self::target_slot(&probe, found.as_ref()) else {
                drop(split_guard);
                self.split(loc, lease).await?;
                continue;
            };
            let new_entry = probe.ext_at(target.0);
            // A slot another writer holds comes back as `Locked`.
            let outcome = self
                .commit_one_sided(loc, lease, target, new_word, meta)
                .await?;
            if outcome == TxOutcome::Committed {
                // Under the rebuild lock still: the entry's subtable is not retired.
                let written = [(found.as_ref(), new_entry, obj, loc.fp)];
                self.note_writes(&written).await;
            }
            drop(split_guard);
            match outcome {
                TxOutcome::Committed => {
                    self.replaced(loc.db, found, meta).await;
                    return Ok(SetOutcome { written: true, old });
                }
                TxOutcome::Conflict { .. } => self.backoff(attempt, false).await,
                TxOutcome::Locked => self.backoff(attempt, true).await,
                TxOutcome::StaleEpoch { .. } => return Err(DhtError::NotOwner(loc.key_slot)),
                TxOutcome::Failed(e) => return Err(e.into()),
            }
        }
        Err(DhtError::Contention(loc.key_slot))
    }

    /// Probes `key` for a one-sided write, holding the hash slot's rebuild lock
    /// (shared) until the caller's commit: no rebuild of its subtables between the
    /// probe and the commit, so the slot found is the key's live slot (a one-sided
    /// write validates no bucket header) and its memory is not freed and reused
    /// meanwhile. `None`: the hash slot had no partition yet; it was created, probe
    /// again.
    pub(super) async fn probe_for_write(
        &self,
        loc: &Loc,
        lease: Lease,
        key: &[u8],
        want_value: bool,
    ) -> Result<Option<(tokio::sync::RwLockReadGuard<'_, ()>, Probe, Option<Found>)>, DhtError>
    {
        let guard = self.no_rebuild(loc.slot).await;
        let (probe, found) = self.lookup(loc, key, want_value).await?;
        match probe {
            Some(probe) => Ok(Some((guard, probe, found))),
            None => {
                drop(guard);
                self.create_partition(loc.slot, lease).await?;
                Ok(None)
            }
        }
    }

    /// The slot a one-sided write of a key goes to, with the words it holds: the key's
    /// own (`found`) or an empty one; `None` when both buckets are full (split first).
    pub(super) fn target_slot(
        probe: &Probe,
        found: Option<&Found>,
    ) -> Option<(GlobalAddr, SlotWord, SlotMeta)> {
        match found {
            Some(f) => Some((f.addr, f.word, f.meta)),
            None => Self::empty_slot(probe),
        }
    }

    /// Commits `new` and `meta` into slot `target` (from [`target_slot`](Self::target_slot))
    /// with one-sided verbs, inside an ownership write guard. The caller holds the
    /// hash slot's rebuild lock (shared) since its probe.
    pub(super) async fn commit_one_sided(
        &self,
        loc: &Loc,
        lease: Lease,
        (addr, old, old_meta): (GlobalAddr, SlotWord, SlotMeta),
        new: SlotWord,
        meta: SlotMeta,
    ) -> Result<TxOutcome, DhtError> {
        let Some(_writing) = self.owner.begin_write(loc.slot, lease) else {
            if self.owner.lease_expired() {
                return Err(DhtError::LeaseExpired);
            }
            return Err(DhtError::NotOwner(loc.key_slot));
        };
        // Widens the window a release must wait out, for the ownership race test:
        // `return(MS)` pauses this write MS milliseconds (without blocking a thread).
        #[cfg(feature = "failpoints")]
        if let Some(Some(ms)) = fail::eval("dht-one-sided-commit", |arg| {
            arg.and_then(|ms| ms.parse::<u64>().ok())
        }) {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        // A writer that dies mid-commit, for the recovery tests: `return(1)` stops
        // after locking the primary, `return(2)` after the backups got the new pair.
        #[cfg(feature = "failpoints")]
        let cut_off = fail::eval("dht-one-sided-cut-off", |arg| {
            arg.and_then(|s| s.parse::<u32>().ok())
        })
        .flatten();
        #[cfg(not(feature = "failpoints"))]
        let cut_off: Option<u32> = None;
        // A writer process that dies mid-commit, for the end-to-end fault tests:
        // `return(STEPS)` runs the first STEPS steps as above, then aborts the process.
        #[cfg(feature = "failpoints")]
        if let Some(Some(steps)) = fail::eval("dht-one-sided-crash", |arg| {
            arg.and_then(|s| s.parse::<u32>().ok())
        }) {
            let _ = self.cut_off_commit(steps, addr, old, new, meta).await;
            tracing::error!(
                steps,
                "fail point dht-one-sided-crash: the process dies mid-commit"
            );
            std::process::abort();
        }
        let outcome = match cut_off {
            Some(_steps) => {
                #[cfg(feature = "failpoints")]
                self.cut_off_commit(_steps, addr, old, new, meta).await?;
                TxOutcome::Failed(dmc_umo::UmoError::Config("cut off by a fail point".into()))
            }
            None => {
                self.pool
                    .commit_slot(SlotWrite {
                        addr,
                        old: old.0,
                        old_meta: old_meta.0,
                        new: new.0,
                        meta: meta.0,
                    })
                    .await
            }
        };
        if matches!(outcome, TxOutcome::Failed(_)) {
            // A node stopped answering mid-commit: the slot may be left locked.
            self.in_doubt(loc.slot, addr);
        }
        Ok(outcome)
    }

    /// The first `steps` steps of a one-sided commit and nothing more (see the
    /// `dht-one-sided-cut-off` fail point).
    #[cfg(feature = "failpoints")]
    async fn cut_off_commit(
        &self,
        steps: u32,
        addr: GlobalAddr,
        old: SlotWord,
        new: SlotWord,
        meta: SlotMeta,
    ) -> Result<(), DhtError> {
        let locked = old.0 | dmc_umo::WORD_LOCK;
        if self.pool.cas_copy(addr, 0, old.0, locked).await? != old.0 {
            return Ok(());
        }
        if steps >= 2 {
            let mut pair = [0u8; 16];
            pair[..8].copy_from_slice(&new.0.to_le_bytes());
            pair[8..].copy_from_slice(&meta.0.to_le_bytes());
            for copy in 1..self.pool.copy_count(addr.region()).await? {
                self.pool.write_copy(addr, copy, &pair).await?;
            }
        }
        Ok(())
    }

    /// An empty slot in the emptier of the two buckets, with the word a writer taking
    /// it replaces (0, or an eviction-history entry) and its metadata word. Slots
    /// without history go first, so history lasts as long as there is room.
    fn empty_slot(probe: &Probe) -> Option<(GlobalAddr, SlotWord, SlotMeta)> {
        let empties = |b: usize| {
            (0..SLOTS_PER_BUCKET)
                .filter(|&i| probe.slot(b, i).1.is_empty())
                .count()
        };
        let order = if empties(1) > empties(0) {
            [1, 0]
        } else {
            [0, 1]
        };
        // A random empty slot rather than the first: concurrent inserts into one bucket
        // then rarely pick the same slot and conflict.
        order.into_iter().find_map(|b| {
            let n = empties(b);
            if n == 0 {
                return None;
            }
            let blank = |w: SlotWord| w.unlocked() == SlotWord::EMPTY;
            let blanks = (0..SLOTS_PER_BUCKET)
                .filter(|&i| blank(probe.slot(b, i).1))
                .count();
            let (n, only_blank) = if blanks > 0 {
                (blanks, true)
            } else {
                (n, false)
            };
            let pick = rng::below(n as u64) as usize;
            (0..SLOTS_PER_BUCKET)
                .map(|i| probe.slot(b, i))
                .filter(|(_, w, _)| w.is_empty() && (!only_blank || blank(*w)))
                .nth(pick)
                .map(|(addr, w, meta)| (addr, w.unlocked(), meta))
        })
    }
}
