//! Which hash slots this client may write, and under which shard epoch.
//!
//! Logical sharding: every client reads every key, but only the owner of a hash slot
//! writes its part of the table (inserts, updates, deletes, evictions, splits). Each
//! write carries the owning shard's epoch, so a client that lost a slot is fenced by the
//! memory nodes. Until the cluster manager assigns shards, a standalone client owns all
//! slots as shard 0.

use parking_lot::RwLock;

use crate::layout::HASH_SLOTS;

/// A logical shard and the epoch at which this client holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub shard: u32,
    pub epoch: u64,
}

pub struct Ownership {
    slots: RwLock<Vec<Option<Lease>>>,
}

impl Ownership {
    /// Owns every slot as `shard` at `epoch`.
    pub fn all(shard: u32, epoch: u64) -> Self {
        Ownership {
            slots: RwLock::new(vec![Some(Lease { shard, epoch }); HASH_SLOTS]),
        }
    }

    /// Owns nothing (a read-only client).
    pub fn none() -> Self {
        Ownership {
            slots: RwLock::new(vec![None; HASH_SLOTS]),
        }
    }

    pub fn lease(&self, slot: u16) -> Option<Lease> {
        self.slots.read().get(slot as usize).copied().flatten()
    }

    /// Assigns (or with `None` removes) slots `range`.
    pub fn assign(&self, range: std::ops::Range<u16>, lease: Option<Lease>) {
        let mut slots = self.slots.write();
        for s in range {
            if let Some(e) = slots.get_mut(s as usize) {
                *e = lease;
            }
        }
    }

    /// Slots currently owned.
    pub fn owned(&self) -> Vec<u16> {
        self.slots
            .read()
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.map(|_| i as u16))
            .collect()
    }
}
