//! Levelling a slot's metadata word across a region's copies when its owner takes a
//! shard over ([`Dht::recover_locked`]): a writer that added to the word at the primary
//! and stopped before copying the sum to the backups left them different, and nothing
//! but the key's next hit would bring them together.
//!
//! The repair races readers and the previous owner: any agent's hit writes the word's
//! clock to every copy (concurrently over a network, so a backup may take it before the
//! primary), and a fenced previous owner may still finish a prepared two-phase commit,
//! backups first. So the repair never writes back what it read: it reads each copy's
//! slot word and metadata word, leaves the slot alone while its slot words are locked
//! or differ (a commit under way writes the metadata itself), and otherwise swaps both
//! copies to one merged word from what they held: the primary's expiry and LFU count
//! (counts are added at the primary), and the newer of the two access clocks (a hit
//! that has reached one copy so far reaches the other with the same clock). A blind
//! write of the primary's word as read beside the backup's undid a hit that landed
//! between the reads, on the backup and for good (a CI run's `manager_restart.rs`
//! waited 30 s for identical copies). Tests: `dht/tests/meta_recovery.rs`,
//! `dht/tests/meta_repair_race.rs`.

use dmc_umo::GlobalAddr;

use super::{Dht, DhtError};
use crate::layout::{self, SLOTS_PER_BUCKET, SlotMeta, SlotWord, le64};

/// Attempts at one slot whose words hits keep changing.
const TRIES: usize = 4;

impl Dht {
    /// Offsets of the slots (copy, slot's offset in the subtable) whose metadata word
    /// a backup holds differently from the primary (`tables`: the primary's copy first).
    pub(super) fn diverged_meta(tables: &[Vec<u8>]) -> Vec<(usize, usize)> {
        let Some((primary, backups)) = tables.split_first() else {
            return Vec::new();
        };
        let buckets = primary.len() / layout::BUCKET as usize;
        let mut out = Vec::new();
        for b in 0..buckets {
            for i in 0..SLOTS_PER_BUCKET {
                let at = b * layout::BUCKET as usize
                    + layout::BUCKET_HEADER as usize
                    + i * layout::SLOT as usize;
                let want = le64(primary, at + 8);
                for (copy, t) in backups.iter().enumerate() {
                    if t.len() >= at + 16 && le64(t, at + 8) != want {
                        out.push((at, copy + 1));
                    }
                }
            }
        }
        out
    }

    /// Levels the metadata word of the slot at `slot` between the primary and backup
    /// `copy` (see the module doc); whether it changed a copy.
    pub(super) async fn repair_meta(
        &self,
        slot: GlobalAddr,
        copy: usize,
    ) -> Result<bool, DhtError> {
        let meta = slot.offset_by(8);
        for _ in 0..TRIES {
            let (backup_word, backup) = self.read_pair(slot, copy).await?;
            let (primary_word, primary) = self.read_pair(slot, 0).await?;
            if backup_word != primary_word || SlotWord(primary_word).is_locked() {
                return Ok(false);
            }
            if backup == primary {
                return Ok(false);
            }
            let merged = merge(SlotMeta(primary), SlotMeta(backup)).0;
            if self.pool.cas_copy(meta, copy, backup, merged).await? != backup {
                continue;
            }
            if merged != primary && self.pool.cas_copy(meta, 0, primary, merged).await? != primary {
                continue;
            }
            return Ok(true);
        }
        // Hits keep changing it: each writes every copy anyway.
        Ok(false)
    }

    /// Copy `copy`'s slot word and metadata word.
    async fn read_pair(&self, slot: GlobalAddr, copy: usize) -> Result<(u64, u64), DhtError> {
        let mut buf = [0u8; 16];
        self.pool.read_copy(slot, copy, &mut buf).await?;
        Ok((le64(&buf, 0), le64(&buf, 8)))
    }
}

/// The word both copies should hold: the primary's, with the newer access clock of the
/// two (the clock wraps: newer is less than half its range ahead).
fn merge(primary: SlotMeta, backup: SlotMeta) -> SlotMeta {
    let ahead = backup.access().wrapping_sub(primary.access()) as i16 > 0;
    let access = if ahead {
        backup.access()
    } else {
        primary.access()
    };
    SlotMeta::new(primary.expire(), access, primary.lfu())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_merge_keeps_the_primarys_count_and_expiry_and_the_newer_clock() {
        let primary = SlotMeta::new(1234, 100, 7);
        assert_eq!(
            merge(primary, SlotMeta::new(99, 101, 3)),
            SlotMeta::new(1234, 101, 7)
        );
        assert_eq!(merge(primary, SlotMeta::new(99, 99, 3)), primary);
        // Across the wrap: 2 is newer than 65 535.
        let old = SlotMeta::new(0, u16::MAX, 0);
        assert_eq!(merge(old, SlotMeta::new(0, 2, 0)).access(), 2);
        assert_eq!(merge(SlotMeta::new(0, 2, 0), old).access(), 2);
    }
}
