//! Many advisory counter additions at once: the hash table's batched hit metadata.
//!
//! Each addition is made as [`Pool::faa_mirrored`] makes one (added at the region's
//! primary, the sum written to its backups), but the additions whose primary is one
//! node go in one post, and the backups' writes in one post per node: a batch of hits
//! costs two round trips to each node, not two per key, which is what keeps LRU and LFU
//! metadata cheap over `tcp` and RDMA (one doorbell per node instead of one per key).

use std::collections::BTreeMap;

use dmc_verbs::{RegionId, Verb};

use super::Pool;
use crate::addr::GlobalAddr;
use crate::error::UmoError;

impl Pool {
    /// Adds every `(addr, add)`; additions to frozen regions (their copies being moved)
    /// are dropped, as advisory metadata may be. The first node error is returned after
    /// every node was tried.
    pub async fn faa_mirrored_many(&self, adds: &[(GlobalAddr, u64)]) -> Result<(), UmoError> {
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
        let mut sums = vec![[0u8; 8]; adds.len()];
        let mut first_error = None;
        for (node, items) in &by_primary {
            let mut verbs: Vec<Verb> = items
                .iter()
                .map(|&i| Verb::Faa {
                    region: adds[i].0.region(),
                    offset: adds[i].0.offset(),
                    add: adds[i].1,
                    old: 0,
                })
                .collect();
            match self.post_on(*node, &mut verbs).await {
                Ok(()) => {
                    for (&i, v) in items.iter().zip(&verbs) {
                        if let (Verb::Faa { old, .. }, Some(sum)) = (v, sums.get_mut(i)) {
                            *sum = old.wrapping_add(adds[i].1).to_le_bytes();
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
        let mut by_backup: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, nodes) in backups.iter().enumerate() {
            for &n in nodes {
                by_backup.entry(n).or_default().push(i);
            }
        }
        for (node, items) in &by_backup {
            let mut verbs: Vec<Verb> = items
                .iter()
                .map(|&i| Verb::Write {
                    region: adds[i].0.region(),
                    offset: adds[i].0.offset(),
                    data: &sums[i],
                })
                .collect();
            if let Err(e) = self.post_on(*node, &mut verbs).await {
                tracing::debug!(error = %e, "a backup missed counters' values");
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
