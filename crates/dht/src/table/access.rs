//! Extended access metadata: Ditto's metadata header (seed `000_…`, thesis ch. 3
//! §3.3.2), for policies that rank keys by more than the slot's own metadata word
//! (`allkeys-gdsf`, `volatile-lirs`, … every [`Algorithm::EXTENDED`] one).
//!
//! Such a policy's subtables carry an access-metadata area after their buckets (the
//! EXT header flag; `layout.rs` draws it): per slot, the key's insert time, its access
//! count, its last access and the algorithm's own word (its size is its slot word's). The owner writes a
//! key's entry when it inserts the key. Every access (a hit on any agent, an
//! overwrite) is queued here with its time and combined per key; a flush reads the
//! entries, applies the algorithm's `update` for each access in order, and writes them
//! back. Eviction reads the sampled candidates' entries and ranks them by the
//! algorithm's `priority`. Like the slot's own metadata, entries are advisory: a lost
//! update only ranks a key a little wrong, and a key without one (in a subtable made
//! before the policy was chosen) is ranked from its slot's metadata.
//!
//! Subtables get the area when they are made (a new partition, a split, a move) while
//! such a policy is in force, and keep it; the table's other policies keep the entries
//! current but do not read them.

use std::sync::atomic::Ordering;

use dmc_umo::{GlobalAddr, ObjectRef};

use super::{Dht, Found};
use crate::algorithms::{Access, Algorithm, Rules};
use crate::layout::{self, ExtEntry, SlotMeta};
use crate::policy::{Now, Policy, RedisPolicy};
use crate::rng;

/// One access not yet applied to its key's entry.
pub(super) struct PendingAccess {
    entry: GlobalAddr,
    /// The key's fingerprint: the entry must be its.
    fp: u8,
    /// When it happened (ms since the pool was formatted).
    at_ms: u64,
    /// When the slot was read: accesses older than half the grace period are dropped,
    /// as the slot's own metadata updates are.
    seen: std::time::Instant,
}

/// Queued accesses past which new ones are dropped until a flush (advisory data
/// must not grow without bound when only the inline path runs).
const MAX_PENDING: usize = 1 << 16;

/// The size an access-metadata entry records for an object: its block, or for a
/// chained object the largest block (it is larger than that).
pub(super) fn object_size(obj: ObjectRef, max_block: u32) -> u64 {
    if obj.chained {
        max_block as u64
    } else {
        obj.block.size() as u64
    }
}

/// What an algorithm sees of a key of `size` bytes with no access-metadata entry: its
/// slot's clock (seconds) as both its insert and last access, and its LFU counter as
/// its count.
pub(crate) fn inline_access(size: u64, meta: SlotMeta, now: &Now) -> Access {
    let last_ms = now
        .pool_ms
        .saturating_sub(now.idle_secs(meta).saturating_mul(1000));
    Access {
        size,
        insert_ms: last_ms,
        last_ms,
        freq: meta.lfu() as u64,
        word: 0,
    }
}

fn to_access(e: &ExtEntry, size: u64) -> Access {
    Access {
        size,
        insert_ms: e.insert - 1,
        last_ms: e.last_ms,
        freq: e.freq,
        word: e.word,
    }
}

fn to_entry(a: &Access, fp: u8) -> ExtEntry {
    ExtEntry {
        insert: a.insert_ms + 1,
        fp,
        freq: a.freq,
        last_ms: a.last_ms,
        word: a.word,
    }
}

impl Dht {
    /// Whether new subtables should carry an access-metadata area: the policy ranks by
    /// it, and a subtable with the area still fits the largest block.
    pub(super) fn wants_access_area(&self) -> bool {
        extended(self.policy()).is_some()
            && layout::subtable_len(self.buckets, true) <= self.pool.max_block() as u64
    }

    /// The first access-metadata entry of bucket `bucket` of the subtable at `st`, if
    /// its header `header` says the subtable has that area.
    pub(super) fn ext_base(&self, st: GlobalAddr, bucket: u64, header: u64) -> Option<GlobalAddr> {
        layout::header_ext(header).then(|| layout::ext_entry(st, self.buckets, bucket, 0))
    }

    /// The algorithm whose `update` entries follow: the policy's, else LRU's (which
    /// keeps the count and the times, the fields every algorithm shares).
    fn updating_algorithm(&self) -> Algorithm {
        extended(self.policy()).unwrap_or(Algorithm::Lru)
    }

    /// This client's inflation value `L` (GDS, GDSF, LFUDA): its last victim's priority.
    fn inflation(&self) -> f64 {
        f64::from_bits(self.inflation.load(Ordering::Relaxed))
    }

    /// After committed writes, each of a key found as `found` (`None` or expired: a new
    /// key, in the slot whose entry is `new_entry`), now holding `obj` under
    /// fingerprint `fp`: new keys' entries are written (one batch), overwrites are
    /// accesses. Called right after the commit.
    pub(super) async fn note_writes(
        &self,
        writes: &[(Option<&Found>, Option<GlobalAddr>, ObjectRef, u8)],
    ) {
        // Only keys with an access-metadata entry (subtables made under one of Ditto's
        // policies) have anything to record: the plain SET path reads no clock here.
        if writes
            .iter()
            .all(|(found, entry, _, _)| entry.is_none() && found.is_none_or(|f| f.ext.is_none()))
        {
            return;
        }
        let committed = std::time::Instant::now();
        let (abs, now) = self.now();
        let algorithm = self.updating_algorithm();
        let mut due = false;
        let mut entries: Vec<(GlobalAddr, [u8; layout::EXT_ENTRY as usize])> = Vec::new();
        for (found, new_entry, obj, fp) in writes {
            match found {
                Some(f) if f.word.object().is_some() && !self.is_expired(f.meta, abs) => {
                    due |= self.note_access(f.ext, *fp, committed);
                }
                _ => {
                    if let Some(entry) = new_entry {
                        let size = object_size(*obj, self.pool.max_block());
                        let a = algorithm.inserted(size, now.pool_ms, self.inflation());
                        entries.push((*entry, to_entry(&a, *fp).encode()));
                    }
                }
            }
        }
        // Blind writes into the index: never once the slot could have been reused.
        if !entries.is_empty() && committed.elapsed() < self.pool.config().grace / 2 {
            let writes: Vec<(GlobalAddr, &[u8])> =
                entries.iter().map(|(e, b)| (*e, &b[..])).collect();
            if let Err(e) = self.pool.write_advisory(&writes).await {
                tracing::debug!(error = %e, "new keys' access metadata was not written");
            }
        }
        if due {
            self.flush_access_if_free().await;
        }
    }

    /// Queues an access to the key (fingerprint `fp`) whose entry is `entry` (if any);
    /// `true` when the queue is due for a flush.
    pub(super) fn note_access(
        &self,
        entry: Option<GlobalAddr>,
        fp: u8,
        seen: std::time::Instant,
    ) -> bool {
        let Some(entry) = entry else { return false };
        let (_, now) = self.now();
        let mut pending = self.accesses.lock();
        if pending.len() >= MAX_PENDING {
            self.counters
                .accesses_dropped
                .fetch_add(1, Ordering::Relaxed);
            return false;
        }
        pending.push(PendingAccess {
            entry,
            fp,
            at_ms: now.pool_ms,
            seen,
        });
        pending.len() >= self.hit_batch
    }

    /// Applies the queued accesses: reads each key's entry once, runs the algorithm's
    /// `update` for each of its accesses in order, and writes the entry back. An
    /// entry of another key (its fingerprint differs: the slot was reused) is left
    /// alone, and so are accesses that aged past half the grace period meanwhile.
    pub async fn flush_access(&self) {
        let turn = self.accesses_flushing.take().await;
        self.flush_access_in_turn().await;
        drop(turn);
    }

    /// [`flush_access`](Self::flush_access) unless another flush is under way (then the
    /// accesses wait for the next): for the request paths. Two flushes at once would
    /// read and write the same entries, and reach a backup in either order.
    pub(super) async fn flush_access_if_free(&self) {
        if let Some(_turn) = self.accesses_flushing.try_take() {
            self.flush_access_in_turn().await;
        }
    }

    async fn flush_access_in_turn(&self) {
        let mut batch = std::mem::take(&mut *self.accesses.lock());
        let lifetime = self.pool.config().grace / 2;
        batch.retain(|a| a.seen.elapsed() < lifetime);
        if batch.is_empty() {
            return;
        }
        // Stable: each key's accesses stay in the order they happened.
        batch.sort_by_key(|a| a.entry);
        let mut keys: Vec<(GlobalAddr, std::ops::Range<usize>)> = Vec::new();
        for (i, a) in batch.iter().enumerate() {
            match keys.last_mut() {
                Some((e, r)) if *e == a.entry => r.end = i + 1,
                _ => keys.push((a.entry, i..i + 1)),
            }
        }
        let mut bytes = vec![[0u8; layout::EXT_ENTRY as usize]; keys.len()];
        {
            let mut reads: Vec<(GlobalAddr, &mut [u8])> = keys
                .iter()
                .zip(bytes.iter_mut())
                .map(|((e, _), b)| (*e, &mut b[..]))
                .collect();
            if let Err(e) = self.pool.read_batch(&mut reads).await {
                tracing::debug!(error = %e, "access metadata updates were lost");
                return;
            }
        }
        let algorithm = self.updating_algorithm();
        let l = self.inflation();
        let mut out: Vec<(GlobalAddr, [u8; layout::EXT_ENTRY as usize])> = Vec::new();
        for ((entry, range), b) in keys.iter().zip(&bytes) {
            let accesses = &batch[range.clone()];
            // No entry (never written, or written before a restart of the format),
            // another key's, or a reference too old to write through.
            let Some(stored) = ExtEntry::decode(b) else {
                continue;
            };
            if accesses
                .iter()
                .any(|a| a.fp != stored.fp || a.seen.elapsed() >= lifetime)
            {
                continue;
            }
            // The size plays no part in an update.
            let mut a = to_access(&stored, 0);
            for access in accesses {
                let at = access.at_ms.max(a.last_ms);
                // A client that evicts nothing of this key's shard has a lower `L`
                // than the owner's: never lower the key's.
                let l = if algorithm.inflates() {
                    l.max(f64::from_bits(a.word))
                } else {
                    l
                };
                algorithm.accessed(&mut a, at, l);
            }
            out.push((*entry, to_entry(&a, stored.fp).encode()));
        }
        let writes: Vec<(GlobalAddr, &[u8])> = out.iter().map(|(e, b)| (*e, &b[..])).collect();
        if let Err(e) = self.pool.write_advisory(&writes).await {
            tracing::debug!(error = %e, "access metadata updates were lost");
        }
    }

    /// Each candidate's rank under `policy` (lowest evicted first; an expired key
    /// before any), with its last access (ms) to break ties toward the least recently
    /// used.
    pub(super) async fn candidate_ranks(
        &self,
        policy: RedisPolicy,
        candidates: &[&Found],
        now: &Now,
        abs: u64,
    ) -> Vec<(f64, u64)> {
        let Some(algorithm) = extended(policy) else {
            return candidates
                .iter()
                .map(|f| {
                    if self.is_expired(f.meta, abs) {
                        (f64::NEG_INFINITY, 0)
                    } else {
                        (policy.priority(f.meta, now, rng::next_f64()), 0)
                    }
                })
                .collect();
        };
        let accesses = self.accesses_of(candidates, now).await;
        candidates
            .iter()
            .zip(accesses)
            .map(|(f, a)| {
                if self.is_expired(f.meta, abs) {
                    (f64::NEG_INFINITY, 0)
                } else {
                    (algorithm.priority(&a, now.pool_ms), a.last_ms)
                }
            })
            .collect()
    }

    /// The candidates' access metadata: their entries (one batched read), or what
    /// their slots say for those without one.
    async fn accesses_of(&self, candidates: &[&Found], now: &Now) -> Vec<Access> {
        let mut bytes = vec![[0u8; layout::EXT_ENTRY as usize]; candidates.len()];
        let read = {
            let mut reads: Vec<(GlobalAddr, &mut [u8])> = candidates
                .iter()
                .zip(bytes.iter_mut())
                .filter_map(|(f, b)| f.ext.map(|e| (e, &mut b[..])))
                .collect();
            self.pool.read_batch(&mut reads).await
        };
        if let Err(e) = &read {
            tracing::debug!(error = %e, "reading access metadata failed: ranking by slots");
        }
        candidates
            .iter()
            .zip(&bytes)
            .map(|(f, b)| {
                let size = f
                    .word
                    .object()
                    .map_or(0, |o| object_size(o, self.pool.max_block()));
                match (read.is_ok(), ExtEntry::decode(b)) {
                    (true, Some(e)) if f.ext.is_some() && e.fp == f.word.fp() => {
                        to_access(&e, size)
                    }
                    _ => inline_access(size, f.meta, now),
                }
            })
            .collect()
    }

    /// After evicting a key ranked `priority` under `policy`: an inflating algorithm's
    /// `L` becomes that priority.
    pub(super) fn evicted_at(&self, policy: RedisPolicy, priority: f64) {
        if extended(policy).is_some_and(|a| a.inflates()) && priority.is_finite() {
            self.inflation.store(priority.to_bits(), Ordering::Relaxed);
        }
    }
}

/// The algorithm a policy ranks by through access-metadata entries, if it does.
pub(crate) fn extended(policy: RedisPolicy) -> Option<Algorithm> {
    match policy {
        RedisPolicy::AllKeys(a) | RedisPolicy::Volatile(a) => Some(a),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmc_umo::{Block, classes};

    #[test]
    fn entries_and_accesses_convert_both_ways() {
        let a = Access {
            size: 512,
            insert_ms: 0,
            last_ms: 77,
            freq: 3,
            word: 9,
        };
        assert_eq!(
            to_access(&to_entry(&a, 3), 512),
            a,
            "an insert at ms 0 is still an entry"
        );
        assert!(ExtEntry::decode(&to_entry(&a, 3).encode()).is_some());
    }

    #[test]
    fn slots_without_entries_rank_by_their_clock_and_counter() {
        let now = Now {
            pool_ms: 100_000,
            access: 100,
        };
        let class = classes::best_fit(300, 1 << 20, false).unwrap();
        let obj = ObjectRef {
            block: Block {
                addr: GlobalAddr::new(1, 4096),
                class,
            },
            chained: false,
        };
        let a = inline_access(300, SlotMeta::new(0, 90, 7), &now);
        assert_eq!(
            (a.last_ms, a.insert_ms, a.freq, a.size),
            (90_000, 90_000, 7, 300)
        );
        assert_eq!(object_size(obj, 1 << 20), classes::size(class) as u64);
        let chained = ObjectRef {
            chained: true,
            ..obj
        };
        assert_eq!(object_size(chained, 1 << 20), 1 << 20);
    }
}
