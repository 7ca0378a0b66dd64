//! Blocks for objects and tables: allocation from size classes (claiming segments,
//! growing the pool when none is left), frees after the grace period, segment draining,
//! and the pool-wide live-byte counter. Called by object writes and the hash table.
//! A block of a newly carved segment is never handed out before the segment's claim
//! committed on its region's segment table: clients sharing a pool would otherwise
//! carve the same segment.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dmc_verbs::RegionId;

use super::{POOL_SHARD, Pool, Tx, TxOutcome, TxWrite};
use crate::addr::GlobalAddr;
use crate::alloc::{Block, Claimed, Need};
use crate::error::UmoError;
use crate::layout;

/// Live bytes this client changed since it last told the pool-wide counter; told at
/// once when it passes this.
const USAGE_FLUSH: i64 = 256 << 10;
/// Bytes of the next block of a class loaded ahead of its allocation: an object's
/// header and a short value (a long value's write streams anyway).
pub(super) const PREFETCH_HEAD: usize = 128;

/// The frees a [`Pool::defer_frees`] scope holds back, and whose pool it is.
struct Deferred {
    pool: usize,
    blocks: parking_lot::Mutex<Vec<Block>>,
}

tokio::task_local! {
    static DEFERRED: Deferred;
}

impl Pool {
    /// Allocates a block of at least `len` bytes, growing the pool if needed.
    pub async fn alloc(&self, len: u64, aligned: bool) -> Result<Block, UmoError> {
        if len > self.max_block() as u64 {
            return Err(UmoError::TooLarge(len));
        }
        let mut reclaiming_since: Option<Instant> = None;
        // Blocks other threads hold ready, and their frees, are taken back once before
        // waiting for limbo or growing the pool.
        let mut flushed = false;
        loop {
            match self.take_block(len, aligned) {
                Ok((block, claim)) => {
                    if let Some(c) = claim {
                        let won = self.claim_segment(c).await;
                        let mut alloc = self.alloc.lock();
                        match won {
                            Ok(true) => alloc.confirm_claim(block),
                            // Another client claimed it first: forget it, take another.
                            Ok(false) => {
                                alloc.lost_claim(block);
                                continue;
                            }
                            Err(e) => {
                                alloc.lost_claim(block);
                                return Err(e);
                            }
                        }
                    }
                    if self.count_usage(block) {
                        self.sync_usage().await;
                    }
                    return Ok(block);
                }
                // Another task of this client is claiming the class's next segment.
                Err(Need::Claiming) => tokio::time::sleep(Duration::from_micros(20)).await,
                // Its blocks in limbo come back within the grace period (unless they
                // land in a segment being emptied): the caller evicts and retries.
                Err(Need::Reclaiming | Need::Region) if !flushed => {
                    flushed = true;
                    self.flush_block_caches();
                }
                Err(Need::Reclaiming) => {
                    let since = *reclaiming_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > self.config.grace {
                        return Err(UmoError::OutOfMemory(
                            "no free block of the class after a grace period".into(),
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(Need::Region) => {
                    let grown = self.grow().await;
                    let at_limit = matches!(grown, Err(UmoError::OutOfMemory(_)));
                    self.at_limit.store(at_limit, Ordering::Relaxed);
                    self.alloc.lock().set_scarce(at_limit);
                    grown?
                }
            }
        }
    }

    /// One try at the allocator: a block, with the claim of a new segment to persist.
    /// Starts loading the class's next block.
    fn take_block(&self, len: u64, aligned: bool) -> Result<(Block, Option<Claimed>), Need> {
        let now = Instant::now();
        let (got, next) = {
            let mut allocator = self.allocator(now);
            let got = allocator.alloc(len, aligned, now);
            let next = got
                .as_ref()
                .ok()
                .and_then(|(b, _)| Some((allocator.next_block(b.class)?, b.size())));
            (got, next)
        };
        // The class's next block is cold (back from limbo after its grace period, or
        // never touched in its segment): start loading its head now, so the next write
        // of this size does not stall on it.
        if let Some((next, size)) = next {
            self.prefetch_copies(next, (size as usize).min(PREFETCH_HEAD));
        }
        got
    }

    /// Counts `block`'s bytes as live; true when the pool-wide counter is due an
    /// update.
    pub(super) fn count_usage(&self, block: Block) -> bool {
        let d = self
            .usage_delta
            .fetch_add(block.size() as i64, Ordering::Relaxed);
        d.abs() >= USAGE_FLUSH
    }

    /// Records a segment claim in its region's segment table, if no other client (an
    /// agent sharing the pool) claimed the segment first.
    async fn claim_segment(&self, c: Claimed) -> Result<bool, UmoError> {
        let tx = Tx {
            shard: POOL_SHARD,
            epoch: 0,
            writes: vec![TxWrite {
                addr: GlobalAddr::new(c.region, c.entry_offset),
                expect: Some(0),
                new: c.entry,
                in_word_lock: false,
            }],
        };
        loop {
            match self.commit(std::slice::from_ref(&tx)).await.remove(0) {
                TxOutcome::Committed => return Ok(true),
                TxOutcome::Conflict { .. } => return Ok(false),
                TxOutcome::Locked => tokio::time::sleep(Duration::from_micros(50)).await,
                TxOutcome::StaleEpoch { current } => {
                    return Err(UmoError::Config(format!(
                        "segment claims are fenced at pool epoch {current}"
                    )));
                }
                TxOutcome::Failed(e) => return Err(e),
            }
        }
    }

    /// Bytes of this client's blocks per region (see `Allocator::used_by_region`).
    pub fn used_by_region(&self) -> Vec<(RegionId, u64)> {
        self.alloc.lock().used_by_region()
    }

    /// Segments this client can fill without a new region.
    pub fn spare_segments(&self) -> usize {
        self.alloc.lock().spare_segments()
    }

    /// Starts emptying the segment of this client with the fewest live blocks (its
    /// free blocks are held back from its class) and returns it (start, length):
    /// evicting the keys there frees a whole segment, for any class, when the pool
    /// cannot grow.
    pub fn drain_sparsest_segment(&self) -> Option<(GlobalAddr, u64)> {
        // Blocks cached for threads count as live: given back, a segment can empty.
        self.flush_block_caches();
        let now = Instant::now();
        self.allocator(now).drain_sparsest_segment(now)
    }

    /// Whether the last attempt to grow the pool was refused (maxmemory or full nodes).
    pub fn at_limit(&self) -> bool {
        self.at_limit.load(Ordering::Relaxed)
    }

    /// Frees a block after the grace period; inside [`defer_frees`](Self::defer_frees)
    /// of this pool, when that scope ends.
    pub fn free(&self, block: Block) {
        let mine = self as *const Pool as usize;
        if DEFERRED
            .try_with(|d| {
                let deferring = d.pool == mine;
                if deferring {
                    d.blocks.lock().push(block);
                }
                deferring
            })
            .unwrap_or(false)
        {
            return;
        }
        self.release(block);
    }

    /// Runs `work` with this pool's frees on its task held back, and returns them: a
    /// transaction that stages its writes frees what they replace only once its commit
    /// made the replacement visible ([`free_now`](Self::free_now)), and never if it did
    /// not commit. Nested, the outer scope keeps them.
    pub async fn defer_frees<F: Future>(&self, work: F) -> (F::Output, Vec<Block>) {
        let mine = self as *const Pool as usize;
        if DEFERRED.try_with(|d| d.pool == mine).unwrap_or(false) {
            return (work.await, Vec::new());
        }
        let scope = Deferred {
            pool: mine,
            blocks: parking_lot::Mutex::new(Vec::new()),
        };
        DEFERRED
            .scope(scope, async {
                let out = work.await;
                let blocks = DEFERRED.with(|d| std::mem::take(&mut *d.blocks.lock()));
                (out, blocks)
            })
            .await
    }

    /// Frees blocks [`defer_frees`](Self::defer_frees) held back, even inside another
    /// deferring scope.
    pub fn free_now(&self, blocks: Vec<Block>) {
        for b in blocks {
            self.release(b);
        }
    }

    /// Adds this client's pending live-byte changes to the pool-wide counter and reads
    /// it back (the maintenance tick calls this; so does a large change).
    pub async fn sync_usage(&self) {
        let d = self.usage_delta.swap(0, Ordering::Relaxed);
        let told = self.faa_mirrored(self.usage_counter(), d as u64).await;
        self.usage_told(d, told);
    }

    /// [`sync_usage`](Self::sync_usage) right now, if the superblock's copies complete
    /// verbs inline; otherwise nothing.
    pub(super) fn sync_usage_now(&self) {
        let d = self.usage_delta.swap(0, Ordering::Relaxed);
        match self.faa_now(self.usage_counter(), d as u64) {
            Some(told) => self.usage_told(d, told),
            None => {
                self.usage_delta.fetch_add(d, Ordering::Relaxed);
            }
        }
    }

    fn usage_counter(&self) -> GlobalAddr {
        GlobalAddr::new(self.config.super_region, layout::SB_USED)
    }

    /// Records the pool-wide counter's answer to adding `d` (its old value), or keeps
    /// `d` for the next try if it failed.
    fn usage_told(&self, d: i64, told: Result<u64, UmoError>) {
        match told {
            Ok(old) => self
                .usage_seen
                .store(old.wrapping_add(d as u64), Ordering::Relaxed),
            Err(e) => {
                self.usage_delta.fetch_add(d, Ordering::Relaxed);
                tracing::warn!(error = %e, "updating the pool's usage counter failed");
            }
        }
    }

    /// Bytes in live blocks of the whole pool (every client's), as of this client's
    /// last [`sync_usage`](Self::sync_usage) plus its own changes since.
    pub fn used_bytes(&self) -> u64 {
        let seen = self.usage_seen.load(Ordering::Relaxed) as i64;
        (seen + self.usage_delta.load(Ordering::Relaxed)).max(0) as u64
    }
}
