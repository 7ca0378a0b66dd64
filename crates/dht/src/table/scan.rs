//! Scanning: the occupied slot words of a hash slot's partition, its live keys
//! (`scan_slot`, for KEYS, SCAN and FLUSHDB) and their count.
//!
//! Read-only. Keys present for the whole scan are all returned; keys written meanwhile
//! may or may not be.

use bytes::Bytes;

use super::{Dht, DhtError};
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
        self.keys_in_slot(slot, false).await
    }

    /// Keys (of every db) in hash slot `slot`, expired ones not yet reclaimed
    /// included: what FLUSHALL must remove (DBSIZE counts them, as Redis's does).
    pub async fn scan_slot_with_expired(&self, slot: u16) -> Result<Vec<(u8, Bytes)>, DhtError> {
        self.keys_in_slot(slot, true).await
    }

    async fn keys_in_slot(&self, slot: u16, expired: bool) -> Result<Vec<(u8, Bytes)>, DhtError> {
        let abs = self.clock.now_ms();
        let mut keys = Vec::new();
        for (w, m) in self.scan_words(slot).await? {
            if !expired && self.is_expired(m, abs) {
                continue;
            }
            if let Some(obj) = w.object()
                && let Some(dmc_umo::StoredObject { db, key, .. }) = self.pool.read_any(obj).await?
            {
                keys.push((db, key));
            }
        }
        self.staged_scan(slot, &mut keys);
        Ok(keys)
    }

    /// Keys (of every db) in hash slot `slot`, expired ones excluded.
    pub async fn count_in_slot(&self, slot: u16) -> Result<usize, DhtError> {
        let abs = self.clock.now_ms();
        Ok(self
            .scan_words(slot)
            .await?
            .into_iter()
            .filter(|(_, m)| !self.is_expired(*m, abs))
            .count())
    }
}
