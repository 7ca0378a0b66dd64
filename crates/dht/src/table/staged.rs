//! Transactions that stage their writes (EXEC, scripts): inside [`Dht::atomically`] a
//! write of this table writes its new object as always but, instead of committing the
//! key's slot word, records the new object and metadata (or the key's deletion) in a
//! task-local staging area. Reads on the task see staged keys first, so a transaction
//! reads its own writes, and the pool holds back the frees of what the writes replace.
//! When the transaction's work ends, every staged key is committed in one transaction
//! per shard lease (OCC + 2PC, the slot words locked in place), so a reader on any
//! agent sees all of the old words or all of the new ones; then the held-back frees
//! run. If the commit fails nothing was made visible (or, in doubt, the outcome is
//! unknown): the staged objects and the held-back frees are leaked, never freed under a
//! reader.
//!
//! The caller (the engine) holds the write locks of the transaction's keys for the
//! whole scope, so no other write of this agent — the only writer of its hash slots —
//! comes between: what the commit validates can only have been changed by eviction,
//! expiry or a rebuild, which it retries around.

use std::collections::HashMap;
use std::future::Future;

use bytes::Bytes;
use dmc_umo::{GlobalAddr, ObjectRef, ReadObject, Tx, TxOutcome, TxWrite, ValueKind};

use super::{Change, Dht, DhtError, Found, Loc, MAX_RETRIES, SetOptions};
use super::{SetOutcome, Ttl};
use crate::layout::{SLOTS_PER_BUCKET, SlotMeta, SlotWord};
use crate::owner::Lease;
use crate::policy;

/// Keys one commit transaction carries at most (three words each; a transaction
/// writing more keys commits in pieces of this many, each atomic on its own).
const MAX_KEYS_PER_COMMIT: usize = 4096;

/// A key's state in the transaction.
struct StagedKey {
    loc: Loc,
    lease: Lease,
    /// The new object, its metadata and type; `None`: deleted.
    now: Option<(ObjectRef, SlotMeta, ValueKind)>,
    /// The object the key held when the transaction first changed it (`None`: absent).
    committed: Option<ObjectRef>,
    /// Once a change replaced `committed`: whether that change shares its chunks (only
    /// its own block is freed on commit). `None` while it is still the key's object
    /// (only its TTL changed).
    fate: Option<bool>,
}

/// What a transaction staged: its keys' new states and the frees its writes held back.
#[derive(Default)]
pub struct Staged {
    keys: Vec<(Bytes, StagedKey)>,
    frees: Vec<dmc_umo::Block>,
}

impl Staged {
    /// Keys the transaction changed.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The staged keys of one transaction on one table, while it runs.
struct Staging {
    /// The table they belong to (its address): another table on the same task does not
    /// stage.
    dht: usize,
    keys: parking_lot::Mutex<HashMap<u8, HashMap<Bytes, StagedKey>>>,
}

tokio::task_local! {
    static STAGING: Staging;
}

impl Dht {
    fn id(&self) -> usize {
        self as *const Dht as usize
    }

    /// Whether this task runs a transaction of this table ([`atomically`](Self::atomically)).
    pub fn is_staging(&self) -> bool {
        STAGING.try_with(|s| s.dht == self.id()).unwrap_or(false)
    }

    /// Runs `work` with this table's writes staged (module doc) and returns what it
    /// staged, for [`commit_staged`](Self::commit_staged). Nested, the outer
    /// transaction keeps the writes (what comes back is empty).
    pub async fn stage<F: Future>(&self, work: F) -> (F::Output, Staged) {
        if self.is_staging() {
            return (work.await, Staged::default());
        }
        let staging = Staging {
            dht: self.id(),
            keys: parking_lot::Mutex::new(HashMap::new()),
        };
        let ((out, keys), frees) = self
            .pool
            .defer_frees(STAGING.scope(staging, async {
                let out = work.await;
                let keys = STAGING.with(|s| std::mem::take(&mut *s.keys.lock()));
                (out, keys)
            }))
            .await;
        let keys = keys.into_values().flatten().collect();
        (out, Staged { keys, frees })
    }

    /// Commits what [`stage`](Self::stage) staged, all at once (per shard lease), then
    /// frees what it replaced. On an error nothing of it is visible (unless the
    /// commit is in doubt), and nothing is freed.
    pub async fn commit_staged(&self, staged: Staged) -> Result<(), DhtError> {
        let Staged { keys, frees } = staged;
        if keys.is_empty() {
            self.pool.free_now(frees);
            return Ok(());
        }
        let result = self.commit_keys(keys).await;
        match &result {
            Ok(()) => self.pool.free_now(frees),
            Err(e) => {
                tracing::warn!(error = %e, "a transaction's commit failed; nothing of it is visible")
            }
        }
        result
    }

    /// The staged state of `key`: `None` when the transaction has not changed it (or
    /// there is none), `Some(None)` when it deleted it.
    fn staged_state(&self, db: u8, key: &[u8]) -> Option<Option<(ObjectRef, SlotMeta, ValueKind)>> {
        STAGING
            .try_with(|s| {
                if s.dht != self.id() {
                    return None;
                }
                s.keys.lock().get(&db)?.get(key).map(|k| k.now)
            })
            .ok()
            .flatten()
    }

    /// `lookup` of a staged key: its new object as if committed (no slot address: the
    /// transaction's reads record no hits), or nothing when deleted.
    pub(super) async fn staged_found(
        &self,
        loc: &Loc,
        key: &[u8],
        want_value: bool,
    ) -> Option<Result<Option<Found>, DhtError>> {
        let (obj, meta, kind) = match self.staged_state(loc.db, key)? {
            None => return Some(Ok(None)),
            Some(now) => now,
        };
        let value = if want_value {
            match self.pool.read_object(obj, loc.db, key).await {
                Ok(ReadObject::Value(v, _)) => Some(v),
                Ok(ReadObject::Mismatch) => {
                    return Some(Err(super::corrupt("a staged object holds another key")));
                }
                Err(e) => return Some(Err(e.into())),
            }
        } else {
            None
        };
        Some(Ok(Some(Found {
            bucket: 0,
            addr: GlobalAddr::NULL,
            word: SlotWord::new(loc.fp, obj),
            meta,
            value,
            kind,
            ext: None,
        })))
    }

    /// Records `key`'s new state. `seen` is the object the caller found (the staged or
    /// the committed one); `sharing`: the new value shares the chunks of the one it
    /// replaces. An earlier staged object the change replaces is freed (held back
    /// until the commit, like every free of the transaction).
    async fn stage_key(
        &self,
        loc: Loc,
        lease: Lease,
        key: &[u8],
        now: Option<(ObjectRef, SlotMeta, ValueKind)>,
        seen: Option<ObjectRef>,
        sharing: bool,
    ) {
        let new = now.map(|n| n.0);
        let free = STAGING
            .try_with(|s| {
                let mut keys = s.keys.lock();
                let db = keys.entry(loc.db).or_default();
                match db.get_mut(key) {
                    None => {
                        db.insert(
                            Bytes::copy_from_slice(key),
                            StagedKey {
                                loc,
                                lease,
                                now,
                                committed: seen,
                                fate: (seen.is_some() && seen != new).then_some(sharing),
                            },
                        );
                        None
                    }
                    Some(st) => {
                        let prev = st.now.map(|n| n.0);
                        st.now = now;
                        st.lease = lease;
                        match prev.filter(|p| Some(*p) != new) {
                            Some(p) if Some(p) == st.committed => {
                                st.fate.get_or_insert(sharing);
                                None
                            }
                            other => other,
                        }
                    }
                }
            })
            .ok()
            .flatten();
        if let Some(prev) = free {
            match sharing {
                true => self.pool.free_head(prev),
                false => self.pool.free_object(prev).await,
            }
        }
    }

    /// `set` inside a transaction: the conditions and the new object as `set` makes
    /// them, the slot word staged.
    pub(super) async fn staged_set(
        &self,
        db: u8,
        key: &[u8],
        value: &[u8],
        opts: SetOptions,
    ) -> Result<SetOutcome, DhtError> {
        let loc = self.loc(db, key);
        let lease = self.lease(loc.key_slot)?;
        let (_, found) = self.lookup(&loc, key, opts.get).await?;
        let (abs, now) = self.now();
        let (expire, old) = match self.set_decision(found.as_ref(), &opts, abs)? {
            Ok(go) => go,
            Err(nothing) => return Ok(nothing),
        };
        let lfu = found.as_ref().map_or(policy::LFU_INIT, |f| f.meta.lfu());
        let need = (dmc_umo::object::HEADER + key.len() + value.len()) as u64;
        self.make_room(need).await?;
        let obj = self.write_with_room(db, key, opts.kind, value).await?;
        let meta = SlotMeta::new(expire, now.access, lfu);
        let seen = found.and_then(|f| f.word.object());
        self.stage_key(loc, lease, key, Some((obj, meta, opts.kind)), seen, false)
            .await;
        Ok(SetOutcome { written: true, old })
    }

    /// `update_kind` inside a transaction.
    pub(super) async fn staged_update<E>(
        &self,
        db: u8,
        key: &[u8],
        kind: ValueKind,
        f: impl FnOnce(Option<&Bytes>) -> Result<Change, E>,
    ) -> Result<Result<(), E>, DhtError> {
        let loc = self.loc(db, key);
        let lease = self.lease(loc.key_slot)?;
        let (_, found) = self.lookup(&loc, key, true).await?;
        let (abs, now) = self.now();
        let live = found.as_ref().filter(|f| !self.is_expired(f.meta, abs));
        if live.is_some_and(|l| !kind.replaces(l.kind)) {
            return Err(DhtError::WrongType);
        }
        let seen = found.as_ref().and_then(|f| f.word.object());
        let (value, sharing) = match f(live.and_then(|l| l.value.as_ref())) {
            Ok(Change::Write(v)) => (v, false),
            Ok(Change::WriteSharing(v)) => (v, true),
            Ok(Change::Keep) => return Ok(Ok(())),
            Ok(Change::Delete) => {
                if live.is_some() {
                    self.stage_key(loc, lease, key, None, seen, false).await;
                }
                return Ok(Ok(()));
            }
            Err(e) => return Ok(Err(e)),
        };
        let need = (dmc_umo::object::HEADER + key.len() + value.len()) as u64;
        self.make_room(need).await?;
        let obj = self.write_with_room(db, key, kind, &value).await?;
        let lfu = found.as_ref().map_or(policy::LFU_INIT, |f| f.meta.lfu());
        let expire = live.map(|f| f.meta.expire()).unwrap_or(0);
        let meta = SlotMeta::new(expire, now.access, lfu);
        self.stage_key(loc, lease, key, Some((obj, meta, kind)), seen, sharing)
            .await;
        Ok(Ok(()))
    }

    /// `delete` inside a transaction: whether a live key was removed.
    pub(super) async fn staged_delete(&self, db: u8, key: &[u8]) -> Result<bool, DhtError> {
        let loc = self.loc(db, key);
        let lease = self.lease(loc.key_slot)?;
        let (_, found) = self.lookup(&loc, key, false).await?;
        let Some(f) = found else {
            return Ok(false);
        };
        let live = !self.is_expired(f.meta, self.clock.now_ms());
        self.stage_key(loc, lease, key, None, f.word.object(), false)
            .await;
        Ok(live)
    }

    /// `expire` inside a transaction: the key's object stays, its metadata is staged.
    pub(super) async fn staged_expire(
        &self,
        db: u8,
        key: &[u8],
        at: Option<u64>,
    ) -> Result<bool, DhtError> {
        let loc = self.loc(db, key);
        let lease = self.lease(loc.key_slot)?;
        let (_, found) = self.lookup(&loc, key, false).await?;
        let abs = self.clock.now_ms();
        let Some(f) = found.filter(|f| !self.is_expired(f.meta, abs)) else {
            return Ok(false);
        };
        if at.is_some_and(|at| at <= abs) {
            return self.staged_delete(db, key).await;
        }
        let Some(obj) = f.word.object() else {
            return Ok(false);
        };
        let meta = f
            .meta
            .with_expire(at.map(|a| self.encode_expire(a)).unwrap_or(0));
        self.stage_key(loc, lease, key, Some((obj, meta, f.kind)), Some(obj), false)
            .await;
        Ok(true)
    }

    /// `ttl` of a staged key (`None`: not staged).
    pub(super) fn staged_ttl(&self, db: u8, key: &[u8]) -> Option<Ttl> {
        let now = self.staged_state(db, key)?;
        let abs = self.clock.now_ms();
        Some(match now {
            Some((_, meta, _)) if !self.is_expired(meta, abs) => {
                match self.decode_expire(meta.expire()) {
                    Some(at) => Ttl::ExpiresAt(at),
                    None => Ttl::Persistent,
                }
            }
            _ => Ttl::Missing,
        })
    }

    /// A hash slot's keys as the transaction sees them: `committed` without the keys
    /// it deleted, with the keys it created.
    pub(super) fn staged_scan(&self, slot: u16, committed: &mut Vec<(u8, Bytes)>) {
        let _ = STAGING.try_with(|s| {
            if s.dht != self.id() {
                return;
            }
            let keys = s.keys.lock();
            committed.retain(|(db, k)| {
                keys.get(db)
                    .and_then(|d| d.get(k))
                    .is_none_or(|st| st.now.is_some())
            });
            for (db, d) in keys.iter() {
                for (k, st) in d {
                    if st.loc.slot == slot
                        && st.now.is_some()
                        && !committed.iter().any(|(cdb, ck)| cdb == db && ck == k)
                    {
                        committed.push((*db, k.clone()));
                    }
                }
            }
        });
    }

    /// Commits the staged keys: one transaction per shard lease (and per
    /// [`MAX_KEYS_PER_COMMIT`] keys).
    async fn commit_keys(&self, keys: Vec<(Bytes, StagedKey)>) -> Result<(), DhtError> {
        let mut groups: Vec<(Lease, Vec<(Bytes, StagedKey)>)> = Vec::new();
        for (k, st) in keys {
            let lease = st.lease;
            match groups.iter_mut().find(|(l, g)| {
                (l.shard, l.epoch) == (lease.shard, lease.epoch) && g.len() < MAX_KEYS_PER_COMMIT
            }) {
                Some((_, g)) => g.push((k, st)),
                None => groups.push((lease, vec![(k, st)])),
            }
        }
        for (lease, group) in groups {
            self.commit_group(lease, &group).await?;
        }
        Ok(())
    }

    /// One transaction of staged keys of one shard lease, retried around conflicts
    /// with eviction, expiry and rebuilds.
    async fn commit_group(
        &self,
        lease: Lease,
        group: &[(Bytes, StagedKey)],
    ) -> Result<(), DhtError> {
        let slot0 = group.first().map_or(0, |(_, st)| st.loc.slot);
        'retry: for attempt in 0..MAX_RETRIES {
            let mut writes: Vec<TxWrite> = Vec::with_capacity(3 * group.len());
            let mut taken: Vec<GlobalAddr> = Vec::new();
            // (key, what it replaced, its slot's access-metadata entry)
            let mut done: Vec<(&StagedKey, Option<Found>, Option<GlobalAddr>)> =
                Vec::with_capacity(group.len());
            for (key, st) in group {
                let (probe, found) = self.lookup_committed(&st.loc, key, false).await?;
                let Some(probe) = probe else {
                    if st.now.is_none() {
                        continue;
                    }
                    self.create_partition(st.loc.slot, lease).await?;
                    continue 'retry;
                };
                if st.now.is_none() && found.is_none() {
                    continue;
                }
                let (bucket, addr, expect) = match &found {
                    Some(f) => (f.bucket, f.addr, f.word),
                    None => {
                        let free = (0..2).flat_map(|b| (0..SLOTS_PER_BUCKET).map(move |i| (b, i)));
                        let pick = free
                            .map(|(b, i)| (b, probe.slot(b, i)))
                            .find(|(_, (a, w, _))| w.is_empty() && !taken.contains(a));
                        match pick {
                            Some((b, (a, w, _))) => (b, a, w.unlocked()),
                            None => {
                                self.split(&st.loc, lease).await?;
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
                let (word, meta) = match st.now {
                    Some((obj, meta, _)) => (SlotWord::new(st.loc.fp, obj).0, meta.0),
                    None => (0, 0),
                };
                writes.push(TxWrite {
                    addr,
                    expect: Some(expect.0),
                    new: word,
                    in_word_lock: true,
                });
                writes.push(TxWrite {
                    addr: addr.offset_by(8),
                    expect: None,
                    new: meta,
                    in_word_lock: false,
                });
                done.push((st, found, probe.ext_at(addr)));
            }
            if done.is_empty() {
                return Ok(());
            }
            let tx = Tx {
                shard: lease.shard,
                epoch: lease.epoch,
                writes,
            };
            match self.commit(tx).await {
                TxOutcome::Committed => {
                    let written: Vec<_> = done
                        .iter()
                        .filter_map(|(st, found, entry)| {
                            st.now
                                .map(|(obj, _, _)| (found.as_ref(), *entry, obj, st.loc.fp))
                        })
                        .collect();
                    self.note_writes(&written).await;
                    for (st, found, _) in done {
                        self.committed_staged(st, found).await;
                    }
                    return Ok(());
                }
                TxOutcome::Conflict { .. } => self.backoff(attempt, false).await,
                TxOutcome::Locked => self.backoff(attempt, true).await,
                TxOutcome::StaleEpoch { .. } => return Err(DhtError::NotOwner(slot0)),
                TxOutcome::Failed(e) => return Err(e.into()),
            }
        }
        Err(DhtError::Contention(slot0))
    }

    /// The bookkeeping of a committed staged key: key counts, and freeing the object
    /// it replaced.
    async fn committed_staged(&self, st: &StagedKey, found: Option<Found>) {
        let db = st.loc.db;
        let new_meta = st.now.map(|n| n.1);
        match &found {
            Some(f) => self.count_key(
                db,
                if new_meta.is_some() { 0 } else { -1 },
                Some(f.meta),
                new_meta,
            ),
            None => self.count_key(db, 1, None, new_meta),
        }
        let replaced = found
            .and_then(|f| f.word.object())
            .filter(|o| Some(*o) == st.committed);
        match (replaced, st.fate) {
            (Some(obj), Some(true)) => self.pool.free_head(obj),
            (Some(obj), Some(false)) => self.pool.free_object(obj).await,
            _ => {}
        }
    }
}
