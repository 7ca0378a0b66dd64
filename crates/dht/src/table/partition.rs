//! Growth: creating a hash slot's partition, and rewriting a subtable as 2^k new ones
//! (`split`) or into a new block (`rebuild`), extendible hashing per hash slot.
//!
//! Called by writes that find no partition or no empty slot, and by `vacate_region`,
//! under the slot's lock. A rebuild validates every word of the old subtable on commit,
//! so a concurrent write makes it fail rather than lose a key.

use std::sync::atomic::Ordering;

use dmc_umo::{Block, GlobalAddr, Tx, TxOutcome, TxWrite};

use super::dir::Dir;
use super::{Dht, DhtError, Loc, corrupt};
use crate::hash::{self, key_hash};
use crate::layout::{self, SLOTS_PER_BUCKET, SlotWord, le64};
use crate::owner::Lease;

/// One entry of a subtable being rewritten: its key's hash, its slot's words, and its
/// access-metadata entry when the old subtable had one.
struct SplitEntry {
    hash: u64,
    word: u64,
    meta: u64,
    access: Option<[u8; layout::EXT_ENTRY as usize]>,
}

/// A slot's offset in its bucket.
fn slot_offset(i: usize) -> usize {
    (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize
}

impl Dht {
    /// A new subtable's bytes: empty buckets with their headers, and an empty
    /// access-metadata area when `ext`.
    fn subtable_bytes(&self, depth: u32, suffix: u64, slot: u16, ext: bool) -> Vec<u8> {
        let mut bytes = vec![0u8; layout::subtable_len(self.buckets, ext) as usize];
        let flag = if ext { layout::EXT } else { 0 };
        let h = (layout::header(depth, suffix, slot) | flag).to_le_bytes();
        for b in 0..self.buckets as usize {
            let at = b * layout::BUCKET as usize;
            bytes[at..at + 8].copy_from_slice(&h);
        }
        bytes
    }

    /// Places split entries into 2^k child subtables of depth `depth + k` (with an
    /// access-metadata area when `ext`, each entry's carried along); `None` if a child
    /// cannot hold its share.
    fn place(
        &self,
        entries: &[SplitEntry],
        (depth, suffix, k): (u32, u64, u32),
        slot: u16,
        ext: bool,
    ) -> Option<Vec<Vec<u8>>> {
        let mut children: Vec<Vec<u8>> = (0..1u64 << k)
            .map(|j| self.subtable_bytes(depth + k, suffix | (j << depth), slot, ext))
            .collect();
        for e in entries {
            let side = ((e.hash >> depth) & ((1 << k) - 1)) as usize;
            let (a, b) = hash::buckets(e.hash, self.buckets);
            let table = &mut children[side];
            let (bucket, i) = [a, b].into_iter().find_map(|bucket| {
                let base = (bucket * layout::BUCKET) as usize;
                (0..SLOTS_PER_BUCKET)
                    .find(|&i| le64(table, base + slot_offset(i)) == 0)
                    .map(|i| (bucket, i))
            })?;
            let free = (bucket * layout::BUCKET) as usize + slot_offset(i);
            table[free..free + 8].copy_from_slice(&e.word.to_le_bytes());
            table[free + 8..free + 16].copy_from_slice(&e.meta.to_le_bytes());
            if ext && let Some(access) = &e.access {
                let at = (self.buckets * layout::BUCKET
                    + bucket * layout::EXT_BUCKET
                    + i as u64 * layout::EXT_ENTRY) as usize;
                table[at..at + layout::EXT_ENTRY as usize].copy_from_slice(access);
            }
        }
        Some(children)
    }

    pub(super) async fn create_partition(&self, slot: u16, lease: Lease) -> Result<(), DhtError> {
        let _guard = self.lock_for_rebuild(slot).await;
        if self.load_dir(slot).await?.is_some() {
            return Ok(());
        }
        let ext = self.wants_access_area();
        let st_len = layout::subtable_len(self.buckets, ext);
        let st = self.room_for(|| self.pool.alloc(st_len, true)).await?;
        let dir = self
            .room_for(|| self.pool.alloc(layout::DIR_HEADER + 8, true))
            .await?;
        let mut dir_bytes = [0u8; 16];
        dir_bytes[8..].copy_from_slice(&st.addr.bits().to_le_bytes());
        self.pool
            .write_all(&[
                (st.addr, &self.subtable_bytes(0, 0, slot, ext)),
                (dir.addr, &dir_bytes),
            ])
            .await?;
        let tx = Tx {
            shard: lease.shard,
            epoch: lease.epoch,
            writes: vec![TxWrite {
                addr: self.slot_entry(slot),
                expect: Some(0),
                new: layout::dir_ref(dir),
                in_word_lock: false,
            }],
        };
        match self.commit(tx).await {
            TxOutcome::Committed => {
                self.known_partition(slot);
                self.load_dir(slot).await?;
                Ok(())
            }
            other => {
                // An in-doubt commit may have made the blocks reachable: leak them.
                if !matches!(other, TxOutcome::Failed(_)) {
                    self.pool.free(st);
                    self.pool.free(dir);
                }
                match other {
                    TxOutcome::StaleEpoch { .. } => Err(DhtError::NotOwner(slot)),
                    TxOutcome::Failed(e) => Err(e.into()),
                    _ => Ok(()), // somebody else created it: retry the operation
                }
            }
        }
    }

    /// Splits the subtable `loc` maps to in two (extendible hashing).
    pub(super) async fn split(&self, loc: &Loc, lease: Lease) -> Result<(), DhtError> {
        let _guard = self.lock_for_rebuild(loc.slot).await;
        let Some(dir) = self.load_dir(loc.slot).await? else {
            return Ok(());
        };
        let old = dir.subtable(loc.hash);
        self.rebuild(loc.slot, &dir, old, 1, lease).await
    }

    /// Rewrites subtable `old` of `slot` as `2^k` new subtables, `k` from `min_k` up
    /// (a split; with `min_k = 0`, a move to a new block), and commits the directory
    /// change with every entry and bucket header of `old` validated, so a concurrent
    /// write makes it fail rather than lose a key. The caller holds the slot's lock.
    pub(super) async fn rebuild(
        &self,
        slot: u16,
        dir: &Dir,
        old: GlobalAddr,
        min_k: u32,
        lease: Lease,
    ) -> Result<(), DhtError> {
        let buckets_len = (self.buckets * layout::BUCKET) as usize;
        let mut bytes = vec![0u8; buckets_len];
        self.pool.read(old, &mut bytes).await?;
        let h0 = le64(&bytes, 0);
        let old_ext = layout::header_ext(h0);
        // The old entries' access metadata, carried to their new slots.
        let mut old_access = Vec::new();
        if old_ext {
            old_access = vec![0u8; (self.buckets * layout::EXT_BUCKET) as usize];
            self.pool
                .read(old.offset_by(buckets_len as u64), &mut old_access)
                .await?;
        }
        let depth = layout::header_depth(h0);
        let suffix = layout::header_suffix(h0);
        if h0 & layout::MOVED != 0 {
            return Ok(()); // split by someone else meanwhile; the caller retries
        }
        if min_k > 0 && depth >= layout::MAX_DEPTH.min(32) {
            return Err(DhtError::OutOfMemory);
        }
        // Every entry's full hash decides its side; the slot keeps only a fingerprint,
        // so read the keys.
        let mut guards = Vec::new();
        let mut entries = Vec::new();
        for b in 0..self.buckets as usize {
            let base = b * layout::BUCKET as usize;
            let hdr = le64(&bytes, base);
            guards.push(TxWrite {
                addr: old.offset_by(base as u64),
                expect: Some(hdr),
                new: hdr | layout::MOVED,
                in_word_lock: false,
            });
            for i in 0..SLOTS_PER_BUCKET {
                let at = base + (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize;
                let word = SlotWord(le64(&bytes, at));
                // Empty slots are validated too: a set that fills one after this read
                // must make the split fail, or its key would be left behind. The old
                // subtable's words stay locked for good (retired): a one-sided writer
                // holding a stale directory fails its lock and re-reads the directory.
                guards.push(TxWrite {
                    addr: old.offset_by(at as u64),
                    expect: Some(word.0),
                    new: word.0 | layout::LOCK,
                    in_word_lock: true,
                });
                if word.is_empty() {
                    continue;
                }
                let meta = le64(&bytes, at + 8);
                let obj = word
                    .object()
                    .ok_or_else(|| corrupt(format!("malformed slot word {:#x}", word.0)))?;
                let dmc_umo::StoredObject { db, key, .. } =
                    self.pool.read_any(obj).await?.ok_or_else(|| {
                        corrupt(format!("slot word {:#x} points at no valid object", word.0))
                    })?;
                let access = old_ext.then(|| {
                    let at = (b * SLOTS_PER_BUCKET + i) * layout::EXT_ENTRY as usize;
                    let mut e = [0u8; layout::EXT_ENTRY as usize];
                    e.copy_from_slice(&old_access[at..at + layout::EXT_ENTRY as usize]);
                    e
                });
                entries.push(SplitEntry {
                    hash: key_hash(db, &key),
                    word: word.unlocked().0,
                    meta,
                    access,
                });
            }
        }
        // The new subtables have an access-metadata area if the policy wants one
        // (a move under such a policy adds it) or the old one had it.
        let new_ext = old_ext || self.wants_access_area();
        let st_len = layout::subtable_len(self.buckets, new_ext) as usize;
        // Split in two; in the rare case a half cannot hold its entries (two-choice
        // placement failed), split into four or eight instead.
        let mut placed = None;
        for k in min_k..=3u32 {
            if depth + k > layout::MAX_DEPTH {
                break;
            }
            if let Some(children) = self.place(&entries, (depth, suffix, k), slot, new_ext) {
                placed = Some((k, children));
                break;
            }
        }
        let Some((k, children)) = placed else {
            return Err(DhtError::Contention(slot));
        };
        let mut blocks = Vec::with_capacity(children.len());
        for _ in 0..children.len() {
            match self.room_for(|| self.pool.alloc(st_len as u64, true)).await {
                Ok(b) => blocks.push(b),
                Err(e) => {
                    blocks.into_iter().for_each(|b| self.pool.free(b));
                    return Err(e);
                }
            }
        }
        let writes_out: Vec<(GlobalAddr, &[u8])> = blocks
            .iter()
            .zip(&children)
            .map(|(b, c)| (b.addr, &c[..]))
            .collect();
        self.pool.write_all(&writes_out).await?;
        let child = |i: usize| blocks[(i >> depth) & ((1 << k) - 1)].addr;

        let mut writes = guards;
        let mut new_dir = None;
        if depth + k <= dir.depth {
            for (i, st) in dir.subtables.iter().enumerate() {
                if *st == old {
                    writes.push(TxWrite {
                        addr: dir.block.addr.offset_by(layout::DIR_HEADER + 8 * i as u64),
                        expect: Some(old.bits()),
                        new: child(i).bits(),
                        in_word_lock: false,
                    });
                }
            }
        } else {
            let nd = depth + k;
            let n = 1usize << nd;
            let mut bytes = vec![0u8; 8 + 8 * n];
            bytes[..8].copy_from_slice(&(nd as u64).to_le_bytes());
            for i in 0..n {
                let prev = dir.subtables[i & ((1 << dir.depth) - 1)];
                let st = if prev == old { child(i) } else { prev };
                bytes[8 + 8 * i..16 + 8 * i].copy_from_slice(&st.bits().to_le_bytes());
            }
            let block = self
                .room_for(|| self.pool.alloc(bytes.len() as u64, true))
                .await?;
            self.pool.write_all(&[(block.addr, &bytes)]).await?;
            writes.push(TxWrite {
                addr: self.slot_entry(slot),
                expect: Some(layout::dir_ref(dir.block)),
                new: layout::dir_ref(block),
                in_word_lock: false,
            });
            new_dir = Some(block);
        }
        let tx = Tx {
            shard: lease.shard,
            epoch: lease.epoch,
            writes,
        };
        let outcome = self.commit(tx).await;
        if outcome == TxOutcome::Committed {
            if k > 0 {
                self.counters.splits.fetch_add(1, Ordering::Relaxed);
            }
            let old_len = layout::subtable_len(self.buckets, old_ext);
            match dmc_umo::classes::best_fit(old_len, self.pool.max_block(), true) {
                Some(class) => self.pool.free(Block { addr: old, class }),
                None => tracing::warn!(%old, "a retired subtable's size has no class: leaked"),
            }
            if new_dir.is_some() {
                self.pool.free(dir.block);
            }
            self.load_dir(slot).await?;
            return Ok(());
        }
        // An in-doubt commit may have made the new blocks reachable: leak them then.
        if !matches!(outcome, TxOutcome::Failed(_)) {
            blocks.into_iter().for_each(|b| self.pool.free(b));
            if let Some(b) = new_dir {
                self.pool.free(b);
            }
        }
        self.load_dir(slot).await?;
        match outcome {
            TxOutcome::StaleEpoch { .. } => Err(DhtError::NotOwner(slot)),
            TxOutcome::Failed(e) => Err(e.into()),
            _ => Ok(()), // a concurrent write changed the subtable: the caller retries
        }
    }
}
