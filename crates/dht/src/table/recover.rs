//! Resolving single-key commits that stopped half-way: slot words left locked by a
//! writer that is gone (a previous owner that died or was cut off mid-write, or this
//! client's own commit that lost a memory node), rolled forward or unlocked with
//! [`dmc_umo::Pool::roll_forward_slot`] so that the key is writable again and its
//! copies agree; and slot metadata words a writer added to at the primary but did not
//! copy to the backups (it stopped in between), set to the primary's value.
//!
//! Only the owner of a hash slot resolves its words, and only those no write of its
//! own holds: when it gains the slot ([`Dht::recover_locked`], before its first
//! write, which also repairs primaries a two-phase commit left behind its backups) and,
//! for its own failed commits, from the maintenance tick ([`Dht::recover_in_doubt`]).
//! A word locked on a backup belongs to a two-phase commit still prepared there: left
//! to the memory nodes, which commit or abort it.

use std::sync::atomic::Ordering;

use dmc_umo::{GlobalAddr, SlotRecovery};
use futures::StreamExt;

use super::{Dht, DhtError};
use crate::layout::{self, SLOTS_PER_BUCKET, SlotWord, le64};

/// Hash slots recovered at once when a shard is taken over.
const RECOVERY_PARALLEL: usize = 64;

impl Dht {
    /// Makes the copies of every slot of hash slots `range` agree again where a commit
    /// stopped half-way: primaries left locked by a single-key commit, and primaries
    /// whose slot word differs from a backup's (a two-phase commit that reached the
    /// backups only). The caller owns `range` and has no write to it in flight: call it
    /// on gaining the slots, after their previous owner released them (or its lease
    /// lapsed), before writing them. Returns how many slots it repaired.
    pub async fn recover_locked(&self, range: std::ops::Range<u16>) -> Result<usize, DhtError> {
        // Hash slots are independent: many at once, so a takeover over `tcp` costs a
        // few round trips per batch, not two per slot (thousands of slots per shard).
        let mut slots = futures::stream::iter(range)
            .map(|slot| self.recover_slot(slot))
            .buffer_unordered(RECOVERY_PARALLEL);
        let mut resolved = 0;
        while let Some(done) = slots.next().await {
            resolved += done?;
        }
        if resolved > 0 {
            tracing::info!(resolved, "repaired slots a stopped commit left half-way");
        }
        Ok(resolved)
    }

    /// [`recover_locked`](Self::recover_locked) of one hash slot: every copy of each
    /// of its subtables read at once, then the unsettled words repaired.
    async fn recover_slot(&self, slot: u16) -> Result<usize, DhtError> {
        let len = (self.buckets * layout::BUCKET) as usize;
        let Some(dir) = self.load_dir(slot).await? else {
            return Ok(0);
        };
        let mut resolved = 0;
        let mut done: Vec<GlobalAddr> = Vec::new();
        for &subtable in &dir.subtables {
            if done.contains(&subtable) {
                continue; // several directory entries share a subtable
            }
            done.push(subtable);
            let copies = self.pool.copy_count(subtable.region()).await?;
            let reads = (0..copies).map(|copy| async move {
                let mut table = vec![0u8; len];
                self.pool
                    .read_copy(subtable, copy, &mut table)
                    .await
                    .map(|()| table)
            });
            let tables = futures::future::try_join_all(reads).await?;
            for at in Self::unsettled_words(&tables) {
                if self.resolve(subtable.offset_by(at as u64)).await? {
                    resolved += 1;
                }
            }
            // A metadata word a writer added to at the primary but did not copy to a
            // backup (it stopped in between) is set level (`meta_repair`).
            let diverged = Self::diverged_meta(&tables);
            #[cfg(feature = "failpoints")]
            if !diverged.is_empty() {
                // A hit landing between the reads above and the repair, for the test.
                fail::fail_point!("dht-meta-repair-gap");
            }
            for (at, copy) in diverged {
                if self
                    .repair_meta(subtable.offset_by(at as u64), copy)
                    .await?
                {
                    self.counters.meta_repaired.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(resolved)
    }

    /// Offsets of the slot words, in a subtable's copies (the primary's first), that
    /// are locked on the primary or differ between copies.
    fn unsettled_words(tables: &[Vec<u8>]) -> Vec<usize> {
        let Some((primary, backups)) = tables.split_first() else {
            return Vec::new();
        };
        let buckets = primary.len() / layout::BUCKET as usize;
        (0..buckets)
            .flat_map(|b| {
                (0..SLOTS_PER_BUCKET).map(move |i| {
                    b * layout::BUCKET as usize
                        + layout::BUCKET_HEADER as usize
                        + i * layout::SLOT as usize
                })
            })
            .filter(|&at| {
                let word = le64(primary, at);
                SlotWord(word).is_locked() || backups.iter().any(|t| le64(t, at) != word)
            })
            .collect()
    }

    /// Repairs one slot (see [`dmc_umo::Pool::roll_forward_slot`]); whether it changed
    /// anything.
    async fn resolve(&self, addr: GlobalAddr) -> Result<bool, DhtError> {
        let done = self.pool.roll_forward_slot(addr).await?;
        let repaired = matches!(
            done,
            SlotRecovery::Unlocked { .. } | SlotRecovery::RolledForward { .. }
        );
        if repaired {
            self.counters.recovered.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                addr = addr.bits(),
                ?done,
                "repaired a half-done commit's slot"
            );
        }
        Ok(repaired)
    }

    /// Remembers a slot word this client's commit may have left locked (it failed with
    /// a node not answering), for [`recover_in_doubt`](Self::recover_in_doubt).
    pub(super) fn in_doubt(&self, slot: u16, addr: GlobalAddr) {
        self.in_doubt.lock().push((slot, addr));
    }

    /// Resolves the slot words this client's own failed commits left locked, for the
    /// hash slots it still owns (a slot given away is resolved by its next owner);
    /// those whose nodes still do not answer are kept for the next call.
    pub async fn recover_in_doubt(&self) {
        let pending = std::mem::take(&mut *self.in_doubt.lock());
        let mut keep = Vec::new();
        for (slot, addr) in pending {
            if self.owner.lease(slot).is_none() {
                continue;
            }
            // No rebuild meanwhile: the word must still be the key's slot. This
            // client's other writes cannot race the repair: they fail on the lock.
            let _no_rebuild = self.no_rebuild(slot).await;
            if let Err(e) = self.resolve(addr).await {
                tracing::warn!(slot, error = %e, "resolving a failed commit's slot failed; retrying");
                keep.push((slot, addr));
            }
        }
        self.in_doubt.lock().extend(keep);
        // Transactions of this client cut off mid-commit (a node broke the
        // connection and keeps them prepared): settled across the nodes.
        let owned = self.owner.owned();
        self.pool
            .settle_unsettled(|shard| {
                owned
                    .iter()
                    .any(|&s| self.owner.lease(s).is_some_and(|l| l.shard == shard))
            })
            .await;
    }
}
