//! Per-thread shards of the allocator's hot path, so that runtime threads writing at
//! the same time rarely meet on the allocator's lock: a thread allocates from a few
//! blocks its shard took from the allocator at once ([`REFILL`]), and frees into its
//! shard, which hands its blocks to the allocator a batch at a time ([`FREE_BATCH`]).
//! Measured on two runtime threads (`SET -P 16`): one lock shared by both per
//! allocation and two per free had them parking on each other (futex waits and
//! reschedule IPIs in the profile).
//!
//! A cached block counts as allocated in the allocator, but not in the pool-wide live
//! bytes, which count what the pool hands out. [`Pool::flush_block_caches`] gives every
//! shard's blocks back (the maintenance tick, statistics, draining a segment, retiring
//! a region). A block in a shard's freed list reaches the allocator's limbo later than
//! it was freed, so its grace period only lengthens.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::Pool;
use super::allocation::PREFETCH_HEAD;
use crate::addr::GlobalAddr;
use crate::alloc::{Allocator, Block};
use crate::classes;
use crate::error::UmoError;

/// Shards per pool; threads take them in turn, so up to this many threads never share.
pub(super) const SHARDS: usize = 16;
/// Blocks of a class a shard takes from the allocator at once, at most; and at most
/// [`REFILL_BYTES`] of them, so large classes do not sit idle in a cache.
const REFILL: usize = 8;
const REFILL_BYTES: usize = 64 << 10;
/// Frees a shard hands to the allocator at once.
const FREE_BATCH: usize = 32;

/// One thread's share, on a cache line of its own.
#[repr(align(128))]
#[derive(Default)]
pub(super) struct Shard(parking_lot::Mutex<ShardState>);

#[derive(Default)]
struct ShardState {
    /// Per class in use: blocks to hand out, the next one last.
    ready: Vec<(u8, Vec<GlobalAddr>)>,
    /// Blocks freed on this thread, not yet in the allocator's limbo.
    freed: Vec<Block>,
}

impl ShardState {
    fn ready_of(&mut self, class: u8) -> &mut Vec<GlobalAddr> {
        let at = match self.ready.iter().position(|(c, _)| *c == class) {
            Some(at) => at,
            None => {
                self.ready.push((class, Vec::with_capacity(REFILL)));
                self.ready.len() - 1
            }
        };
        &mut self.ready[at].1
    }
}

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MY_SHARD: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
}

/// This thread's shard index.
fn my_shard() -> usize {
    MY_SHARD.try_with(|s| *s).unwrap_or(0)
}

impl Pool {
    /// [`alloc`](Self::alloc) right now, from this thread's cached blocks, refilled from
    /// the class's free blocks or current segment; `None` when that would wait (a
    /// segment to claim or a region to add, no block back from limbo yet).
    pub fn alloc_now(&self, len: u64, aligned: bool) -> Option<Result<Block, UmoError>> {
        if len > self.max_block() as u64 {
            return Some(Err(UmoError::TooLarge(len)));
        }
        let class = classes::best_fit(len, self.max_block(), aligned)?;
        let (addr, next) = {
            let mut shard = self.shards[my_shard()].0.lock();
            if shard.ready_of(class).is_empty() {
                // This thread's frees go to the allocator in the same visit.
                let now = Instant::now();
                let mut alloc = self.alloc.lock();
                hand_over(&mut alloc, &mut shard.freed, now);
                let n = (REFILL_BYTES / classes::size(class) as usize).clamp(1, REFILL);
                alloc.alloc_ready(len, aligned, now, n, shard.ready_of(class));
            }
            let ready = shard.ready_of(class);
            (ready.pop()?, ready.last().copied())
        };
        let block = Block { addr, class };
        // The class's next block is cold (back from limbo after its grace period, or
        // never touched in its segment): start loading its head now, so the next write
        // of this size does not stall on it.
        if let Some(next) = next {
            self.prefetch_copies(next, (block.size() as usize).min(PREFETCH_HEAD));
        }
        if self.count_usage(block) {
            // Over the network the next awaited allocation or the maintenance tick
            // tells the counter instead.
            self.sync_usage_now();
        }
        Some(Ok(block))
    }

    /// Frees `block` into this thread's shard; every [`FREE_BATCH`] of them go to the
    /// allocator's limbo together.
    pub(super) fn release(&self, block: Block) {
        self.usage_delta
            .fetch_sub(block.size() as i64, Ordering::Relaxed);
        let mut shard = self.shards[my_shard()].0.lock();
        shard.freed.push(block);
        if shard.freed.len() >= FREE_BATCH {
            hand_over(&mut self.alloc.lock(), &mut shard.freed, Instant::now());
        }
    }

    /// Gives every shard's cached blocks back to the allocator and its freed blocks to
    /// the allocator's limbo.
    pub fn flush_block_caches(&self) {
        let mut ready = Vec::new();
        let mut freed = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.0.lock();
            for (class, blocks) in &mut shard.ready {
                ready.extend(blocks.drain(..).map(|addr| Block {
                    addr,
                    class: *class,
                }));
            }
            freed.append(&mut shard.freed);
        }
        if ready.is_empty() && freed.is_empty() {
            return;
        }
        let mut alloc = self.alloc.lock();
        for block in ready {
            alloc.give_back(block);
        }
        hand_over(&mut alloc, &mut freed, Instant::now());
    }

    /// The allocator, with this thread's freed blocks moved into its limbo first.
    pub(super) fn allocator(&self, now: Instant) -> parking_lot::MutexGuard<'_, Allocator> {
        let mut shard = self.shards[my_shard()].0.lock();
        let mut alloc = self.alloc.lock();
        hand_over(&mut alloc, &mut shard.freed, now);
        alloc
    }
}

/// Moves a shard's freed blocks into the allocator's limbo, stamped `now`.
fn hand_over(alloc: &mut Allocator, freed: &mut Vec<Block>, now: Instant) {
    for block in freed.drain(..) {
        alloc.free(block, now);
    }
}
