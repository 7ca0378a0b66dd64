//! The write gate: every operation that changes pool memory (object writes, slot
//! commits, 2PC commits, fetch-and-add, recovery repairs) holds a permit for as long
//! as its verbs may land, so that this client can
//!
//! * **freeze** a region: new writes to it wait, reads go on (the cluster manager
//!   swaps a region's primary, or finishes filling a new copy, while no write lands);
//! * **drain**: wait until every write that started before a change of the region map
//!   has finished, so that no write that chose its copies from the old map lands after
//!   this client reports the new one applied.
//!
//! A permit costs two atomic increments on the hot path and no lock: writers count
//! themselves into one of two phases; a drain flips the phase and waits for the old
//! one to empty, so a steady stream of new writers cannot starve it. Called by every
//! mutating path of the pool and by `place_regions`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dmc_verbs::RegionId;

use crate::error::UmoError;

/// The longest a write waits for a frozen region (a role swap takes milliseconds).
pub(super) const FROZEN_WAIT: Duration = Duration::from_secs(2);

/// Regions are numbered by `u16`: one bit each.
const WORDS: usize = (1 << 16) / 64;

pub(super) struct WriteGate {
    /// Which of `inflight` new writers count themselves in.
    phase: AtomicUsize,
    inflight: [Padded; 2],
    /// One bit per frozen region.
    frozen: Box<[AtomicU64]>,
    /// Any bit of `frozen` is set (the hot path reads only this).
    any_frozen: AtomicBool,
    thawed: tokio::sync::Notify,
    /// Writes that found a region frozen and waited.
    frozen_waits: AtomicU64,
    /// One drain at a time: each flips the phase once.
    draining: tokio::sync::Mutex<()>,
}

/// A counter on its own cache lines: the two phases are written by different writers.
#[derive(Default)]
#[repr(align(128))]
struct Padded(AtomicUsize);

impl std::ops::Deref for Padded {
    type Target = AtomicUsize;
    fn deref(&self) -> &AtomicUsize {
        &self.0
    }
}

/// Held by a write while its verbs may land.
pub(super) struct Permit<'a> {
    gate: &'a WriteGate,
    phase: usize,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.gate.inflight[self.phase].fetch_sub(1, Ordering::SeqCst);
    }
}

impl WriteGate {
    pub(super) fn new() -> Self {
        WriteGate {
            phase: AtomicUsize::new(0),
            inflight: [Padded::default(), Padded::default()],
            frozen: (0..WORDS).map(|_| AtomicU64::new(0)).collect(),
            any_frozen: AtomicBool::new(false),
            thawed: tokio::sync::Notify::new(),
            frozen_waits: AtomicU64::new(0),
            draining: tokio::sync::Mutex::new(()),
        }
    }

    /// Writes that found a region frozen and waited, so far.
    pub(super) fn frozen_waits(&self) -> u64 {
        self.frozen_waits.load(Ordering::Relaxed)
    }

    pub(super) fn is_frozen(&self, region: RegionId) -> bool {
        let r = region as usize;
        self.frozen[r / 64].load(Ordering::SeqCst) & (1 << (r % 64)) != 0
    }

    /// A permit to write the regions of `regions`, or the first of them that is frozen
    /// (wait with [`thawed`](Self::thawed) and try again).
    pub(super) fn try_enter<I>(&self, regions: I) -> Result<Permit<'_>, RegionId>
    where
        I: IntoIterator<Item = RegionId>,
    {
        let phase = self.phase.load(Ordering::SeqCst) & 1;
        self.inflight[phase].fetch_add(1, Ordering::SeqCst);
        let permit = Permit { gate: self, phase };
        // Counted first, checked second: a freeze sets its bit before it drains, so
        // either this writer sees the bit or the drain waits for this writer.
        if self.any_frozen.load(Ordering::SeqCst)
            && let Some(r) = regions.into_iter().find(|r| self.is_frozen(*r))
        {
            return Err(r);
        }
        Ok(permit)
    }

    /// Waits until `region` is not frozen, for at most [`FROZEN_WAIT`]; fails with
    /// [`UmoError::Frozen`] after that.
    ///
    /// The wait is bounded because a waiting write may hold what the map change that
    /// thaws the region needs: an agent that applies a map moving a shard waits for
    /// that shard's writes, and one of them may wait here for a later map.
    pub(super) async fn thawed(&self, region: RegionId) -> Result<(), UmoError> {
        self.frozen_waits.fetch_add(1, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + FROZEN_WAIT;
        loop {
            let thawed = self.thawed.notified();
            tokio::pin!(thawed);
            thawed.as_mut().enable();
            if !self.is_frozen(region) {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, thawed).await.is_err() {
                return Err(UmoError::Frozen(region));
            }
        }
    }

    /// A permit to write `region`, waiting while it is frozen (see
    /// [`thawed`](Self::thawed)).
    pub(super) async fn enter(&self, region: RegionId) -> Result<Permit<'_>, UmoError> {
        loop {
            match self.try_enter([region]) {
                Ok(p) => return Ok(p),
                Err(r) => self.thawed(r).await?,
            }
        }
    }

    /// Freezes exactly the regions of `frozen` (thawing the others) and reports whether
    /// the set changed. A newly frozen region still has writes in flight until the
    /// next [`drain`](Self::drain).
    pub(super) fn set_frozen(&self, frozen: &[RegionId]) -> bool {
        let mut want = vec![0u64; WORDS];
        for &r in frozen {
            want[r as usize / 64] |= 1 << (r as usize % 64);
        }
        let mut changed = false;
        let mut thawed = false;
        for (word, want) in self.frozen.iter().zip(&want) {
            let old = word.swap(*want, Ordering::SeqCst);
            changed |= old != *want;
            thawed |= old & !want != 0;
        }
        self.any_frozen.store(!frozen.is_empty(), Ordering::SeqCst);
        if thawed {
            self.thawed.notify_waiters();
        }
        changed
    }

    /// Waits until every write that held a permit when this was called has finished.
    pub(super) async fn drain(&self) {
        let _one = self.draining.lock().await;
        let old = self.phase.fetch_add(1, Ordering::SeqCst) & 1;
        let started = Instant::now();
        let mut warned = Duration::from_secs(1);
        let mut pause = Duration::from_micros(20);
        while self.inflight[old].load(Ordering::SeqCst) != 0 {
            if started.elapsed() >= warned {
                tracing::warn!(
                    waited = ?started.elapsed(),
                    writes = self.inflight[old].load(Ordering::SeqCst),
                    "still draining pool writes in flight"
                );
                warned *= 2;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_frozen_region_holds_its_writers_until_thawed_and_drains_wait_for_permits() {
        let gate = Arc::new(WriteGate::new());
        assert!(gate.try_enter([3]).is_ok());
        assert!(gate.set_frozen(&[3]));
        assert!(!gate.set_frozen(&[3]), "no change");
        assert_eq!(gate.try_enter([4, 3]).err(), Some(3));
        assert!(gate.try_enter([4, 5]).is_ok(), "other regions write on");

        let writer = {
            let gate = gate.clone();
            tokio::spawn(async move {
                let _p = gate.enter(3).await.unwrap();
            })
        };
        tokio::task::yield_now().await;
        assert!(!writer.is_finished(), "waits while region 3 is frozen");
        gate.set_frozen(&[]);
        writer.await.unwrap();

        let held = gate.try_enter([7]).ok().unwrap();
        let drain = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.drain().await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!drain.is_finished(), "a permit from before is still held");
        let later = gate.try_enter([7]).ok().unwrap();
        drop(held);
        drain.await.unwrap();
        drop(later);
        gate.drain().await;
    }
}
