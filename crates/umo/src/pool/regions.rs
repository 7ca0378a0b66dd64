//! The region map: which memory nodes hold each region's copies, creating copies when
//! the pool grows (on the nodes with the most room, or granted by a `RegionSource`),
//! learning regions other clients grew the pool by, and forgetting returned ones.
//! Called by allocation (`grow`), the verbs and commits (`primary`, `discover`) and load.
//! A grown region never enters the map (or the allocator) before its record is in the
//! superblock: other clients must be able to discover any region an address points into.

use std::sync::atomic::Ordering;

use dmc_verbs::RegionId;
use dmc_verbs::wire::{Request, Response};
use futures::future::join_all;

use super::{Pool, RegionEntry};
use crate::error::UmoError;
use crate::layout::{self, RegionRecord};

impl Pool {
    /// Maps a region record to configured nodes. A copy on a node this client was not
    /// given is skipped; if that was the primary, the first configured backup serves
    /// reads (degraded: writes reach the remaining copies only).
    pub(super) fn entry_for(
        &self,
        region: RegionId,
        rec: &RegionRecord,
    ) -> Result<RegionEntry, UmoError> {
        let mut copies = std::iter::once(rec.primary)
            .chain(rec.backups.iter().copied())
            .filter_map(|n| self.nodes.index_of(n));
        let primary = copies.next().ok_or_else(|| {
            UmoError::Config(format!(
                "no configured memory node holds region {region} (primary {}, backups {:?})",
                rec.primary, rec.backups
            ))
        })?;
        let backups: Vec<usize> = copies.collect();
        if self.nodes[primary].node() != rec.primary || backups.len() < rec.backups.len() {
            tracing::warn!(region, primary = rec.primary, backups = ?rec.backups, serving = self.nodes[primary].node(),
                "region is missing copies on unconfigured nodes: serving it degraded");
        }
        Ok(RegionEntry {
            primary,
            backups,
            filling: Vec::new(),
        })
    }

    /// Creates `region` on the `r` nodes with the most free bytes.
    pub(super) async fn create_region_copies(
        &self,
        region: RegionId,
    ) -> Result<RegionRecord, UmoError> {
        let stats = join_all(self.nodes.iter().map(|n| n.call(Request::Stats))).await;
        let mut free: Vec<(u64, usize)> = stats
            .into_iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Ok(Response::Stats(s)) => Some((s.capacity.saturating_sub(s.used), i)),
                _ => None,
            })
            .filter(|(free, _)| *free >= self.config.region_size)
            .collect();
        free.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        if free.len() < self.config.replicas {
            return Err(UmoError::OutOfMemory(format!(
                "{} memory nodes have room for another {} byte region, {} needed",
                free.len(),
                self.config.region_size,
                self.config.replicas
            )));
        }
        let mut chosen: Vec<usize> = free
            .iter()
            .take(self.config.replicas)
            .map(|f| f.1)
            .collect();
        // Spread primaries: reads go to primaries, so the chosen node that is primary of
        // the fewest regions becomes this one's primary.
        let primaries = |n: usize| {
            self.regions
                .read()
                .iter()
                .flatten()
                .filter(|e| e.primary == n)
                .count()
        };
        if let Some(best) = (0..chosen.len()).min_by_key(|&k| (primaries(chosen[k]), k)) {
            chosen.swap(0, best);
        }
        for (k, &i) in chosen.iter().enumerate() {
            if let Err(e) = self.nodes[i]
                .create_region(region, self.config.region_size)
                .await
            {
                for &j in &chosen[..k] {
                    let _ = self.nodes[j].drop_region(region).await;
                }
                return Err(UmoError::node(self.nodes[i].node())(e));
            }
        }
        Ok(RegionRecord {
            primary: self.nodes[chosen[0]].node(),
            backups: chosen[1..].iter().map(|&i| self.nodes[i].node()).collect(),
        })
    }

    /// Adds a region to the pool.
    pub(super) async fn grow(&self) -> Result<(), UmoError> {
        let _guard = self.grow_lock.lock().await;
        if self.alloc.lock().stats().free_segments > 0 {
            return Ok(()); // another task grew the pool while we waited
        }
        if let Some(source) = &self.source {
            let (region, rec) = source.grant(None).await?;
            let entry = self.entry_for(region, &rec)?;
            self.record_region(region, &rec).await?;
            self.set_entry(&mut self.regions.write(), region, entry);
            self.alloc
                .lock()
                .add_region(region, self.config.region_size, |_| false);
            tracing::info!(region, primary = rec.primary, backups = ?rec.backups, "pool grew by a granted region");
            return Ok(());
        }
        let count = self.regions.read().iter().filter(|r| r.is_some()).count() as u32;
        if self.config.max_regions > 0 && count >= self.config.max_regions {
            return Err(UmoError::OutOfMemory(format!(
                "the pool reached its limit of {} regions",
                self.config.max_regions
            )));
        }
        let mut region = (self
            .regions
            .read()
            .iter()
            .rposition(|r| r.is_some())
            .unwrap_or(0)
            + 1) as u64;
        loop {
            if region > layout::MAX_REGIONS {
                return Err(UmoError::OutOfMemory("no free region id".into()));
            }
            match self.create_region_copies(region as RegionId).await {
                Ok(rec) => {
                    let entry = self.entry_for(region as RegionId, &rec)?;
                    self.record_region(region as RegionId, &rec).await?;
                    self.set_entry(&mut self.regions.write(), region as RegionId, entry);
                    self.alloc.lock().add_region(
                        region as RegionId,
                        self.config.region_size,
                        |_| false,
                    );
                    tracing::info!(region, primary = rec.primary, backups = ?rec.backups, "pool grew by a region");
                    return Ok(());
                }
                // Another client took this id: try the next one.
                Err(UmoError::Node {
                    source: dmc_verbs::VerbsError::RegionExists(_),
                    ..
                }) => region += 1,
                Err(e) => return Err(e),
            }
        }
    }

    pub(super) fn entry(&self, region: RegionId) -> Result<RegionEntry, UmoError> {
        self.regions.read()[region as usize]
            .clone()
            .ok_or(UmoError::UnknownRegion(region))
    }

    pub(super) fn primary(&self, region: RegionId) -> Result<usize, UmoError> {
        match self.primaries[region as usize].load(Ordering::Acquire) {
            0 => Err(UmoError::UnknownRegion(region)),
            n => Ok(n as usize - 1),
        }
    }

    /// The primary of `region`, learning the region from its superblock record if this
    /// client has not seen it (another client grew the pool by it).
    pub(super) async fn discover(&self, region: RegionId) -> Result<usize, UmoError> {
        if let Ok(n) = self.primary(region) {
            return Ok(n);
        }
        if region == self.config.super_region || region as u64 > layout::MAX_REGIONS {
            return Err(UmoError::UnknownRegion(region));
        }
        let sb = &self.nodes[self.primary(self.config.super_region)?];
        let mut rec = [0u8; layout::REGION_ENTRY as usize];
        sb.read(
            self.config.super_region,
            RegionRecord::offset(region),
            &mut rec,
        )
        .await
        .map_err(UmoError::node(sb.node()))?;
        let rec = RegionRecord::decode(&rec).ok_or(UmoError::UnknownRegion(region))?;
        let entry = self.entry_for(region, &rec)?;
        let primary = entry.primary;
        self.set_entry(&mut self.regions.write(), region, entry);
        tracing::debug!(
            region,
            primary = rec.primary,
            "learned a region another client created"
        );
        Ok(primary)
    }

    /// The regions of `regions` this client has not seen yet: a lock-free load per
    /// region, and no allocation when every region is known.
    pub(super) fn unknown(&self, regions: impl Iterator<Item = RegionId>) -> Vec<RegionId> {
        regions.filter(|r| self.primary(*r).is_err()).collect()
    }

    /// Learns every region of `unknown` (see [`unknown`](Self::unknown)).
    pub(super) async fn discover_all(&self, unknown: Vec<RegionId>) -> Result<(), UmoError> {
        for region in unknown {
            self.discover(region).await?;
        }
        Ok(())
    }

    /// Records where a region's copies are.
    pub(super) fn set_entry(
        &self,
        regions: &mut [Option<RegionEntry>],
        region: RegionId,
        entry: RegionEntry,
    ) {
        self.primaries[region as usize].store(entry.primary as u32 + 1, Ordering::Release);
        regions[region as usize] = Some(entry);
    }

    /// Stops allocating in `region`: it is being returned to the memory nodes.
    pub fn retire_region(&self, region: RegionId) {
        // Retired first, so no refill takes a block of it any more, then the blocks of
        // it threads hold are given back (and dropped).
        self.alloc.lock().retire_region(region);
        self.flush_block_caches();
    }

    /// Forgets a region the cluster manager returned to the memory nodes.
    pub fn forget_region(&self, region: RegionId) {
        self.alloc.lock().retire_region(region);
        self.flush_block_caches();
        self.regions.write()[region as usize] = None;
        self.primaries[region as usize].store(0, Ordering::Release);
    }
}
