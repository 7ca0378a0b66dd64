//! The region placements the cluster manager decides, applied by this client: a failed
//! memory node's copies dropped (a backup promoted), a primary moved to a backup
//! (migration), a new copy being filled (re-replication), a region frozen while the
//! manager swaps its roles or finishes a fill. Applying a change drains the writes in
//! flight, so when the caller reports the map applied, no write that chose its copies
//! from the old placement can still land.
//!
//! While a region has a copy being filled, this client logs which [`FILL_CHUNK`]s of
//! it every write touched; the agent reports the log with its map acknowledgements, and
//! the manager copies those chunks again (a chunk the manager copied while a write
//! raced it may hold the older bytes): in rounds while writes go on, then once more
//! with the region frozen. A report holds only chunks of writes that have landed: the
//! log is sealed before each drain, and what is logged after waits for the next map.
//!
//! Called by the agent's map watcher; the write paths call [`DirtyLog::mark`].

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};

use dmc_verbs::{NodeId, RegionId};
use parking_lot::Mutex;

use super::Pool;
use crate::error::UmoError;
use crate::layout::RegionRecord;

/// The unit of a region copy's fill, and of the chunks writes mark dirty during one.
pub const FILL_CHUNK: u64 = 64 << 10;

/// Where a region's copies are and what the manager is doing with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub region: RegionId,
    pub record: RegionRecord,
    /// Nodes whose copy is being filled: written, never read.
    pub filling: Vec<NodeId>,
    /// New writes to the region wait; reads go on.
    pub frozen: bool,
}

/// Chunks (of [`FILL_CHUNK`] bytes) of a region this client wrote while the region had
/// a copy being filled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirtyChunks {
    pub region: RegionId,
    pub chunks: Vec<u32>,
}

/// The chunks written per filling region: `chunks` since the last placement, `ready`
/// (to report) those of writes that have all landed.
#[derive(Default)]
pub(super) struct DirtyLog {
    any: AtomicBool,
    chunks: Mutex<HashMap<RegionId, BTreeSet<u32>>>,
    ready: Mutex<HashMap<RegionId, BTreeSet<u32>>>,
}

impl DirtyLog {
    /// Moves the chunks logged so far to `ready`: called before a drain, so that once
    /// the drain returns every write they came from has landed (a write logs its chunks
    /// before its verbs, inside its permit). Chunks of writes that start later stay
    /// for the next report.
    fn seal(&self) {
        let logged = std::mem::take(&mut *self.chunks.lock());
        let mut ready = self.ready.lock();
        for (region, chunks) in logged {
            ready.entry(region).or_default().extend(chunks);
        }
    }
}

impl DirtyLog {
    /// Records a write of `len` bytes at `offset` of a region being filled.
    pub(super) fn mark(&self, region: RegionId, offset: u64, len: u64) {
        let first = (offset / FILL_CHUNK) as u32;
        let last = ((offset + len.max(1) - 1) / FILL_CHUNK) as u32;
        self.chunks
            .lock()
            .entry(region)
            .or_default()
            .extend(first..=last);
    }

    /// Whether any region has a copy being filled.
    pub(super) fn active(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }
}

impl Pool {
    /// Follows the manager's placements (see the module doc): regions this client
    /// knows or not yet are served by the copies given from now on; the frozen ones
    /// take no new writes; and when anything changed, the writes in flight are drained
    /// before this returns. A copy to fill on a node this client has no connection to
    /// is an error (the rest is applied): its writes could not reach that copy.
    pub async fn place_regions(&self, placements: &[Placement]) -> Result<(), UmoError> {
        let held_before = self.nodes_holding_copies();
        let mut changed = false;
        let mut unreachable = Vec::new();
        for p in placements {
            let mut entry = match self.entry_for(p.region, &p.record) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(region = p.region, error = %e, "a placement names no node this client knows");
                    continue;
                }
            };
            for n in &p.filling {
                match self.nodes.index_of(*n).as_ref() {
                    Some(&i) => entry.filling.push(i),
                    None => unreachable.push((p.region, *n)),
                }
            }
            let known = self
                .regions
                .read()
                .get(p.region as usize)
                .cloned()
                .flatten();
            // A copy this client starts to fill is a new file on its node, even where
            // the node held the region before (it failed and came back, or was
            // drained): what this client mapped of the old one is no copy any more.
            for &i in &entry.filling {
                if !known.as_ref().is_some_and(|k| k.filling.contains(&i))
                    && let Some(node) = self.nodes.get(i)
                {
                    node.forget_region(p.region);
                }
            }
            if known.as_ref() != Some(&entry) {
                if known.is_some() {
                    tracing::info!(region = p.region, primary = p.record.primary, backups = ?p.record.backups,
                        filling = ?p.filling, "the region's copies changed");
                }
                self.set_entry(&mut self.regions.write(), p.region, entry);
                changed = true;
            }
        }
        let frozen: Vec<RegionId> = placements
            .iter()
            .filter(|p| p.frozen)
            .map(|p| p.region)
            .collect();
        changed |= self.gate.set_frozen(&frozen);
        let filling: BTreeSet<RegionId> = placements
            .iter()
            .filter(|p| !p.filling.is_empty())
            .map(|p| p.region)
            .collect();
        self.dirty.any.store(!filling.is_empty(), Ordering::Relaxed);
        self.dirty
            .chunks
            .lock()
            .retain(|region, _| filling.contains(region));
        self.dirty
            .ready
            .lock()
            .retain(|region, _| filling.contains(region));
        // A node that holds no copy any more was failed over (or drained): its
        // connection goes now, so the writes in flight to it fail and are retried on
        // the new copies at once (the drain below would otherwise wait out their
        // timeouts), and nothing still queued for it lands after the manager refills it.
        let held_after = self.nodes_holding_copies();
        for n in held_before.difference(&held_after) {
            if let Some(node) = self.nodes.get(*n) {
                node.abort().await;
            }
        }
        if changed {
            self.placed.notify_waiters();
        }
        // While a copy is being filled every map is a report of the chunks written:
        // the manager may bump the map only to collect them (its pre-copy rounds).
        if changed || !filling.is_empty() {
            self.dirty.seal();
            self.gate.drain().await;
        }
        match unreachable.is_empty() {
            true => Ok(()),
            false => Err(UmoError::Config(format!(
                "copies to fill on memory nodes this client has no connection to \
                 (region, node): {unreachable:?}"
            ))),
        }
    }

    /// The nodes (by index) holding or filling a copy of any region.
    fn nodes_holding_copies(&self) -> BTreeSet<usize> {
        self.regions
            .read()
            .iter()
            .flatten()
            .flat_map(|e| e.copies().collect::<Vec<_>>())
            .collect()
    }

    /// Takes the log of chunks written in regions being filled whose writes have all
    /// landed (those logged before the last `place_regions` drained; see the module
    /// doc).
    pub fn take_dirty(&self) -> Vec<DirtyChunks> {
        std::mem::take(&mut *self.dirty.ready.lock())
            .into_iter()
            .map(|(region, chunks)| DirtyChunks {
                region,
                chunks: chunks.into_iter().collect(),
            })
            .collect()
    }

    /// Puts back a log [`take_dirty`](Self::take_dirty) returned that could not be
    /// reported.
    pub fn restore_dirty(&self, dirty: Vec<DirtyChunks>) {
        let mut log = self.dirty.ready.lock();
        for d in dirty {
            log.entry(d.region).or_default().extend(d.chunks);
        }
    }

    /// Whether writes to `region` wait (it is frozen).
    pub fn is_frozen(&self, region: RegionId) -> bool {
        self.gate.is_frozen(region)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_marks_every_chunk_it_touches() {
        let log = DirtyLog::default();
        log.mark(3, FILL_CHUNK - 8, 16);
        log.mark(3, 5 * FILL_CHUNK, 0);
        log.mark(4, 0, 8);
        let chunks = log.chunks.lock();
        assert_eq!(
            chunks[&3].iter().copied().collect::<Vec<_>>(),
            vec![0, 1, 5]
        );
        assert_eq!(chunks[&4].iter().copied().collect::<Vec<_>>(), vec![0]);
    }
}
