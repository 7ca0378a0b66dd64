//! The superblock: finding the node that holds it, formatting a new pool, loading an
//! existing one (settings, usage counter, region table, claimed segments), recording a
//! region the pool grew by, and the hash table's root pointer.
//! Called by `Pool::open_with` (load or format), `regions` (region records) and the hash
//! table (root). `format` never writes the superblock region's own record before the
//! header: `load` takes a missing record to mean another client is still formatting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use dmc_verbs::RegionId;

use super::{POOL_SHARD, Pool, Tx, TxOutcome, TxWrite};
use crate::addr::GlobalAddr;
use crate::alloc::Allocator;
use crate::error::UmoError;
use crate::layout::{self, RegionRecord, Superblock};

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Pool {
    /// The node holding a copy of region 1 (the superblock), if any does.
    pub(super) async fn super_holder(&self) -> Result<Option<usize>, UmoError> {
        for (i, n) in self.nodes.iter().enumerate() {
            let list = n.list_regions().await.map_err(UmoError::node(n.node()))?;
            if list.iter().any(|(r, _)| *r == self.config.super_region) {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    pub(super) async fn load(&mut self, holder: usize) -> Result<(), UmoError> {
        let node = &self.nodes[holder];
        let mut sb = [0u8; layout::SB_LEN];
        node.read(self.config.super_region, 0, &mut sb)
            .await
            .map_err(|e| UmoError::Node {
                node: node.node(),
                source: e,
            })?;
        // All zeroes: another client created region 1 and is formatting it.
        if sb.iter().all(|b| *b == 0) {
            return Err(UmoError::Formatting);
        }
        let sb = Superblock::decode(&sb)?;
        if sb.replicas as usize != self.config.replicas
            || sb.region_size != self.config.region_size
            || sb.segment_size != self.config.segment_size
        {
            tracing::warn!(
                replicas = sb.replicas,
                region_size = sb.region_size,
                segment_size = sb.segment_size,
                "the pool was formatted with other settings; using the pool's"
            );
            self.config.replicas = sb.replicas as usize;
            self.config.region_size = sb.region_size;
            self.config.segment_size = sb.segment_size;
            let allocator =
                Allocator::new(self.config.client_id, sb.segment_size, self.config.grace);
            self.max_block = allocator.max_block();
            *self.alloc.get_mut() = allocator;
        }
        self.created_ms = sb.created_ms;
        let mut used = [0u8; 8];
        node.read(self.config.super_region, layout::SB_USED, &mut used)
            .await
            .map_err(UmoError::node(node.node()))?;
        self.usage_seen = AtomicU64::new(u64::from_le_bytes(used));
        let table_len = (layout::MAX_REGIONS * layout::REGION_ENTRY) as usize;
        let mut table = vec![0u8; table_len];
        node.read(self.config.super_region, layout::REGION_TABLE, &mut table)
            .await
            .map_err(|e| UmoError::Node {
                node: node.node(),
                source: e,
            })?;
        let own = (RegionRecord::offset(self.config.super_region) - layout::REGION_TABLE) as usize;
        if table
            .get(own..own + layout::REGION_ENTRY as usize)
            .and_then(RegionRecord::decode)
            .is_none()
        {
            return Err(UmoError::Formatting);
        }
        let mut found = 0;
        for (i, rec) in table.chunks(layout::REGION_ENTRY as usize).enumerate() {
            let Some(rec) = RegionRecord::decode(rec) else {
                continue;
            };
            let region = (i + 1) as RegionId;
            let entry = self.entry_for(region, &rec)?;
            let primary = &self.nodes[entry.primary];
            let nseg =
                layout::segments_per_region(self.config.region_size, self.config.segment_size);
            let mut seg_table = vec![0u8; (nseg * 8) as usize];
            primary
                .read(region, layout::SEGMENT_TABLE, &mut seg_table)
                .await
                .map_err(UmoError::node(primary.node()))?;
            // Segments claimed before a restart stay claimed: their free blocks are found
            // by the hash table's recovery scan, not here.
            self.alloc
                .get_mut()
                .add_region(region, self.config.region_size, |i| {
                    seg_table[(i * 8) as usize] != 0
                });
            {
                let regions = self.regions.get_mut();
                regions[region as usize] = Some(entry.clone());
                self.primaries[region as usize].store(entry.primary as u32 + 1, Ordering::Release);
            }
            found += 1;
        }
        tracing::info!(
            regions = found,
            created_ms = self.created_ms,
            "opened existing pool"
        );
        Ok(())
    }

    pub(super) async fn format(&mut self) -> Result<(), UmoError> {
        if self.nodes.len() < self.config.replicas {
            return Err(UmoError::Config(format!(
                "{} replicas need as many memory nodes, {} configured",
                self.config.replicas,
                self.nodes.len()
            )));
        }
        self.created_ms = unix_ms();
        let sb = Superblock {
            replicas: self.config.replicas as u32,
            region_size: self.config.region_size,
            segment_size: self.config.segment_size,
            created_ms: self.created_ms,
            root: 0,
        };
        let rec = match &self.source {
            Some(source) => source.grant(Some(self.config.super_region)).await?.1,
            None => self.create_region_copies(self.config.super_region).await?,
        };
        let entry = self.entry_for(self.config.super_region, &rec)?;
        self.primaries[self.config.super_region as usize]
            .store(entry.primary as u32 + 1, Ordering::Release);
        self.regions.get_mut()[self.config.super_region as usize] = Some(entry);
        self.write_all(&[(
            GlobalAddr::new(self.config.super_region, 0),
            &sb.encode()[..],
        )])
        .await?;
        self.record_region(self.config.super_region, &rec).await?;
        self.alloc
            .get_mut()
            .add_region(self.config.super_region, self.config.region_size, |_| false);
        tracing::info!(
            replicas = self.config.replicas,
            region_size = self.config.region_size,
            "formatted a new pool"
        );
        Ok(())
    }

    pub(super) async fn record_region(
        &self,
        region: RegionId,
        rec: &RegionRecord,
    ) -> Result<(), UmoError> {
        let at = GlobalAddr::new(self.config.super_region, RegionRecord::offset(region));
        self.write_all(&[(at, &rec.encode()[..])]).await
    }

    /// The hash table's root pointer from the superblock.
    pub async fn root(&self) -> Result<u64, UmoError> {
        let mut w = [0u8; 8];
        self.read(
            GlobalAddr::new(self.config.super_region, layout::SB_ROOT),
            &mut w,
        )
        .await?;
        Ok(u64::from_le_bytes(w))
    }

    /// Sets the root pointer if it still holds `expect`.
    pub async fn set_root(&self, expect: u64, new: u64) -> Result<TxOutcome, UmoError> {
        let tx = Tx {
            shard: POOL_SHARD,
            epoch: 0,
            writes: vec![TxWrite {
                addr: GlobalAddr::new(self.config.super_region, layout::SB_ROOT),
                expect: Some(expect),
                new,
                in_word_lock: false,
            }],
        };
        Ok(self.commit(std::slice::from_ref(&tx)).await.remove(0))
    }
}
