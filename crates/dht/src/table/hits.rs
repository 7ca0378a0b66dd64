//! Hit recording: each access (with one copy, each that changes something) becomes a
//! pending metadata update (LRU clock, LFU count as the policy scores it), combined per
//! key and sent per batch: the LFU count as an
//! FAA, the clock as a write of its two bytes (the last access wins), each kind in one
//! post per node. An FAA of the clock's change as the reader saw it would add up
//! wrong whenever the clock changed after that read (another client's hit, an
//! overwrite), leaving it ahead of time, where it wraps to look the oldest of all.
//!
//! One batch is sent at a time per client (`send_turn.rs`), so each copy takes a
//! key's updates in the order they were sent.
//!
//! Called by the read paths, and by the engine for hits served from its own cache
//! (`record_hit`). Metadata is advisory: a failed update is dropped, and a slot
//! reference older than half the reuse grace period is never written through.

use std::sync::atomic::Ordering;

use dmc_umo::GlobalAddr;

use super::{Dht, Entry, Found, SlotRef};
use crate::layout::{self, SlotMeta};
use crate::policy::{Now, Policy, RedisPolicy};
use crate::rng;

/// One access not yet reported to the pool: the metadata word's address, the metadata
/// as the reader saw it, and what the access adds.
pub(super) struct PendingHit {
    addr: GlobalAddr,
    seen: SlotMeta,
    /// When the slot was read: updates older than half the grace period are dropped.
    at: std::time::Instant,
    lfu_add: u8,
    access: u16,
}

impl Dht {
    /// [`hit`](Self::hit) without futures: the access is recorded, and a full batch
    /// of combined metadata updates is sent with inline FAAs (unless another batch is
    /// being sent: then it waits for the next).
    pub(super) fn hit_now(&self, f: Found, now: &Now) -> Entry {
        self.counters.hits.fetch_add(1, Ordering::Relaxed);
        let at = std::time::Instant::now();
        if let Some(full) = self.record_touch(f.addr.offset_by(8), f.meta, at, now) {
            self.send_hits_now(full);
        }
        // Applied by the next flush that may wait (this path must not).
        self.note_access(f.ext, f.word.fp(), at);
        self.entry(f, now, at)
    }

    /// [`hit_now`](Self::hit_now) for a batch of keys read together: one clock read,
    /// one counter update and one lock for all of them.
    pub(super) fn hits_now<'a>(
        &'a self,
        found: Vec<(usize, Found)>,
        now: &'a Now,
    ) -> impl Iterator<Item = (usize, Entry)> + 'a {
        self.counters
            .hits
            .fetch_add(found.len() as u64, Ordering::Relaxed);
        let at = std::time::Instant::now();
        let policy = self.policy();
        let full = {
            let mut hits = self.hits.lock();
            for (_, f) in &found {
                self.note_access(f.ext, f.word.fp(), at);
                hits.extend(Self::pending_hit(
                    policy,
                    f.addr.offset_by(8),
                    f.meta,
                    at,
                    now,
                    self.single_copy(),
                ));
            }
            self.take_full(&mut hits)
        };
        if let Some(full) = full {
            self.send_hits_now(full);
        }
        found
            .into_iter()
            .map(move |(i, f)| (i, self.entry(f, now, at)))
    }

    /// Sends combined metadata updates with inline verbs, then (in the same turn) the
    /// batches that filled meanwhile.
    fn send_hits_now(&self, full: FullBatch<'_>) {
        let FullBatch { turn, mut batch } = full;
        for _ in 0..DRAIN_ROUNDS {
            for u in combine_hits(batch, self.ref_lifetime()) {
                // Metadata is advisory: a failed update only ages the key a little.
                if u.lfu_add != 0 {
                    let _ = self.pool.faa_field_now(u.meta, u.lfu_add);
                }
                let _ = self
                    .pool
                    .write_now(u.meta.offset_by(ACCESS_BYTE), &u.access);
            }
            match self.next_full() {
                Some(next) => batch = next,
                None => break,
            }
        }
        drop(turn);
    }

    pub(super) async fn hit(&self, f: Found, now: &Now) -> Entry {
        self.counters.hits.fetch_add(1, Ordering::Relaxed);
        self.touch_meta(f.addr.offset_by(8), f.meta, now).await;
        let at = std::time::Instant::now();
        if self.note_access(f.ext, f.word.fp(), at) {
            self.flush_access_if_free().await;
        }
        self.entry(f, now, at)
    }

    /// Reports a hit served outside the table (the agent's local cache) to the key's
    /// metadata, combined with other hits into one FAA per key per batch. Returns
    /// `false` when the reference is too old to use: the caller should refresh it with
    /// a [`get`](Self::get).
    pub async fn record_hit(&self, slot: SlotRef) -> bool {
        self.counters.hits.fetch_add(1, Ordering::Relaxed);
        if slot.seen.elapsed() >= self.ref_lifetime() {
            return false;
        }
        let (_, now) = self.now();
        if let Some(full) = self.record_touch(slot.meta_addr, slot.meta, slot.seen, &now) {
            self.send_hits(full).await;
        }
        if self.note_access(slot.ext, slot.fp, slot.seen) {
            self.flush_access_if_free().await;
        }
        true
    }

    /// How long a slot reference stays safe to write through: half the grace period
    /// before freed blocks are reused.
    fn ref_lifetime(&self) -> std::time::Duration {
        self.pool.config().grace / 2
    }

    /// Records an access to a key's metadata: combined locally, sent as one FAA per key
    /// per batch. The engine calls this for hits served from its own cache too.
    async fn touch_meta(&self, meta_addr: GlobalAddr, meta: SlotMeta, now: &Now) {
        if let Some(full) = self.record_touch(meta_addr, meta, std::time::Instant::now(), now) {
            self.send_hits(full).await;
        }
    }

    /// Records one access; returns the pending batch when it is full.
    fn record_touch(
        &self,
        meta_addr: GlobalAddr,
        meta: SlotMeta,
        at: std::time::Instant,
        now: &Now,
    ) -> Option<FullBatch<'_>> {
        let hit = Self::pending_hit(self.policy(), meta_addr, meta, at, now, self.single_copy())?;
        let mut hits = self.hits.lock();
        hits.push(hit);
        self.take_full(&mut hits)
    }

    /// The pending hits with the turn to send them, if a batch is full and none is
    /// being sent. Both are taken under the `hits` lock, so batches are sent in the
    /// order they were recorded. While one is being sent the hits wait, up to
    /// [`HIT_BACKLOG`] batches; past that the oldest batch's worth is dropped (a stalled
    /// node would grow them without end; the metadata is advisory, the memory is not).
    fn take_full(&self, hits: &mut Vec<PendingHit>) -> Option<FullBatch<'_>> {
        let batch = self.hit_batch.max(1);
        if hits.len() < batch {
            return None;
        }
        let Some(turn) = self.hits_sending.try_take() else {
            if hits.len() >= HIT_BACKLOG * batch {
                hits.drain(..batch);
            }
            return None;
        };
        Some(FullBatch {
            turn,
            batch: std::mem::take(hits),
        })
    }

    /// The pending hits, if a full batch waits: for the holder of the sending turn.
    fn next_full(&self) -> Option<Vec<PendingHit>> {
        let mut hits = self.hits.lock();
        (hits.len() >= self.hit_batch.max(1)).then(|| std::mem::take(&mut *hits))
    }

    /// Whether the pool keeps one copy of everything (`r = 1`).
    fn single_copy(&self) -> bool {
        self.pool.config().replicas <= 1
    }

    /// One access as the policy scores it, waiting to be combined and sent. With one
    /// copy (`single_copy`), `None` when it changes nothing: the counter stays and the
    /// key's clock already reads this second (clocks only move forward, so the slot
    /// still does); most hits on a key read more than once a second end there, with no
    /// lock and no verb. With backups every hit is sent: the reader saw the primary
    /// only, and a backup whose last clock write was dropped (a frozen region during a
    /// failover) is brought level by the next hit's write. With the skip on every pool,
    /// `manager_restart.rs an_agent_killed_with_the_manager_is_failed_over_after_the_restart`
    /// once waited in vain for identical copies (a backup's clock byte behind).
    fn pending_hit(
        policy: RedisPolicy,
        meta_addr: GlobalAddr,
        meta: SlotMeta,
        at: std::time::Instant,
        now: &Now,
        single_copy: bool,
    ) -> Option<PendingHit> {
        let t = policy.update(meta, now, rng::next_f64());
        let changes = t.lfu_add != 0 || t.access != meta.access();
        (changes || !single_copy).then_some(PendingHit {
            addr: meta_addr,
            seen: meta,
            at,
            lfu_add: t.lfu_add,
            access: t.access,
        })
    }

    /// Sends the combined metadata updates now (after a batch being sent, if any).
    pub async fn flush_hits(&self) {
        let turn = self.hits_sending.take().await;
        let batch = std::mem::take(&mut *self.hits.lock());
        self.send_hits_in_turn(batch).await;
        drop(turn);
        self.flush_access().await;
    }

    /// Sends a full batch, then (in the same turn) the batches that filled meanwhile.
    async fn send_hits(&self, full: FullBatch<'_>) {
        let FullBatch { turn, mut batch } = full;
        for _ in 0..DRAIN_ROUNDS {
            self.send_hits_in_turn(batch).await;
            match self.next_full() {
                Some(next) => batch = next,
                None => break,
            }
        }
        drop(turn);
    }

    /// Sends combined metadata updates, by the holder of the sending turn: one post of
    /// FAAs per primary node (and one of their LFU bytes per backup node), then one of
    /// clock writes per node, for the whole batch.
    async fn send_hits_in_turn(&self, batch: Vec<PendingHit>) {
        let updates = combine_hits(batch, self.ref_lifetime());
        if updates.is_empty() {
            return;
        }
        let adds: Vec<(GlobalAddr, u64)> = updates
            .iter()
            .filter(|u| u.lfu_add != 0)
            .map(|u| (u.meta, u.lfu_add))
            .collect();
        let clocks: Vec<(GlobalAddr, &[u8])> = updates
            .iter()
            .map(|u| (u.meta.offset_by(ACCESS_BYTE), &u.access[..]))
            .collect();
        // Metadata is advisory: a failed update only ages the keys a little.
        if !adds.is_empty()
            && let Err(e) = self.pool.faa_fields_many(&adds).await
        {
            tracing::debug!(error = %e, "hit counts were lost");
        }
        if let Err(e) = self.pool.write_advisory(&clocks).await {
            tracing::debug!(error = %e, "hit clocks were lost");
        }
    }
}

/// A full batch of hits and the turn to send it.
struct FullBatch<'a> {
    turn: tokio::sync::SemaphorePermit<'a>,
    batch: Vec<PendingHit>,
}

/// Batches of hits a client keeps waiting while another batch is being sent.
const HIT_BACKLOG: usize = 16;

/// Batches a sender sends in one turn at most: the one it filled, then those that
/// filled meanwhile (the next hit takes the turn for the rest).
const DRAIN_ROUNDS: usize = 4;

/// The byte of a slot's metadata word where its access clock starts (little-endian).
const ACCESS_BYTE: u64 = (layout::ACCESS_SHIFT / 8) as u64;
const _: () = assert!(layout::ACCESS_SHIFT.is_multiple_of(8));

/// One key's combined accesses: its metadata word, what they add to its LFU counter
/// (shifted into place) and its new clock value (little-endian, [`ACCESS_BYTE`] on).
#[derive(Debug, PartialEq, Eq)]
struct MetaUpdate {
    meta: GlobalAddr,
    lfu_add: u64,
    access: [u8; 2],
}

/// Combines the accesses of each key (in order) into one update per metadata word.
/// Accesses whose slot reference is older than `lifetime` are dropped (see [`SlotRef`]).
fn combine_hits(mut batch: Vec<PendingHit>, lifetime: std::time::Duration) -> Vec<MetaUpdate> {
    let now = std::time::Instant::now();
    batch.retain(|h| now.saturating_duration_since(h.at) < lifetime);
    batch.sort_by_key(|h| h.addr);
    let mut out = Vec::new();
    let mut i = 0;
    while i < batch.len() {
        let first = &batch[i];
        let mut j = i;
        let mut lfu = 0u32;
        while j < batch.len() && batch[j].addr == first.addr {
            lfu += batch[j].lfu_add as u32;
            j += 1;
        }
        let last_access = batch[j - 1].access;
        // Never carry the counter past 255 (as far as this client knows).
        let lfu = lfu.min(u8::MAX.saturating_sub(first.seen.lfu()) as u32) as u64;
        out.push(MetaUpdate {
            meta: first.addr,
            lfu_add: lfu << layout::LFU_SHIFT,
            access: last_access.to_le_bytes(),
        });
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(addr: GlobalAddr, seen: SlotMeta, lfu_add: u8, access: u16) -> PendingHit {
        PendingHit {
            addr,
            seen,
            at: std::time::Instant::now(),
            lfu_add,
            access,
        }
    }

    #[test]
    fn a_hit_that_changes_nothing_is_not_recorded() {
        let at = std::time::Instant::now();
        let addr = GlobalAddr::new(1, 64);
        let now = Now {
            pool_ms: 500_000,
            access: 500,
        };
        for policy in [RedisPolicy::AllKeysLru, RedisPolicy::AllKeysLfu] {
            // A saturated counter never grows: only the clock could change.
            let current = SlotMeta::new(0, 500, 255);
            assert!(Dht::pending_hit(policy, addr, current, at, &now, true).is_none());
            // With backups it is sent: a backup's clock may lag the primary's.
            let h = Dht::pending_hit(policy, addr, current, at, &now, false).expect("sent");
            assert_eq!((h.access, h.lfu_add), (500, 0));
            let behind = SlotMeta::new(0, 499, 255);
            let h =
                Dht::pending_hit(policy, addr, behind, at, &now, true).expect("a clock to move");
            assert_eq!((h.access, h.lfu_add), (500, 0));
            // A new key's counter always grows on its first hit, clock current or not.
            let new = SlotMeta::new(0, 500, crate::policy::LFU_INIT);
            let h = Dht::pending_hit(policy, addr, new, at, &now, true).expect("a count to add");
            assert_eq!(h.lfu_add, 1);
        }
    }

    #[test]
    fn a_key_s_hits_combine_into_one_count_and_its_newest_clock() {
        let a = GlobalAddr::new(1, 64);
        let b = GlobalAddr::new(1, 128);
        let seen = SlotMeta::new(0, 100, 250);
        let batch = vec![
            hit(a, seen, 1, 101),
            hit(b, SlotMeta::new(0, 7, 5), 0, 9),
            hit(a, seen, 1, 105),
            hit(a, seen, 1, 103),
            // Past the stored counter's room: capped, never carried into the clock.
            hit(a, seen, 1, 104),
            hit(a, seen, 1, 104),
            hit(a, seen, 1, 104),
        ];
        let got = combine_hits(batch, std::time::Duration::from_secs(60));
        assert_eq!(
            got,
            vec![
                MetaUpdate {
                    meta: a,
                    lfu_add: 5 << layout::LFU_SHIFT,
                    // The last recorded access, whatever the seen clock was.
                    access: 104u16.to_le_bytes(),
                },
                MetaUpdate {
                    meta: b,
                    lfu_add: 0,
                    access: 9u16.to_le_bytes(),
                },
            ]
        );
        // The clock's two bytes are where the word keeps it.
        let word = SlotMeta::new(0, 0x1234, 0).0.to_le_bytes();
        assert_eq!(
            &word[ACCESS_BYTE as usize..ACCESS_BYTE as usize + 2],
            &0x1234u16.to_le_bytes()
        );
        assert!(combine_hits(vec![hit(a, seen, 1, 1)], std::time::Duration::ZERO).is_empty());
    }
}
