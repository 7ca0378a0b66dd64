//! Eviction: making room before a write (`make_room`, `room_for`), shrinking to
//! maxmemory, keeping a spare segment, and `evict_one`, which samples candidates and
//! evicts the policy's lowest priority; the removed-key hook is told of each.
//!
//! Only keys of hash slots this client owns are evicted. Under `noeviction` nothing is,
//! and a write that does not fit gets OOM.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use dmc_umo::{GlobalAddr, ObjectRef, UmoError, ValueKind};

use super::{Dht, DhtError, Found, MAX_RETRIES, Removal};
use crate::layout::{self, SLOTS_PER_BUCKET, SlotMeta, SlotWord, le64};
use crate::policy::Policy;
use crate::rng;

impl Dht {
    /// Registers a function told of every key this client evicts or reclaims as
    /// expired (stored database, key, why), so copies of it elsewhere (the agent's
    /// cache, trackers) can be dropped and keyspace notifications sent.
    pub fn on_removed(&self, f: impl Fn(u8, &[u8], Removal) + Send + Sync + 'static) {
        *self.removed.write() = Some(Box::new(f));
    }

    pub(super) fn removed(&self, db: u8, key: &[u8], why: Removal) {
        if let Some(f) = self.removed.read().as_ref() {
            f(db, key, why);
        }
    }

    /// Writes an object, making room if the pool is full (see [`room_for`](Self::room_for)).
    pub(super) async fn write_with_room(
        &self,
        db: u8,
        key: &[u8],
        kind: ValueKind,
        value: &[u8],
    ) -> Result<ObjectRef, DhtError> {
        self.room_for(|| self.pool.write_object(db, key, kind, value))
            .await
    }

    /// Runs a pool allocation; if the pool is full (no region left within maxmemory),
    /// evicts per the policy and tries again, waiting out the grace period of the
    /// blocks just freed (they are reusable only after it), before answering OOM.
    pub(super) async fn room_for<T, F, Fut>(&self, mut attempt: F) -> Result<T, DhtError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, UmoError>>,
    {
        // Long enough for a segment emptied by eviction to pass its grace period even
        // on a loaded host: an evicting cache should wait rather than answer OOM.
        let give_up = std::time::Instant::now() + self.pool.config().grace * 10;
        loop {
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(UmoError::OutOfMemory(_)) => {
                    if !self.policy().evicts() || std::time::Instant::now() > give_up {
                        tracing::warn!(stats = ?self.pool.stats(), used = self.used_memory(), "out of pool memory");
                        return Err(DhtError::OutOfMemory);
                    }
                    for _ in 0..16 {
                        if self.evict_one().await?.is_none() {
                            break;
                        }
                    }
                    // Free blocks scattered over every segment do not make one free.
                    self.keep_spare_segment().await?;
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Whether `need` more bytes fit `maxmemory` (always, without one).
    pub(super) fn room_now(&self, need: u64) -> bool {
        let max = self.eviction_limit();
        max == 0 || self.used_memory() + need <= max
    }

    /// Evicts until used memory plus `need` fits `maxmemory`.
    pub(super) async fn make_room(&self, need: u64) -> Result<(), DhtError> {
        while !self.room_now(need) {
            if !self.policy().evicts() {
                return Err(DhtError::OutOfMemory);
            }
            if self.evict_one().await?.is_none() {
                return Err(DhtError::OutOfMemory);
            }
        }
        Ok(())
    }

    /// Evicts (per the policy, at most `limit` keys) while the pool holds more than
    /// `maxmemory`; returns how many keys went.
    pub async fn shrink_to_maxmemory(&self, limit: usize) -> Result<usize, DhtError> {
        let max = self.eviction_limit();
        let mut evicted = 0;
        while max > 0 && evicted < limit && self.used_memory() > max && self.policy().evicts() {
            if self.evict_one().await?.is_none() {
                break;
            }
            evicted += 1;
        }
        Ok(evicted)
    }

    /// Keeps a segment free for allocations the full pool cannot serve otherwise (the
    /// maintenance tick calls this, and so does a write that found no room): if no
    /// spare one is left, evicts the keys of the sparsest segment so it empties (after
    /// the grace period) and can serve any size class. At most one segment per two
    /// grace periods. Returns the keys evicted.
    pub async fn keep_spare_segment(&self) -> Result<usize, DhtError> {
        if !self.pool.at_limit() || !self.policy().evicts() || self.pool.spare_segments() > 0 {
            return Ok(0);
        }
        // One segment at a time: the last one empties only after the grace period.
        {
            let mut last = self.spare_started.lock();
            if last.is_some_and(|t| t.elapsed() < self.pool.config().grace * 2) {
                return Ok(0);
            }
            *last = Some(std::time::Instant::now());
        }
        match self.pool.drain_sparsest_segment() {
            Some((start, len)) => self.evict_range(start, len).await,
            None => Ok(0),
        }
    }

    /// Evicts an entry found in `bucket` (with the header it was read under), policy or
    /// not: clears its slot word if it still holds it, counts the eviction and drops the
    /// key from the local cache. `Some(key)` (the key, if its object was readable) when
    /// evicted, `None` when the entry changed meanwhile.
    pub(super) async fn evict_entry(
        &self,
        slot: u16,
        bucket: (GlobalAddr, u64),
        found: &Found,
    ) -> Result<Option<Option<(u8, Bytes)>>, DhtError> {
        self.evict_entry_leaving(slot, bucket, found, None).await
    }

    /// [`evict_entry`](Self::evict_entry), the slot left holding a history entry
    /// (history counter value, expert bits) of the key when `history` says so.
    pub(super) async fn evict_entry_leaving(
        &self,
        slot: u16,
        bucket: (GlobalAddr, u64),
        found: &Found,
        history: Option<(u64, u8)>,
    ) -> Result<Option<Option<(u8, Bytes)>>, DhtError> {
        let Some(obj) = found.word.object() else {
            return Ok(None);
        };
        let key = self.pool.read_any(obj).await?;
        let leave = match (history, &key) {
            (Some((id, bits)), Some(o)) => (
                crate::adaptive::history_word(found.word.fp(), id, bits),
                crate::hash::key_hash(o.db, &o.key),
            ),
            _ => (0, 0),
        };
        if !self
            .clear_leaving(
                slot,
                bucket,
                found,
                key.as_ref().map(|k| k.db),
                false,
                leave,
            )
            .await?
        {
            return Ok(None);
        }
        self.counters.evicted.fetch_add(1, Ordering::Relaxed);
        if let Some(o) = &key {
            self.removed(o.db, &o.key, Removal::Evicted);
        }
        Ok(Some(key.map(|o| (o.db, o.key))))
    }

    /// Reads one random bucket of a random owned partition: its slots as candidates.
    pub(super) async fn sample_bucket(&self, parts: &[u16]) -> Result<Vec<Candidate>, DhtError> {
        let slot = parts[rng::below(parts.len() as u64) as usize];
        let Some(dir) = self.dir(slot).await? else {
            return Ok(Vec::new());
        };
        let st = dir.subtables[rng::below(dir.subtables.len() as u64) as usize];
        let index = rng::below(self.buckets);
        let bucket = st.offset_by(index * layout::BUCKET);
        let mut bytes = [0u8; layout::BUCKET as usize];
        self.pool.read(bucket, &mut bytes).await?;
        let header = le64(&bytes, 0);
        // A cached directory may name a subtable that was split and its memory reused
        // (by any size class): only a live bucket of this slot is sampled.
        if header & layout::MOVED != 0
            || layout::header_slot(header) != slot
            || layout::header_depth(header) > 32
        {
            self.load_dir(slot).await?;
            return Ok(Vec::new());
        }
        let ext = self.ext_base(st, index, header);
        Ok(bucket_candidates(slot, bucket, &bytes, ext))
    }

    /// Evicts one key by sampling: at least `maxmemory-samples` eligible candidates
    /// (expired keys first; with 0 samples, every key), the lowest priority goes.
    /// Returns the evicted key, or `None` if nothing this client owns may be evicted.
    pub async fn evict_one(&self) -> Result<Option<(u8, Bytes)>, DhtError> {
        let policy = self.policy();
        if !policy.evicts() {
            return Ok(None);
        }
        let parts = self.owned_partitions();
        if parts.is_empty() {
            return Ok(None);
        }
        let k = self.samples();
        let (abs, now) = self.now();
        let adaptive = policy == crate::RedisPolicy::Adaptive;
        if adaptive
            // Weights as of the instance's latest sums (a no-op until enough regrets);
            // the policy's bookkeeping never stands in eviction's way.
            && let Err(e) = self.sync_adaptive(false).await
        {
            tracing::warn!(error = %e, "merging the adaptive policy's regrets failed");
        }
        // Rank by this client's accesses too, not only those already applied (unless
        // another flush is applying them: evictions do not queue behind each other).
        self.flush_access_if_free().await;
        for _ in 0..MAX_RETRIES {
            let mut candidates: Vec<Candidate> = Vec::new();
            if k > 0 {
                // Bounded sampling: sparse tables may need many bucket reads to find K keys.
                for _ in 0..(k * 8).max(64) {
                    for cand in self.sample_bucket(&parts).await? {
                        if self.is_expired(cand.3.meta, abs) || policy.eligible(cand.3.meta) {
                            candidates.push(cand);
                        }
                    }
                    if candidates.len() >= k {
                        break;
                    }
                }
            }
            if candidates.is_empty() {
                // Sampling found nothing eligible (a sparse table, or few keys the
                // policy may evict), or every key is to be compared: look everywhere
                // before declaring nothing evictable.
                candidates = self.every_candidate(&parts, &policy, abs).await?;
            }
            let found: Vec<&Found> = candidates.iter().map(|c| &c.3).collect();
            let ranks = self.candidate_ranks(policy, &found, &now, abs).await;
            let mut best = ranks
                .iter()
                .enumerate()
                .min_by(|(_, (px, lx)), (_, (py, ly))| px.total_cmp(py).then(lx.cmp(ly)))
                .map(|(i, (p, _))| (i, *p));
            // An expired candidate goes first, whatever the policy; otherwise the
            // experts choose, and the victim's slot keeps a history entry.
            let mut history = None;
            if adaptive && best.is_some_and(|(_, p)| p > f64::NEG_INFINITY) {
                let live: Vec<usize> = (0..candidates.len())
                    .filter(|&i| ranks[i].0 > f64::NEG_INFINITY)
                    .collect();
                let words: Vec<(SlotWord, SlotMeta)> = live
                    .iter()
                    .map(|&i| (candidates[i].3.word, candidates[i].3.meta))
                    .collect();
                if let Some((i, bits)) = self.adaptive_pick(&words, &now) {
                    history = Some(bits);
                    best = live.get(i).map(|&i| (i, 0.0));
                }
            }
            let Some((i, priority)) = best else {
                return Ok(None);
            };
            let (slot, bucket, header, victim) = candidates.swap_remove(i);
            let history = match history {
                Some(bits) => self.history_entry(bits).await,
                None => None,
            };
            let evicted = self
                .evict_entry_leaving(slot, (bucket, header), &victim, history)
                .await?;
            if let Some(key) = evicted {
                self.evicted_at(policy, priority);
                return Ok(key);
            }
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
        }
        Ok(None)
    }

    /// Every key of the owned partitions the policy may evict (or that has expired).
    async fn every_candidate(
        &self,
        parts: &[u16],
        policy: &dyn Policy,
        abs: u64,
    ) -> Result<Vec<Candidate>, DhtError> {
        let mut out = Vec::new();
        let st_len = (self.buckets * layout::BUCKET) as usize;
        for &slot in parts {
            let Some(dir) = self.load_dir(slot).await? else {
                continue;
            };
            let mut subtables = dir.subtables.clone();
            subtables.dedup();
            for st in subtables {
                let mut bytes = vec![0u8; st_len];
                self.pool.read(st, &mut bytes).await?;
                for (index, b) in bytes.chunks_exact(layout::BUCKET as usize).enumerate() {
                    let bucket = st.offset_by(index as u64 * layout::BUCKET);
                    let ext = self.ext_base(st, index as u64, le64(b, 0));
                    out.extend(
                        bucket_candidates(slot, bucket, b, ext)
                            .into_iter()
                            .filter(|c| {
                                self.is_expired(c.3.meta, abs) || policy.eligible(c.3.meta)
                            }),
                    );
                }
            }
        }
        Ok(out)
    }
}

/// An eviction candidate: its partition, its bucket's address and header, and the
/// slot as found.
pub(super) type Candidate = (u16, GlobalAddr, u64, Found);

/// The keys of one bucket (`bytes`, read at `bucket`; `ext`: its first access-metadata
/// entry) as eviction candidates.
fn bucket_candidates(
    slot: u16,
    bucket: GlobalAddr,
    bytes: &[u8],
    ext: Option<GlobalAddr>,
) -> Vec<Candidate> {
    let header = le64(bytes, 0);
    (0..SLOTS_PER_BUCKET)
        .filter_map(|i| {
            let at = (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize;
            let word = SlotWord(le64(bytes, at));
            if word.is_empty() {
                return None;
            }
            Some((
                slot,
                bucket,
                header,
                Found {
                    bucket: 0,
                    addr: bucket.offset_by(at as u64),
                    word,
                    meta: SlotMeta(le64(bytes, at + 8)),
                    value: None,
                    kind: dmc_umo::ValueKind::String,
                    ext: ext.map(|e| e.offset_by(i as u64 * layout::EXT_ENTRY)),
                },
            ))
        })
        .collect()
}
