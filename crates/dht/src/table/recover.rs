//! Resolving single-key commits that stopped half-way: slot words left locked by a
//! writer that is gone (a previous owner that died or was cut off mid-write, or this
//! client's own commit that lost a memory node), rolled forward or unlocked with
//! [`dmc_umo::Pool::roll_forward_slot`] so that the key is writable again and its
//! copies agree.
//!
//! Only the owner of a hash slot resolves its words, and only those no write of its
//! own holds: when it gains the slot ([`Dht::recover_locked`], before its first
//! write) and, for its own failed commits, from the maintenance tick
//! ([`Dht::recover_in_doubt`]). A word that a two-phase commit holds is locked on every
//! copy; a one-sided commit locks only the primary, so words locked on a backup too
//! are left to the memory nodes' transaction recovery.

use std::sync::atomic::Ordering;

use dmc_umo::{GlobalAddr, SlotRecovery, WORD_LOCK};

use super::{Dht, DhtError};
use crate::layout::{self, SLOTS_PER_BUCKET, SlotWord, le64};

impl Dht {
    /// Resolves every slot word of hash slots `range` left locked by a single-key
    /// commit that stopped. The caller owns `range` and has no write to it in flight:
    /// call it on gaining the slots, after their previous owner released them (or its
    /// lease lapsed), before writing them. Returns how many slots it resolved.
    pub async fn recover_locked(&self, range: std::ops::Range<u16>) -> Result<usize, DhtError> {
        let mut resolved = 0;
        let mut table = vec![0u8; (self.buckets * layout::BUCKET) as usize];
        for slot in range {
            let Some(dir) = self.load_dir(slot).await? else {
                continue;
            };
            let mut done: Vec<GlobalAddr> = Vec::new();
            for &subtable in &dir.subtables {
                if done.contains(&subtable) {
                    continue; // several directory entries share a subtable
                }
                done.push(subtable);
                self.pool.read(subtable, &mut table).await?;
                for at in Self::locked_words(&table) {
                    if self.resolve(subtable.offset_by(at as u64)).await? {
                        resolved += 1;
                    }
                }
            }
        }
        if resolved > 0 {
            tracing::info!(resolved, "rolled forward single-key commits left half-way");
        }
        Ok(resolved)
    }

    /// Offsets of the slot words with the lock bit in a subtable's bytes.
    fn locked_words(table: &[u8]) -> impl Iterator<Item = usize> + '_ {
        let buckets = table.len() / layout::BUCKET as usize;
        (0..buckets).flat_map(move |b| {
            (0..SLOTS_PER_BUCKET)
                .map(move |i| {
                    b * layout::BUCKET as usize
                        + layout::BUCKET_HEADER as usize
                        + i * layout::SLOT as usize
                })
                .filter(|&at| SlotWord(le64(table, at)).is_locked())
        })
    }

    /// Resolves one locked slot word unless a two-phase commit holds it (its backups
    /// are locked too). Whether it did.
    async fn resolve(&self, addr: GlobalAddr) -> Result<bool, DhtError> {
        let copies = self.pool.copy_count(addr.region()).await?;
        for copy in 1..copies {
            let mut word = [0u8; 8];
            self.pool.read_copy(addr, copy, &mut word).await?;
            if u64::from_le_bytes(word) & WORD_LOCK != 0 {
                return Ok(false);
            }
        }
        let done = self.pool.roll_forward_slot(addr).await?;
        if done != SlotRecovery::NotLocked {
            self.counters.recovered.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                addr = addr.bits(),
                ?done,
                "resolved a half-done slot commit"
            );
        }
        Ok(done != SlotRecovery::NotLocked)
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
    }
}
