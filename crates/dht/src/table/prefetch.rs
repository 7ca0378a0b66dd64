//! Loading a pipeline's keys ahead: the directory words, rebuild gate, ownership
//! records, candidate buckets and old object of every key a pipeline's commands will
//! write, started before the first command runs. Over in-process memory (`local`,
//! `shm`) the commands then run one after another without waiting, and their cache
//! misses overlap only if they were all started first. Everything here is a hint:
//! nothing is locked, checked or returned, and a key whose directory is not cached is
//! skipped.

use dmc_umo::GlobalAddr;
use dmc_verbs::memory::prefetch_line;
use smallvec::SmallVec;

use super::probe::Probe;
use super::{Dht, Loc};
use crate::layout;

/// Keys loaded per round: their lines must still be in the cache when their commands
/// run.
const ROUND: usize = 32;
/// Bytes of an old object's head loaded ahead: its header and key, which a write
/// compares, and a short value.
const OBJECT_HEAD: usize = 128;

impl Dht {
    /// Starts loading, for every key of `keys` in `db`, what a write of it touches
    /// first, when the pool's memory is in this address space. In rounds of
    /// [`ROUND`] keys: every key's directory words, rebuild gate and ownership records;
    /// then both candidate buckets (on every copy: a write CASes each); then the head
    /// of each object a matching fingerprint points at. Each step is one batch per node.
    pub fn prefetch_buckets<'k>(&self, db: u8, keys: impl IntoIterator<Item = &'k [u8]>) {
        if !self.inline_reads {
            return;
        }
        let mut keys = keys.into_iter().peekable();
        while keys.peek().is_some() {
            let mut locs: SmallVec<[Loc; ROUND]> = SmallVec::new();
            for key in keys.by_ref().take(ROUND) {
                let at = self.loc(db, key);
                self.prefetch_subtable(&at);
                if let Some(gate) = self.gates.word(at.slot) {
                    prefetch_line(std::ptr::from_ref(gate).cast());
                }
                self.owner.prefetch(at.key_slot);
                if at.slot != at.key_slot {
                    self.owner.prefetch(at.slot);
                }
                locs.push(at);
            }
            let mut probes: SmallVec<[(usize, Probe); ROUND]> = SmallVec::new();
            for (i, loc) in locs.iter().enumerate() {
                if let Some(st) = self.cached_subtable(loc) {
                    probes.push((i, Probe::unread(st, loc, self.buckets)));
                }
            }
            let buckets: SmallVec<[(GlobalAddr, usize); 2 * ROUND]> = probes
                .iter()
                .flat_map(|(_, p)| p.buckets.iter().map(|(a, _)| (*a, layout::BUCKET as usize)))
                .collect();
            self.pool.prefetch_copies_many(&buckets);
            self.prefetch_objects(&locs, &mut probes);
        }
    }

    /// Starts loading the head of every object whose slot in a probe's buckets carries
    /// its key's fingerprint: a write reads its key's old object to check the key before
    /// replacing it. The buckets are read first, in one batch; a probe whose headers do
    /// not cover its key (a stale cached directory) is not followed.
    fn prefetch_objects(&self, locs: &[Loc], probes: &mut [(usize, Probe)]) {
        {
            let mut reads: SmallVec<[(GlobalAddr, &mut [u8]); 2 * ROUND]> =
                probes.iter_mut().flat_map(|(_, p)| p.reads()).collect();
            if !matches!(self.pool.read_batch_now(&mut reads), Some(Ok(()))) {
                return;
            }
        }
        let mut heads: SmallVec<[(GlobalAddr, usize); 2 * ROUND]> = SmallVec::new();
        for (i, probe) in probes.iter() {
            let Some(loc) = locs.get(*i).filter(|loc| probe.covers(loc)) else {
                continue;
            };
            for (b, slot) in probe.matching(loc) {
                if let Some(obj) = probe.slot(b, slot).1.object() {
                    heads.push((obj.block.addr, (obj.block.size() as usize).min(OBJECT_HEAD)));
                }
            }
        }
        self.pool.prefetch_many(&heads);
    }
}
