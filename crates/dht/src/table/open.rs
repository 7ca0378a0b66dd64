//! Opening the table: [`Dht::open`] finds the root in the pool or creates it, starts the
//! group committer and counts the keys of the hash slots this client owns.
//!
//! Called once per client at startup. It must never replace a table another client
//! created: the root is set by compare-and-swap from 0, and the loser uses the winner's.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};

use dmc_umo::pool::POOL_SHARD;
use dmc_umo::{GlobalAddr, Pool, Tx, TxOutcome, TxWrite};
use parking_lot::{Mutex, RwLock};
use tokio::sync::mpsc;

use super::commit::commit_loop;
use super::{Counters, Dht, DhtConfig, DhtError, FlatDirs, corrupt, policy_index};
use crate::clock::Clock;
use crate::layout::{self, HASH_SLOTS, le64};
use crate::owner::Ownership;

impl Dht {
    /// Opens the table in `pool`, creating it if the pool has none, with this client
    /// owning the slots `owner` says.
    pub async fn open(
        pool: Arc<Pool>,
        config: DhtConfig,
        clock: Arc<dyn Clock>,
        owner: Ownership,
    ) -> Result<Arc<Dht>, DhtError> {
        if !config.buckets_per_subtable.is_power_of_two() || config.buckets_per_subtable > 1 << 12 {
            return Err(corrupt(
                "buckets_per_subtable must be a power of two up to 4096",
            ));
        }
        if config.slot_group_bits > layout::MAX_SLOT_GROUP_BITS {
            return Err(corrupt(format!(
                "slot_group_bits must be at most {}",
                layout::MAX_SLOT_GROUP_BITS
            )));
        }
        let (root, buckets, group_bits) =
            Self::open_root(&pool, config.buckets_per_subtable, config.slot_group_bits).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let commit_batches = Arc::new(std::sync::atomic::AtomicU64::new(0));
        tokio::spawn(commit_loop(pool.clone(), rx, commit_batches.clone()));
        let inline_reads = pool.nodes().iter().all(|n| n.completes_inline());
        let inline_calls = pool.nodes().iter().all(|n| n.calls_inline());
        let dht = Dht {
            pool,
            clock,
            root,
            buckets,
            group_bits,
            maxmemory: AtomicU64::new(config.maxmemory),
            evict_at: AtomicU64::new(0),
            spare_started: Mutex::new(None),
            samples: AtomicU64::new(config.samples as u64),
            policy: std::sync::atomic::AtomicU8::new(policy_index(config.policy)),
            hit_batch: config.hit_batch.max(1),
            inline_reads,
            inline_calls,
            owner,
            dirs: (0..HASH_SLOTS).map(|_| RwLock::new(None)).collect(),
            flat: FlatDirs::new(),
            locks: (0..HASH_SLOTS)
                .map(|_| tokio::sync::RwLock::new(()))
                .collect(),
            gates: super::rebuild_gate::RebuildGates::new(HASH_SLOTS),
            partitions: RwLock::new(Vec::new()),
            commits: tx,
            commit_batches,
            hits: Mutex::new(Vec::new()),
            hits_sending: Default::default(),
            accesses_flushing: Default::default(),
            accesses: Mutex::new(Vec::new()),
            inflation: AtomicU64::new(0),
            keys: (0..256).map(|_| AtomicI64::new(0)).collect(),
            volatile: (0..256).map(|_| AtomicI64::new(0)).collect(),
            counters: Counters::default(),
            removed: RwLock::new(None),
            in_doubt: Mutex::new(Vec::new()),
            db_map: (0..=u8::MAX)
                .map(std::sync::atomic::AtomicU8::new)
                .collect(),
            adaptive: super::adaptive::Adaptive::new(config.adaptive_experts.clone()),
        };
        dht.load_db_map().await?;
        dht.recover().await?;
        Ok(Arc::new(dht))
    }

    /// The table's root, buckets per subtable and slot-group bits: the pool's table's
    /// own, or `buckets` and `group_bits` in a table created now.
    async fn open_root(
        pool: &Pool,
        buckets: u32,
        group_bits: u32,
    ) -> Result<(GlobalAddr, u64, u32), DhtError> {
        loop {
            let root = pool.root().await?;
            if root != 0 {
                let addr = GlobalAddr::from_bits(root);
                let mut head = [0u8; layout::ROOT_HEADER as usize];
                pool.read(addr, &mut head).await?;
                if le64(&head, 0) != layout::MAGIC {
                    return Err(corrupt("the pool root does not point at a hash table"));
                }
                let version = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
                if !(layout::OLDEST_VERSION..=layout::VERSION).contains(&version) {
                    return Err(corrupt(format!(
                        "table version {version}, this build reads {} to {}",
                        layout::OLDEST_VERSION,
                        layout::VERSION
                    )));
                }
                if version < layout::VERSION {
                    // This client may write what older ones cannot read: say so first.
                    let word = le64(&head, 8);
                    let upgraded = (word & !0xffff_ffff) | u64::from(layout::VERSION);
                    let tx = Tx {
                        shard: POOL_SHARD,
                        epoch: 0,
                        writes: vec![TxWrite {
                            addr: addr.offset_by(8),
                            expect: Some(word),
                            new: upgraded,
                            in_word_lock: false,
                        }],
                    };
                    match pool.commit(std::slice::from_ref(&tx)).await.remove(0) {
                        TxOutcome::Failed(e) => return Err(e.into()),
                        TxOutcome::Committed => {
                            tracing::info!(
                                from = version,
                                to = layout::VERSION,
                                "upgraded the hash table's version"
                            );
                        }
                        _ => {} // upgraded by another client meanwhile
                    }
                }
                let b = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as u64;
                if !b.is_power_of_two() {
                    return Err(corrupt("bad buckets_per_subtable in the table header"));
                }
                let g = layout::SLOT_GROUP_BITS;
                let bits = u32::from_le_bytes([head[g], head[g + 1], head[g + 2], head[g + 3]]);
                if bits > layout::MAX_SLOT_GROUP_BITS {
                    return Err(corrupt("bad slot_group_bits in the table header"));
                }
                return Ok((addr, b, bits));
            }
            let block = pool.alloc(layout::ROOT_LEN, true).await?;
            let adaptive = pool.alloc(super::adaptive::BLOCK_LEN, true).await?;
            pool.write_all(&[(adaptive.addr, &[0u8; super::adaptive::BLOCK_LEN as usize])])
                .await?;
            let mut bytes = vec![0u8; layout::ROOT_LEN as usize];
            let at = layout::ADAPTIVE_BLOCK as usize;
            bytes[at..at + 8].copy_from_slice(&adaptive.addr.bits().to_le_bytes());
            bytes[0..8].copy_from_slice(&layout::MAGIC.to_le_bytes());
            bytes[8..12].copy_from_slice(&layout::VERSION.to_le_bytes());
            bytes[12..16].copy_from_slice(&buckets.to_le_bytes());
            let g = layout::SLOT_GROUP_BITS;
            bytes[g..g + 4].copy_from_slice(&group_bits.to_le_bytes());
            pool.write_all(&[(block.addr, &bytes)]).await?;
            match pool.set_root(0, block.addr.bits()).await? {
                TxOutcome::Committed => {
                    tracing::info!(root = %block.addr, buckets, slot_group_bits = group_bits, "created the hash table");
                    return Ok((block.addr, buckets as u64, group_bits));
                }
                // Another client created it first: use theirs.
                _ => {
                    pool.free(block);
                    pool.free(adaptive);
                }
            }
        }
    }

    /// Learns which hash slots have directories and counts the keys of owned ones.
    async fn recover(&self) -> Result<(), DhtError> {
        let mut table = vec![0u8; 8 * HASH_SLOTS];
        self.pool
            .read(self.root.offset_by(layout::ROOT_HEADER), &mut table)
            .await?;
        let mut parts = Vec::new();
        let mut keys = 0i64;
        for slot in 0..HASH_SLOTS {
            if le64(&table, slot * 8) == 0 {
                continue;
            }
            parts.push(slot as u16);
            if self.owner.lease(slot as u16).is_some() {
                for (word, meta) in self.scan_words(slot as u16).await? {
                    let Some(obj) = word.object() else { continue };
                    if let Some(dmc_umo::StoredObject { db, .. }) = self.pool.read_any(obj).await? {
                        self.count_key(db, 1, None, Some(meta));
                        keys += 1;
                    }
                }
            }
        }
        tracing::info!(partitions = parts.len(), keys, "hash table opened");
        *self.partitions.write() = parts;
        Ok(())
    }
}
