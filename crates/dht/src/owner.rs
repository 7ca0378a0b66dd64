//! Which hash slots this client may write, and under which shard epoch.
//!
//! Logical sharding: every client reads every key, but only the owner of a hash slot
//! writes its part of the table (inserts, updates, deletes, evictions, splits). Each
//! two-phase commit carries the owning shard's epoch, so a client that lost a slot is
//! fenced by the memory nodes. One-sided single-key writes cannot be refused by a node:
//! each runs inside a [`WriteGuard`] taken under the lease, and giving slots up
//! ([`Ownership::release`]) waits for the guards of those slots to end, so after it
//! returns this client writes none of them (the agent then tells the new owner, which
//! writes only after that). Until the cluster manager assigns shards, a standalone
//! client owns all slots as shard 0.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

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
    /// Per hash slot, everything a write checks, in one 16-byte record: a write
    /// touches one cache line of ownership state, not one per field.
    slots: Box<[SlotOwner]>,
    /// How many slots are owned, so "every slot" (a standalone agent) is one load.
    owned: AtomicU32,
    /// Microseconds after `base` from which no write starts (the agent's lease ends:
    /// its heartbeats stopped being accepted); 0 = no deadline (no manager).
    writable_until: AtomicU64,
    base: std::time::Instant,
}

#[repr(C, align(16))]
struct SlotOwner {
    /// The shard holding the slot; `NONE` when not owned.
    shard: AtomicU32,
    /// One-sided writes in flight ([`WriteGuard`]s).
    writing: AtomicU32,
    epoch: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<SlotOwner>() == 16);

/// A one-sided write of a slot in flight under its lease; [`Ownership::release`] waits
/// for it to end.
#[must_use]
pub struct WriteGuard<'a> {
    count: &'a AtomicU32,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
    }
}

const NONE: u32 = u32::MAX;

impl Ownership {
    fn with(lease: Option<Lease>) -> Self {
        Ownership {
            slots: (0..HASH_SLOTS)
                .map(|_| SlotOwner {
                    shard: AtomicU32::new(lease.map_or(NONE, |l| l.shard)),
                    writing: AtomicU32::new(0),
                    epoch: AtomicU64::new(lease.map_or(0, |l| l.epoch)),
                })
                .collect(),
            owned: AtomicU32::new(if lease.is_some() {
                HASH_SLOTS as u32
            } else {
                0
            }),
            writable_until: AtomicU64::new(0),
            base: std::time::Instant::now(),
        }
    }

    /// Lets writes start until `until` (a lease renewed): the agent's manager
    /// heartbeat calls this, so an agent cut off from the manager stops writing before
    /// the manager gives its shards away.
    pub fn renew_until(&self, until: std::time::Instant) {
        // Stored one past the microsecond, so 0 keeps meaning "no deadline" and a
        // deadline at `base` itself still expires.
        let us = until.saturating_duration_since(self.base).as_micros() as u64;
        self.writable_until.fetch_max(us + 1, Ordering::SeqCst);
    }

    /// Whether this client's lease has run out (it may not start writes).
    pub fn lease_expired(&self) -> bool {
        let until = self.writable_until.load(Ordering::Relaxed);
        until != 0 && self.base.elapsed().as_micros() as u64 + 1 >= until
    }

    /// Starts a one-sided write of `slot` if this client still holds it under `lease`.
    /// The count goes up before the lease is checked, and [`release`](Self::release)
    /// clears the lease before it reads the count (both sequentially consistent), so
    /// either the release waits for this write or this write sees the release.
    pub fn begin_write(&self, slot: u16, lease: Lease) -> Option<WriteGuard<'_>> {
        let owner = self.slots.get(slot as usize)?;
        owner.writing.fetch_add(1, Ordering::SeqCst);
        let guard = WriteGuard {
            count: &owner.writing,
        };
        let held = owner.shard.load(Ordering::SeqCst) == lease.shard
            && owner.epoch.load(Ordering::SeqCst) == lease.epoch
            && !self.lease_expired();
        held.then_some(guard)
    }

    /// Gives up slots `range` and waits until no one-sided write of them is in flight:
    /// from its return this client writes none of them. A write in flight ends within
    /// its verbs' timeout, so this returns.
    pub async fn release(&self, range: std::ops::Range<u16>) {
        self.assign(range.clone(), None);
        let started = std::time::Instant::now();
        let mut warned = false;
        for s in range {
            let Some(owner) = self.slots.get(s as usize) else {
                break;
            };
            while owner.writing.load(Ordering::SeqCst) != 0 {
                if !warned && started.elapsed() > Duration::from_secs(1) {
                    tracing::warn!(slot = s, "waiting for writes in flight to a released slot");
                    warned = true;
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
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
        let owner = self.slots.get(slot as usize)?;
        let shard = owner.shard.load(Ordering::Acquire);
        (shard != NONE).then(|| Lease {
            shard,
            epoch: owner.epoch.load(Ordering::Acquire),
        })
    }

    /// Starts loading `slot`'s record into the cache (a hint), for a write to come.
    pub fn prefetch(&self, slot: u16) {
        if let Some(owner) = self.slots.get(slot as usize) {
            dmc_verbs::memory::prefetch_line(std::ptr::from_ref(owner).cast());
        }
    }

    /// Assigns (or with `None` removes) slots `range`.
    pub fn assign(&self, range: std::ops::Range<u16>, lease: Option<Lease>) {
        for s in range {
            let Some(owner) = self.slots.get(s as usize) else {
                break;
            };
            let was = match lease {
                Some(l) => {
                    owner.epoch.store(l.epoch, Ordering::SeqCst);
                    owner.shard.swap(l.shard, Ordering::SeqCst)
                }
                None => owner.shard.swap(NONE, Ordering::SeqCst),
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
        let lease = Lease { shard: 2, epoch: 7 };
        assert!(
            o.begin_write(5, lease).is_some(),
            "no deadline without a manager"
        );
        assert!(o.begin_write(5, Lease { shard: 2, epoch: 6 }).is_none());
        // A lease that ran out stops writes until it is renewed.
        o.renew_until(std::time::Instant::now());
        assert!(o.lease_expired() && o.begin_write(5, lease).is_none());
        o.renew_until(std::time::Instant::now() + std::time::Duration::from_secs(60));
        assert!(!o.lease_expired() && o.begin_write(5, lease).is_some());
        o.assign(5..6, None);
        assert_eq!(o.lease(5), None);
        assert_eq!(o.owned().len(), 9);
        assert_eq!(o.owned_count(), 9);
        assert!(Ownership::all(0, 1).owns_all() && !o.owns_all());
    }
}
