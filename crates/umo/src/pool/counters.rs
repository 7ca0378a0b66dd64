//! Many advisory counter additions at once: the hash table's batched hit metadata.
//!
//! Each addition is made as [`Pool::faa_field_now`] makes one: added at the region's
//! primary, and the bytes of the sum it can change written to its backups (the
//! additions are to a field in the word's high bytes, a slot's LFU count). But the
//! additions whose primary is one node go in one post, and the backups' writes in one
//! post per node, every node's at once: a batch of hits costs two round trips, not two
//! per key, which is what keeps LRU and LFU metadata cheap over `tcp` and RDMA (one
//! doorbell per node instead of one per key).

use std::collections::BTreeMap;

use dmc_verbs::{RegionId, Verb};
use futures::future::join_all;

use super::Pool;
use crate::addr::GlobalAddr;
use crate::error::UmoError;

impl Pool {
    /// Adds every `(addr, add)` to a field in its word's high bytes (see the module
    /// doc); additions to frozen regions (their copies being moved) are dropped, as
    /// advisory metadata may be. The first node error is returned after every node was
    /// tried.
    pub async fn faa_fields_many(&self, adds: &[(GlobalAddr, u64)]) -> Result<(), UmoError> {
        if self.lease_lapsed() {
            return Err(UmoError::LeaseLapsed);
        }
        let mut regions: Vec<RegionId> = adds.iter().map(|(a, _)| a.region()).collect();
        regions.sort_unstable();
        regions.dedup();
        for r in &regions {
            self.discover(*r).await?;
        }
        regions.retain(|r| !self.gate.is_frozen(*r));
        let Ok(_permit) = self.gate.try_enter(regions.iter().copied()) else {
            return Ok(());
        };
        // By primary node: the additions (indexes into `adds`), and each one's backups.
        let mut by_primary: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut backups: Vec<Vec<usize>> = vec![Vec::new(); adds.len()];
        for (i, (addr, _)) in adds.iter().enumerate() {
            let region = addr.region();
            if regions.binary_search(&region).is_err() {
                continue;
            }
            let entry = self.entry(region)?;
            if !entry.filling.is_empty() {
                self.dirty.mark(region, addr.offset(), 8);
            }
            let primary = self.primary(region)?;
            by_primary.entry(primary).or_default().push(i);
            if let Some(b) = backups.get_mut(i) {
                b.extend(entry.copies().filter(|&n| n != primary));
            }
        }
        // The primaries' additions, every node at once.
        let faas = join_all(by_primary.iter().map(|(node, items)| async move {
            let mut verbs: Vec<Verb> = items
                .iter()
                .filter_map(|&i| adds.get(i))
                .map(|(addr, add)| Verb::Faa {
                    region: addr.region(),
                    offset: addr.offset(),
                    add: *add,
                    old: 0,
                })
                .collect();
            let done = self.post_on(*node, &mut verbs).await;
            (items, verbs, done)
        }))
        .await;
        let mut sums = vec![[0u8; 8]; adds.len()];
        let mut first_error = None;
        for (items, verbs, done) in faas {
            match done {
                Ok(()) => {
                    for (&i, v) in items.iter().zip(&verbs) {
                        if let (Verb::Faa { old, add, .. }, Some(sum)) = (v, sums.get_mut(i)) {
                            *sum = old.wrapping_add(*add).to_le_bytes();
                        }
                    }
                }
                Err(e) => {
                    // Nothing was added there: its backups must not get a sum either.
                    for &i in items {
                        if let Some(b) = backups.get_mut(i) {
                            b.clear();
                        }
                    }
                    first_error.get_or_insert(e);
                }
            }
        }
        // Between the primaries' additions and the backups' sums, for the test of two
        // batches racing (`dht/tests/hit_order.rs`).
        #[cfg(feature = "failpoints")]
        fail::fail_point!("umo-counter-sums-gap");
        let mut by_backup: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, nodes) in backups.iter().enumerate() {
            for &n in nodes {
                by_backup.entry(n).or_default().push(i);
            }
        }
        // The backups' sums, every node at once.
        let sums = &sums;
        join_all(by_backup.iter().map(|(node, items)| async move {
            let mut verbs: Vec<Verb> = items
                .iter()
                .filter_map(|&i| Some((adds.get(i)?, sums.get(i)?)))
                .map(|((addr, add), sum)| {
                    let skip = unchanged_low_bytes(*add);
                    Verb::Write {
                        region: addr.region(),
                        offset: addr.offset() + skip as u64,
                        data: sum.get(skip..).unwrap_or_default(),
                    }
                })
                .collect();
            if let Err(e) = self.post_on(*node, &mut verbs).await {
                tracing::debug!(error = %e, "a backup missed counters' values");
            }
        }))
        .await;
        first_error.map_or(Ok(()), Err)
    }
}

/// How many low bytes of a word an addition of `add` cannot change (all 8 for 0): a
/// sum's bytes below `add`'s lowest set bit are the old value's. An addition to a field
/// in the word's high bytes (a slot's LFU count) writes a backup the rest only. The
/// whole sum would also write the primary's other fields of the word over the
/// backup's, undoing newer ones that reached the backup first: a single-key commit
/// writes a slot's metadata (its expiry included) to the backups before the primary,
/// so a hit's LFU sum landing in between left the backup with the old expiry for good.
/// Not for whole-word counters: a backup that missed a sum would keep its stale low
/// bytes under every later addition that skips them.
pub(super) fn unchanged_low_bytes(add: u64) -> usize {
    (add.trailing_zeros() / 8) as usize
}

#[cfg(test)]
mod tests {
    use super::unchanged_low_bytes;

    #[test]
    fn an_addition_changes_the_bytes_from_its_lowest_set_bit_up() {
        assert_eq!(unchanged_low_bytes(0), 8);
        assert_eq!(unchanged_low_bytes(1), 0);
        assert_eq!(unchanged_low_bytes(1 << 8), 1);
        assert_eq!(unchanged_low_bytes(1 << 56), 7);
        assert_eq!(unchanged_low_bytes(255 << 56), 7);
        // Subtractions (wrapping additions) too.
        assert_eq!(unchanged_low_bytes(0u64.wrapping_sub(1 << 8)), 1);
        assert_eq!(unchanged_low_bytes(u64::MAX), 0);
        for add in [1u64 << 40, 3 << 41, 1 << 63, 0u64.wrapping_sub(1 << 16)] {
            let skip = unchanged_low_bytes(add);
            for old in [0u64, u64::MAX, 0x0123_4567_89ab_cdef] {
                let (o, s) = (old.to_le_bytes(), old.wrapping_add(add).to_le_bytes());
                assert_eq!(o[..skip], s[..skip], "{old:#x} + {add:#x}");
            }
        }
    }
}
