//! Scanning: the occupied slot words of a partition, its live keys (`scan_partition`,
//! for KEYS, SCAN and FLUSHDB), and one hash slot's keys and their count (`scan_slot`,
//! `count_in_slot`, for CLUSTER GETKEYSINSLOT and COUNTKEYSINSLOT).
//!
//! Read-only. Keys present for the whole scan are all returned; keys written meanwhile
//! may or may not be.

use bytes::Bytes;

use super::{Dht, DhtError};
use crate::hash::key_slot;
use crate::layout::{self, SLOTS_PER_BUCKET, SlotMeta, SlotWord, le64};

impl Dht {
    /// The occupied slot words of a hash slot's partition: (word, meta).
    pub(super) async fn scan_words(
        &self,
        slot: u16,
    ) -> Result<Vec<(SlotWord, SlotMeta)>, DhtError> {
        let Some(dir) = self.load_dir(slot).await? else {
            return Ok(Vec::new());
        };
        let mut subtables = dir.subtables.clone();
        subtables.sort_unstable();
        subtables.dedup();
        let st_len = (self.buckets * layout::BUCKET) as usize;
        let mut out = Vec::new();
        for st in subtables {
            let mut bytes = vec![0u8; st_len];
            self.pool.read(st, &mut bytes).await?;
            for b in 0..self.buckets as usize {
                for i in 0..SLOTS_PER_BUCKET {
                    let at = b * layout::BUCKET as usize
                        + (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize;
                    let w = SlotWord(le64(&bytes, at));
                    if !w.is_empty() {
                        out.push((w, SlotMeta(le64(&bytes, at + 8))));
                    }
                }
            }
        }
        Ok(out)
    }

    /// The live keys of hash slot `slot`, as (db, key). Keys present for the whole call
    /// are all returned; keys written meanwhile may or may not be.
    pub async fn scan_slot(&self, slot: u16) -> Result<Vec<(u8, Bytes)>, DhtError> {
        let mut keys = self
            .keys_in_partition(self.partition_of(slot), false)
            .await?;
        if self.group_bits > 0 {
            keys.retain(|(_, k)| key_slot(k) == slot);
        }
        Ok(keys)
    }

    /// The live keys stored in the partition of hash slot `slot` when `slot` is its
    /// group's first slot (every slot of the group), none otherwise: visiting every
    /// slot visits every key once, as KEYS and SCAN do.
    pub async fn scan_partition(&self, slot: u16) -> Result<Vec<(u8, Bytes)>, DhtError> {
        if self.partition_of(slot) != slot {
            return Ok(Vec::new());
        }
        self.keys_in_partition(slot, false).await
    }

    /// [`scan_partition`](Self::scan_partition) with expired keys not yet reclaimed:
    /// what FLUSHALL must remove (DBSIZE counts them, as Redis's does).
    pub async fn scan_partition_with_expired(
        &self,
        slot: u16,
    ) -> Result<Vec<(u8, Bytes)>, DhtError> {
        if self.partition_of(slot) != slot {
            return Ok(Vec::new());
        }
        self.keys_in_partition(slot, true).await
    }

    /// Keys (of every db) stored in partition `part`.
    async fn keys_in_partition(
        &self,
        part: u16,
        expired: bool,
    ) -> Result<Vec<(u8, Bytes)>, DhtError> {
        let abs = self.clock.now_ms();
        let mut keys = Vec::new();
        for (w, m) in self.scan_words(part).await? {
            if !expired && self.is_expired(m, abs) {
                continue;
            }
            if let Some(obj) = w.object()
                && let Some(dmc_umo::StoredObject { db, key, .. }) = self.pool.read_any(obj).await?
            {
                keys.push((db, key));
            }
        }
        self.staged_scan(part, &mut keys);
        Ok(keys)
    }

    /// Keys (of every db) in hash slot `slot`, expired ones excluded.
    pub async fn count_in_slot(&self, slot: u16) -> Result<usize, DhtError> {
        if self.group_bits > 0 {
            // The partition holds other slots' keys too: only the keys tell.
            return Ok(self.scan_slot(slot).await?.len());
        }
        let abs = self.clock.now_ms();
        Ok(self
            .scan_words(slot)
            .await?
            .into_iter()
            .filter(|(_, m)| !self.is_expired(*m, abs))
            .count())
    }
}
