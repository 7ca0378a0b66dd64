//! Which hash slots this client may write, and under which shard epoch.
//!
//! Logical sharding: every client reads every key, but only the owner of a hash slot
//! writes its part of the table (inserts, updates, deletes, evictions, splits). Each
//! write carries the owning shard's epoch, so a client that lost a slot is fenced by the
//! memory nodes. Until the cluster manager assigns shards, a standalone client owns all
//! slots as shard 0.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::layout::HASH_SLOTS;

/// A logical shard and the epoch at which this client holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub shard: u32,
    pub epoch: u64,
}

/// Read on every write, from every worker thread: plain atomics per slot, no lock.
/// A reassignment stores the shard then the epoch; a writer that reads a mixed pair
/// during a rescale is refused by the memory nodes' epoch fencing, never silently wrong.
pub struct Ownership {
    /// Shard per hash slot; `NONE` when not owned.
    shards: Box<[AtomicU32]>,
    epochs: Box<[AtomicU64]>,
    /// How many slots are owned, so "every slot" (a standalone agent) is one load.
    owned: AtomicU32,
}

const NONE: u32 = u32::MAX;

impl Ownership {
    fn with(lease: Option<Lease>) -> Self {
        Ownership {
            shards: (0..HASH_SLOTS)
                .map(|_| AtomicU32::new(lease.map_or(NONE, |l| l.shard)))
                .collect(),
            epochs: (0..HASH_SLOTS)
                .map(|_| AtomicU64::new(lease.map_or(0, |l| l.epoch)))
                .collect(),
            owned: AtomicU32::new(if lease.is_some() {
                HASH_SLOTS as u32
            } else {
                0
            }),
        }
    }

    /// Owns every slot as `shard` at `epoch`.
    pub fn all(shard: u32, epoch: u64) -> Self {
        Self::with(Some(Lease { shard, epoch }))
    }

    /// Owns nothing (a read-only client).
    pub fn none() -> Self {
        Self::with(None)
    }

    pub fn lease(&self, slot: u16) -> Option<Lease> {
        let shard = self.shards.get(slot as usize)?.load(Ordering::Acquire);
        (shard != NONE).then(|| Lease {
            shard,
            epoch: self.epochs[slot as usize].load(Ordering::Acquire),
        })
    }

    /// Assigns (or with `None` removes) slots `range`.
    pub fn assign(&self, range: std::ops::Range<u16>, lease: Option<Lease>) {
        for s in range {
            let s = s as usize;
            if s >= HASH_SLOTS {
                break;
            }
            let was = match lease {
                Some(l) => {
                    self.epochs[s].store(l.epoch, Ordering::Release);
                    self.shards[s].swap(l.shard, Ordering::AcqRel)
                }
                None => self.shards[s].swap(NONE, Ordering::AcqRel),
            };
            match (was == NONE, lease.is_some()) {
                (true, true) => self.owned.fetch_add(1, Ordering::AcqRel),
                (false, false) => self.owned.fetch_sub(1, Ordering::AcqRel),
                _ => 0,
            };
        }
    }

    /// How many slots are owned.
    pub fn owned_count(&self) -> u32 {
        self.owned.load(Ordering::Acquire)
    }

    /// Whether every slot is owned (a standalone client): no per-key check needed.
    pub fn owns_all(&self) -> bool {
        self.owned_count() == HASH_SLOTS as u32
    }

    /// Slots currently owned.
    pub fn owned(&self) -> Vec<u16> {
        (0..HASH_SLOTS as u16)
            .filter(|s| self.lease(*s).is_some())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assign_and_release() {
        let o = Ownership::none();
        assert_eq!(o.lease(5), None);
        o.assign(0..10, Some(Lease { shard: 2, epoch: 7 }));
        assert_eq!(o.lease(5), Some(Lease { shard: 2, epoch: 7 }));
        o.assign(5..6, None);
        assert_eq!(o.lease(5), None);
        assert_eq!(o.owned().len(), 9);
        assert_eq!(o.owned_count(), 9);
        assert!(Ownership::all(0, 1).owns_all() && !o.owns_all());
    }
}
