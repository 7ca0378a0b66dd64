//! Emptying pool memory: evicting or moving the keys whose objects start in a range
//! (`evict_range`, `clear_range`), and `vacate_region`, which also moves this agent's
//! directories and subtables out of a region the pool is to return.
//!
//! Called to free a segment of a full pool and to return a region. A move swaps the
//! slot word only if it still names the old object, and never frees a live one.

use dmc_umo::{GlobalAddr, Tx, TxOutcome, TxWrite};

use super::dir::Dir;
use super::probe::Probe;
use super::{Dht, DhtError, Found, MAX_RETRIES};
use crate::layout::{self, SLOTS_PER_BUCKET, SlotWord, le64};
use crate::owner::Lease;

impl Dht {
    /// Evicts every key of this agent's hash slots whose object starts inside
    /// `[start, start + len)` (a segment or a region), policy or not; returns how many.
    /// A full pool whose free memory is scattered over every segment frees a whole
    /// segment this way (memcached's slab rebalancing does the same).
    pub async fn evict_range(&self, start: GlobalAddr, len: u64) -> Result<usize, DhtError> {
        Ok(self.clear_range(start, len, false).await?.1)
    }

    /// Moves (or with `relocate == false`, evicts) the objects of this agent's keys
    /// that start inside `[start, start + len)`. A move writes the object anew (outside
    /// any retired region) and swaps the slot word if it still points at the old one;
    /// a key that cannot be moved for want of room is evicted. Returns (moved, evicted).
    async fn clear_range(
        &self,
        start: GlobalAddr,
        len: u64,
        relocate: bool,
    ) -> Result<(usize, usize), DhtError> {
        let mut moved = 0;
        let inside = |a: GlobalAddr| {
            a.region() == start.region()
                && (start.offset()..start.offset() + len).contains(&a.offset())
        };
        let parts = self.owned_partitions();
        let mut evicted = 0;
        for slot in parts {
            let Some(dir) = self.load_dir(slot).await? else {
                continue;
            };
            let mut subtables = dir.subtables.clone();
            subtables.sort_unstable();
            subtables.dedup();
            for st in subtables {
                for b in 0..self.buckets {
                    let bucket = st.offset_by(b * layout::BUCKET);
                    // Each clear changes the bucket header: read it again after one.
                    for _ in 0..=SLOTS_PER_BUCKET {
                        let mut bytes = [0u8; layout::BUCKET as usize];
                        self.pool.read(bucket, &mut bytes).await?;
                        let header = le64(&bytes, 0);
                        if header & layout::MOVED != 0 || layout::header_slot(header) != slot {
                            break; // split meanwhile: its entries live on elsewhere
                        }
                        let probe = Probe {
                            buckets: [(bucket, bytes), (bucket, bytes)],
                            ext: [None, None],
                        };
                        let Some((addr, word, meta)) = (0..SLOTS_PER_BUCKET)
                            .map(|i| probe.slot(0, i))
                            .find(|(_, w, _)| w.object().is_some_and(|o| inside(o.block.addr)))
                        else {
                            break;
                        };
                        let Some(obj) = word.object() else { break };
                        let key = self.pool.read_any(obj).await?;
                        if relocate
                            && let Some(o) = &key
                            && let Ok(fresh) =
                                self.pool.write_object(o.db, &o.key, o.kind, &o.value).await
                        {
                            let swap = self.swap_object(slot, (bucket, header), addr, word, fresh);
                            match swap.await? {
                                TxOutcome::Committed => {
                                    moved += 1;
                                    if fresh.chained && o.kind != dmc_umo::ValueKind::String {
                                        // The new head owns the same chunk tree.
                                        self.pool.free_head(obj);
                                    } else {
                                        self.pool.free_object(obj).await;
                                    }
                                }
                                TxOutcome::StaleEpoch { .. } => {
                                    return Err(DhtError::NotOwner(slot));
                                }
                                // Changed meanwhile (the next read sees it) or in doubt.
                                TxOutcome::Failed(_) => {}
                                _ if fresh.chained && o.kind != dmc_umo::ValueKind::String => {
                                    self.pool.free_head(fresh)
                                }
                                _ => self.pool.free_object(fresh).await,
                            }
                            continue;
                        }
                        let found = Found {
                            bucket: 0,
                            addr,
                            word,
                            meta,
                            value: None,
                            kind: dmc_umo::ValueKind::String,
                            ext: None,
                        };
                        if self
                            .evict_entry(slot, (bucket, header), &found)
                            .await?
                            .is_some()
                        {
                            evicted += 1;
                        }
                    }
                }
            }
        }
        Ok((moved, evicted))
    }

    /// Moves this agent's part of the table out of `region` so the pool can return it.
    /// The pool stops allocating there; the agent evicts per its policy down to
    /// maxmemory; then directories and subtables of its hash slots are rewritten
    /// elsewhere (readers holding the old ones see them marked moved) and the objects
    /// still there are moved (evicted only if no room is left). Returns (moved,
    /// evicted) keys.
    pub async fn vacate_region(
        &self,
        region: dmc_verbs::RegionId,
    ) -> Result<(usize, usize), DhtError> {
        self.pool.retire_region(region);
        // Shrinking evicts per the policy first; what is left in the region moves.
        self.shrink_to_maxmemory(usize::MAX).await?;
        let parts = self.owned_partitions();
        for slot in parts {
            let lease = self.lease(slot)?;
            let _guard = self.lock_for_rebuild(slot).await;
            // A subtable's move can fail on a concurrent write: try again.
            for _ in 0..MAX_RETRIES {
                let Some(dir) = self.load_dir(slot).await? else {
                    break;
                };
                if let Some(old) = dir.subtables.iter().find(|st| st.region() == region) {
                    self.rebuild(slot, &dir, *old, 0, lease).await?;
                    continue;
                }
                if dir.block.addr.region() == region {
                    self.move_dir(slot, &dir, lease).await?;
                    continue;
                }
                break;
            }
        }
        let size = self.pool.config().region_size;
        self.relocate_trees(GlobalAddr::new(region, 0), size)
            .await?;
        self.clear_range(GlobalAddr::new(region, 0), size, true)
            .await
    }

    /// Points the slot at `addr` (holding `word`, in the bucket whose header is
    /// `header`) at the moved object `fresh`, if neither changed meanwhile.
    async fn swap_object(
        &self,
        slot: u16,
        (bucket, header): (GlobalAddr, u64),
        addr: GlobalAddr,
        word: SlotWord,
        fresh: dmc_umo::ObjectRef,
    ) -> Result<TxOutcome, DhtError> {
        let lease = self.lease(slot)?;
        let tx = Tx {
            shard: lease.shard,
            epoch: lease.epoch,
            writes: vec![
                TxWrite {
                    addr: bucket,
                    expect: Some(header),
                    new: header,
                    in_word_lock: false,
                },
                TxWrite {
                    addr,
                    expect: Some(word.0),
                    new: SlotWord::new(word.fp(), fresh).0,
                    in_word_lock: true,
                },
            ],
        };
        Ok(self.commit(tx).await)
    }

    /// Copies the chunks that collections of this agent's keys keep inside
    /// `[start, start + len)` out of it (copy on write: the paths above them too) and
    /// commits each key's new root; returns how many trees moved. Their heads, if in
    /// the range, are moved after by `clear_range`.
    async fn relocate_trees(&self, start: GlobalAddr, len: u64) -> Result<usize, DhtError> {
        let inside = move |a: GlobalAddr| {
            a.region() == start.region()
                && (start.offset()..start.offset() + len).contains(&a.offset())
        };
        let mut moved = 0;
        for slot in self.owned_partitions() {
            let Some(dir) = self.load_dir(slot).await? else {
                continue;
            };
            let mut subtables = dir.subtables.clone();
            subtables.sort_unstable();
            subtables.dedup();
            for st in subtables {
                for b in 0..self.buckets {
                    let bucket = st.offset_by(b * layout::BUCKET);
                    // A key changed meanwhile is looked at again (its new tree may
                    // still have chunks in the range).
                    for _ in 0..MAX_RETRIES {
                        let mut again = false;
                        let mut bytes = [0u8; layout::BUCKET as usize];
                        self.pool.read(bucket, &mut bytes).await?;
                        let header = le64(&bytes, 0);
                        if header & layout::MOVED != 0 || layout::header_slot(header) != slot {
                            break;
                        }
                        let probe = Probe {
                            buckets: [(bucket, bytes), (bucket, bytes)],
                            ext: [None, None],
                        };
                        for i in 0..SLOTS_PER_BUCKET {
                            let (addr, word, _) = probe.slot(0, i);
                            let Some(obj) = word.object().filter(|o| o.chained) else {
                                continue;
                            };
                            let Some(o) = self.pool.read_any(obj).await? else {
                                continue;
                            };
                            if o.kind == dmc_umo::ValueKind::String {
                                continue;
                            }
                            let relocated = self.pool.relocate_value_trees(&o.value, &inside);
                            let Some((value, tree)) = relocated.await? else {
                                continue;
                            };
                            let fresh =
                                match self.pool.write_object(o.db, &o.key, o.kind, &value).await {
                                    Ok(f) => f,
                                    Err(e) => {
                                        tree.new.iter().for_each(|b| self.pool.free(*b));
                                        return Err(e.into());
                                    }
                                };
                            let swap = self.swap_object(slot, (bucket, header), addr, word, fresh);
                            match swap.await? {
                                TxOutcome::Committed => {
                                    moved += 1;
                                    self.pool.free_head(obj);
                                    tree.old.iter().for_each(|b| self.pool.free(*b));
                                }
                                TxOutcome::StaleEpoch { .. } => {
                                    return Err(DhtError::NotOwner(slot));
                                }
                                // In doubt: the new root may be reachable; leak rather than free.
                                TxOutcome::Failed(_) => {}
                                // Changed meanwhile: look at the bucket again.
                                _ => {
                                    self.pool.free_head(fresh);
                                    tree.new.iter().for_each(|b| self.pool.free(*b));
                                    again = true;
                                }
                            }
                        }
                        if !again {
                            break;
                        }
                    }
                }
            }
        }
        Ok(moved)
    }

    /// Rewrites `slot`'s directory into a new block (its old one is in a region being
    /// returned). The caller holds the slot's lock.
    async fn move_dir(&self, slot: u16, dir: &Dir, lease: Lease) -> Result<(), DhtError> {
        let mut bytes = vec![0u8; dir.block.size() as usize];
        self.pool.read(dir.block.addr, &mut bytes).await?;
        let block = self
            .room_for(|| self.pool.alloc(bytes.len() as u64, true))
            .await?;
        self.pool.write_all(&[(block.addr, &bytes)]).await?;
        let tx = Tx {
            shard: lease.shard,
            epoch: lease.epoch,
            writes: vec![TxWrite {
                addr: self.slot_entry(slot),
                expect: Some(layout::dir_ref(dir.block)),
                new: layout::dir_ref(block),
                in_word_lock: false,
            }],
        };
        match self.commit(tx).await {
            TxOutcome::Committed => {
                self.pool.free(dir.block);
                self.load_dir(slot).await?;
                Ok(())
            }
            TxOutcome::StaleEpoch { .. } => Err(DhtError::NotOwner(slot)),
            TxOutcome::Failed(e) => Err(e.into()),
            _ => {
                self.pool.free(block);
                self.load_dir(slot).await?;
                Ok(())
            }
        }
    }
}
