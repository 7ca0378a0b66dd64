//! The GET paths: `get` (futures-free on inline backends, then the first bucket alone,
//! then both), `get_many` (batched bucket and object reads), `peek`, `exists`, `ttl`.
//!
//! The engine calls these per command. They never return an expired key, and write the
//! table only through recorded hits (`hits`) and the lazy reclaim of an expired key
//! whose slot this client owns.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use dmc_umo::{GlobalAddr, ObjectRef, ReadObject};

use super::probe::Probe;
use super::{Dht, DhtError, Entry, Found, Loc, MAX_RETRIES, SlotRef, Ttl};
use crate::hash;
use crate::layout::{self, SLOTS_PER_BUCKET, SlotMeta, SlotWord, le64};
use crate::policy::{self, Now};

/// Whether a slot of either candidate bucket is locked (a commit in flight; an empty
/// locked slot is a key being inserted).
fn locked_slot(probe: &Probe) -> bool {
    (0..2).any(|b| (0..SLOTS_PER_BUCKET).any(|i| probe.slot(b, i).1.is_locked()))
}

/// What a look at a key's first bucket found.
enum FirstBucket {
    Found(Found),
    /// The hash slot has no table: the key is absent.
    NoTable,
    /// Not there, or a stale directory: the full lookup decides.
    Unsure,
}

/// Objects up to this size are read by `get_many`'s batched path.
const BATCH_OBJECT: usize = 128;

impl Dht {
    /// The get path without futures, for inline backends (local, shm): both candidate
    /// buckets and the object are read with `post_now`. `None` hands the key to the
    /// general path: no cached directory, a stale one, a chained object, an expired key
    /// (which that path reclaims), or a backend that must be awaited.
    fn find_now(&self, loc: &Loc, key: &[u8], abs: u64) -> Option<Result<Option<Found>, DhtError>> {
        let st = self.cached_subtable(loc)?;
        let (a, b) = hash::buckets(loc.hash, self.buckets);
        let mut history = None;
        for (n, bucket) in [a, b].into_iter().enumerate() {
            let addr = st.offset_by(bucket * layout::BUCKET);
            let mut bytes = [0u8; layout::BUCKET as usize];
            if let Err(e) = self.pool.read_now(addr, &mut bytes)? {
                return Some(Err(e.into()));
            }
            if !layout::header_covers(le64(&bytes, 0), loc.hash, loc.slot) {
                return None;
            }
            for i in 0..SLOTS_PER_BUCKET {
                let at = (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize;
                if bytes[at + 7] != loc.fp {
                    continue;
                }
                let word = SlotWord(le64(&bytes, at));
                let meta = SlotMeta(le64(&bytes, at + 8));
                let Some(obj) = word.object() else {
                    // The key's eviction-history entry, perhaps (adaptive policy): it
                    // counts only if the key turns out to be missing.
                    if !word.is_locked() && word.unlocked() != SlotWord::EMPTY {
                        history = Some((word, meta));
                    }
                    continue;
                };
                match self.pool.read_object_now(obj, loc.db, key)? {
                    Ok(ReadObject::Value(v, kind)) => {
                        if self.is_expired(meta, abs) {
                            return None;
                        }
                        return Some(Ok(Some(Found {
                            bucket: n,
                            addr: addr.offset_by(at as u64),
                            word,
                            meta,
                            value: Some(v),
                            kind,
                            ext: self
                                .ext_base(st, bucket, le64(&bytes, 0))
                                .map(|e| e.offset_by(i as u64 * layout::EXT_ENTRY)),
                        })));
                    }
                    Ok(ReadObject::Mismatch) => continue,
                    Err(e) => return Some(Err(e.into())),
                }
            }
        }
        self.note_history_in(loc, history.into_iter());
        Some(Ok(None))
    }

    /// The live value of `key` in `db`, or `None`.
    /// `key`'s version, for WATCH: its slot word (every write installs a new one) and
    /// its expiry (EXPIRE and PERSIST change only that), 0 when absent or expired.
    pub async fn version(&self, db: u8, key: &[u8]) -> Result<u64, DhtError> {
        let loc = self.loc(db, key);
        let (_, found) = self.lookup(&loc, key, false).await?;
        let now = self.clock.now_ms();
        Ok(found
            .filter(|f| !self.is_expired(f.meta, now))
            .map_or(0, |f| f.word.0 ^ f.meta.expire().rotate_left(24)))
    }

    pub async fn get(&self, db: u8, key: &[u8]) -> Result<Option<Entry>, DhtError> {
        let loc = self.loc(db, key);
        let (abs, now) = self.now();
        if self.is_staging() {
            // A transaction's read: its own writes first; no hit recorded, no reclaim.
            let (_, found) = Box::pin(self.lookup(&loc, key, true)).await?;
            return Ok(found
                .filter(|f| !self.is_expired(f.meta, abs))
                .map(|f| self.entry(f, &now, std::time::Instant::now())));
        }
        if self.inline_reads {
            match self.find_now(&loc, key, abs) {
                Some(Ok(Some(f))) => return Ok(Some(self.hit_now(f, &now))),
                Some(Ok(None)) => {
                    self.counters.misses.fetch_add(1, Ordering::Relaxed);
                    return Ok(None);
                }
                Some(Err(e)) => return Err(e),
                None => {}
            }
        }
        if self.inline_reads {
            match self.find_in_first_bucket(&loc, key).await? {
                FirstBucket::Found(f) if !self.is_expired(f.meta, abs) => {
                    return Ok(Some(self.hit(f, &now).await));
                }
                // No table: what `lookup` would load again and find absent.
                FirstBucket::NoTable => {
                    self.counters.misses.fetch_add(1, Ordering::Relaxed);
                    return Ok(None);
                }
                FirstBucket::Found(_) | FirstBucket::Unsure => {}
            }
        }
        let (probe, found) = self.lookup(&loc, key, true).await?;
        let Some(f) = found else {
            self.counters.misses.fetch_add(1, Ordering::Relaxed);
            if let Some(p) = &probe {
                let slots = (0..2).flat_map(|b| (0..SLOTS_PER_BUCKET).map(move |i| (b, i)));
                self.note_history_in(
                    &loc,
                    slots.map(|(b, i)| {
                        let (_, w, m) = p.slot(b, i);
                        (w, m)
                    }),
                );
            }
            return Ok(None);
        };
        if self.is_expired(f.meta, abs) {
            self.counters.misses.fetch_add(1, Ordering::Relaxed);
            if let Some(p) = &probe {
                self.reclaim_expired(&loc, key, p, &f).await;
            }
            return Ok(None);
        }
        Ok(Some(self.hit(f, &now).await))
    }

    /// Gets many keys of `db` at once. On inline backends both candidate buckets of all
    /// keys are read in one batch, then all the objects, so their memory latencies
    /// overlap (the CPU's version of a doorbell batch). A key whose fingerprint neither
    /// bucket bears is absent; keys this fast path cannot settle (expired, chained, a
    /// fingerprint shared with another key, an eviction-history entry) go through
    /// [`get`](Self::get).
    pub async fn get_many(&self, db: u8, keys: &[&[u8]]) -> Result<Vec<Option<Entry>>, DhtError> {
        let mut out: Vec<Option<Entry>> = vec![None; keys.len()];
        let mut settled = vec![false; keys.len()];
        if self.inline_reads && keys.len() > 1 && !self.is_staging() {
            let (abs, now) = self.now();
            let locs: Vec<Loc> = keys
                .iter()
                .map(|k| {
                    let loc = self.loc(db, k);
                    self.prefetch_subtable(&loc);
                    loc
                })
                .collect();
            // Stage 1: both candidate buckets of every key with a cached directory (a
            // writer puts a new key in the emptier of the two, so half the keys live
            // in the second).
            // (key index, its subtable, its two bucket indexes and their addresses)
            let mut candidates: Vec<(usize, GlobalAddr, [u64; 2], [GlobalAddr; 2])> =
                Vec::with_capacity(keys.len());
            for (i, loc) in locs.iter().enumerate() {
                if let Some(st) = self.cached_subtable(loc) {
                    let (a, b) = hash::buckets(loc.hash, self.buckets);
                    let at = |n: u64| st.offset_by(n * layout::BUCKET);
                    candidates.push((i, st, [a, b], [at(a), at(b)]));
                }
            }
            let mut bytes = vec![[[0u8; layout::BUCKET as usize]; 2]; candidates.len()];
            {
                let mut reads: Vec<(GlobalAddr, &mut [u8])> = candidates
                    .iter()
                    .zip(bytes.iter_mut())
                    .flat_map(|((_, _, _, addrs), [x, y])| {
                        [(addrs[0], &mut x[..]), (addrs[1], &mut y[..])]
                    })
                    .collect();
                self.pool.read_batch(&mut reads).await?;
            }
            // Stage 2: the object of the first fingerprint match in the two buckets.
            let mut misses = 0u64;
            let mut objects: Vec<(usize, Found, ObjectRef)> = Vec::with_capacity(candidates.len());
            for ((i, st, pair, addrs), [x, y]) in candidates.iter().zip(&bytes) {
                let loc = &locs[*i];
                let probe = Probe {
                    buckets: [(addrs[0], *x), (addrs[1], *y)],
                    ext: [
                        self.ext_base(*st, pair[0], le64(x, 0)),
                        self.ext_base(*st, pair[1], le64(y, 0)),
                    ],
                };
                if !(0..2).all(|b| layout::header_covers(probe.header(b), loc.hash, loc.slot)) {
                    continue;
                }
                let hit = (0..2)
                    .flat_map(|b| (0..SLOTS_PER_BUCKET).map(move |s| (b, s)))
                    .map(|(b, s)| (b, probe.slot(b, s), probe.ext(b, s)))
                    .find(|(_, (_, w, _), _)| !w.is_empty() && w.fp() == loc.fp);
                if hit.is_none() {
                    // No slot of either bucket bears its fingerprint: absent, as `get`
                    // would find (no history entry to note, nothing to reclaim).
                    settled[*i] = true;
                    misses += 1;
                    continue;
                }
                if let Some((bucket, (slot, word, meta), ext)) = hit
                    && let Some(obj) = word.object()
                    && !obj.chained
                    && obj.block.size() as usize <= BATCH_OBJECT
                    && !self.is_expired(meta, abs)
                {
                    objects.push((
                        *i,
                        Found {
                            bucket,
                            addr: slot,
                            word,
                            meta,
                            value: None,
                            kind: dmc_umo::ValueKind::String,
                            ext,
                        },
                        obj,
                    ));
                }
            }
            if misses > 0 {
                self.counters.misses.fetch_add(misses, Ordering::Relaxed);
            }
            let mut heads = vec![[0u8; BATCH_OBJECT]; objects.len()];
            {
                let mut reads: Vec<(GlobalAddr, &mut [u8])> = objects
                    .iter()
                    .zip(heads.iter_mut())
                    .map(|((_, _, o), h)| (o.block.addr, &mut h[..o.block.size() as usize]))
                    .collect();
                self.pool.read_batch(&mut reads).await?;
            }
            let mut hits: Vec<(usize, Found)> = Vec::with_capacity(objects.len());
            for ((i, mut f, obj), head) in objects.into_iter().zip(heads) {
                let head = &head[..obj.block.size() as usize];
                if let dmc_umo::object::Head::Inline {
                    db: d,
                    kind,
                    key: k,
                    value,
                } = dmc_umo::object::parse_head(head)
                    && d == db
                    && head[k] == *keys[i]
                {
                    f.value = Some(Bytes::copy_from_slice(&head[value]));
                    f.kind = kind;
                    settled[i] = true;
                    hits.push((i, f));
                }
            }
            for (i, entry) in self.hits_now(hits, &now) {
                out[i] = Some(entry);
            }
        }
        for (i, key) in keys.iter().enumerate() {
            if !settled[i] {
                out[i] = self.get(db, key).await?;
            }
        }
        Ok(out)
    }

    /// Many keys of `db` as of one instant: no transaction's commit (which locks every
    /// word it changes before it writes any) falls between the reads. Each key's
    /// buckets are read twice; a locked slot word in them, or a word that differs
    /// between the two reads, starts it over. For MGET, where a transaction of this or
    /// another agent may commit while it reads.
    pub async fn get_many_snapshot(
        &self,
        db: u8,
        keys: &[&[u8]],
    ) -> Result<Vec<Option<Entry>>, DhtError> {
        let locs: Vec<Loc> = keys.iter().map(|k| self.loc(db, k)).collect();
        let mut slot = 0;
        for attempt in 0..MAX_RETRIES {
            let mut first: Vec<Option<Found>> = Vec::with_capacity(keys.len());
            let mut settled = true;
            for (loc, key) in locs.iter().zip(keys) {
                let (probe, found) = self.lookup_committed(loc, key, true).await?;
                if probe.as_ref().is_some_and(locked_slot) {
                    settled = false;
                    slot = loc.slot;
                    break;
                }
                first.push(found);
            }
            if settled {
                for ((loc, key), f) in locs.iter().zip(keys).zip(&first) {
                    let (probe, again) = self.lookup_committed(loc, key, false).await?;
                    if probe.as_ref().is_some_and(locked_slot)
                        || again.map(|g| g.word) != f.as_ref().map(|f| f.word)
                    {
                        settled = false;
                        slot = loc.slot;
                        break;
                    }
                }
            }
            if settled {
                let (abs, now) = self.now();
                let at = std::time::Instant::now();
                return Ok(first
                    .into_iter()
                    .map(|f| {
                        let f = f.filter(|f| !self.is_expired(f.meta, abs))?;
                        self.counters.hits.fetch_add(1, Ordering::Relaxed);
                        Some(self.entry(f, &now, at))
                    })
                    .collect());
            }
            self.backoff(attempt, true).await;
        }
        Err(DhtError::Contention(slot))
    }

    /// The entry a found key is returned as; `at` is when its slot was read.
    pub(super) fn entry(&self, f: Found, now: &Now, at: std::time::Instant) -> Entry {
        Entry {
            value: f.value.unwrap_or_default(),
            kind: f.kind,
            expire_at: self.decode_expire(f.meta.expire()),
            idle_secs: now.idle_secs(f.meta),
            lfu: policy::lfu_decayed(f.meta, now),
            slot: SlotRef {
                meta_addr: f.addr.offset_by(8),
                meta: f.meta,
                seen: at,
                ext: f.ext,
                fp: f.word.fp(),
            },
        }
    }

    /// The key if it is in its first candidate bucket (read alone); `None` sends the
    /// caller down the full two-bucket path, which also handles stale directories.
    async fn find_in_first_bucket(&self, loc: &Loc, key: &[u8]) -> Result<FirstBucket, DhtError> {
        let st = match self.cached_subtable(loc) {
            Some(st) => st,
            None => match self.load_dir(loc.slot).await? {
                Some(d) => d.subtable(loc.hash),
                None => return Ok(FirstBucket::NoTable),
            },
        };
        let (a, _) = hash::buckets(loc.hash, self.buckets);
        let addr = st.offset_by(a * layout::BUCKET);
        let mut bytes = [0u8; layout::BUCKET as usize];
        self.pool.read(addr, &mut bytes).await?;
        let ext = self.ext_base(st, a, le64(&bytes, 0));
        let probe = Probe {
            buckets: [(addr, bytes), (addr, bytes)],
            ext: [ext, ext],
        };
        if !layout::header_covers(probe.header(0), loc.hash, loc.slot) {
            return Ok(FirstBucket::Unsure);
        }
        Ok(match self.find(loc, key, &probe, true).await? {
            Some(f) => FirstBucket::Found(f),
            None => FirstBucket::Unsure,
        })
    }

    /// The key's value and metadata without recording an access (`OBJECT`, `MEMORY
    /// USAGE`, `LCS`-style inspection), with the pool bytes one copy of it occupies
    /// (its slot plus its object's blocks).
    pub async fn peek(&self, db: u8, key: &[u8]) -> Result<Option<(Entry, u64)>, DhtError> {
        let loc = self.loc(db, key);
        let (abs, now) = self.now();
        let (_, found) = self.lookup(&loc, key, true).await?;
        let Some(f) = found.filter(|f| !self.is_expired(f.meta, abs)) else {
            return Ok(None);
        };
        let object = match f.word.object() {
            Some(o) if !o.chained => u64::from(o.block.size()),
            // A chain's blocks are each full but the last: estimate from the content.
            _ => {
                let len = f.value.as_ref().map_or(0, |v| v.len()) + key.len();
                (dmc_umo::object::CHAINED_HEADER + len) as u64
            }
        };
        Ok(Some((
            self.entry(f, &now, std::time::Instant::now()),
            layout::SLOT + object,
        )))
    }

    /// Whether `key` exists (and has not expired), without fetching its value.
    pub async fn exists(&self, db: u8, key: &[u8]) -> Result<bool, DhtError> {
        Ok(self.ttl(db, key).await? != Ttl::Missing)
    }

    /// The key's time to live.
    pub async fn ttl(&self, db: u8, key: &[u8]) -> Result<Ttl, DhtError> {
        if let Some(ttl) = self.staged_ttl(db, key) {
            return Ok(ttl);
        }
        let loc = self.loc(db, key);
        let (_, found) = self.lookup(&loc, key, false).await?;
        let abs = self.clock.now_ms();
        Ok(match found {
            Some(f) if !self.is_expired(f.meta, abs) => match self.decode_expire(f.meta.expire()) {
                Some(at) => Ttl::ExpiresAt(at),
                None => Ttl::Persistent,
            },
            _ => Ttl::Missing,
        })
    }
}
