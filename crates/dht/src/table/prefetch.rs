//! Loading a pipeline's keys ahead: the directory words, rebuild lock, candidate
//! buckets and old object of every key a pipeline's commands will write, started
//! before the first command runs. Over in-process memory (`local`, `shm`) the commands
//! then run one after another without waiting, and their cache misses overlap only if
//! they were all started first. Everything here is a hint: nothing is locked, checked
//! or returned, and a key whose directory is not cached is skipped.

use dmc_umo::GlobalAddr;
use dmc_verbs::memory::prefetch_line;

use super::{Dht, Loc};
use crate::hash;
use crate::layout::{self, SLOTS_PER_BUCKET, SlotWord, le64};

/// Keys loaded per round: their lines must still be in the cache when their commands
/// run.
const ROUND: usize = 32;
/// Bytes of an old object's head loaded ahead: its header and key, which a write
/// compares, and a short value.
const OBJECT_HEAD: usize = 128;

impl Dht {
    /// Starts loading, for every key of `keys` in `db`, what a write of it touches
    /// first, when the pool's memory is in this address space. In rounds of
    /// [`ROUND`] keys: every key's directory words and rebuild lock; then both
    /// candidate buckets (on every copy: a write CASes each); then the head of each
    /// object a matching fingerprint points at.
    pub fn prefetch_buckets<'k>(&self, db: u8, keys: impl IntoIterator<Item = &'k [u8]>) {
        if !self.inline_reads {
            return;
        }
        let mut keys = keys.into_iter().peekable();
        while keys.peek().is_some() {
            let mut locs = [None; ROUND];
            for (loc, key) in locs.iter_mut().zip(keys.by_ref()) {
                let at = self.loc(db, key);
                self.prefetch_subtable(&at);
                if let Some(lock) = self.locks.get(at.slot as usize) {
                    prefetch_line(std::ptr::from_ref(lock).cast());
                }
                *loc = Some(at);
            }
            let mut subtables = [None; ROUND];
            for (loc, st) in locs.iter().zip(subtables.iter_mut()) {
                *st = loc.as_ref().and_then(|loc| self.cached_subtable(loc));
                if let (Some(loc), Some(st)) = (loc, st) {
                    let (a, b) = hash::buckets(loc.hash, self.buckets);
                    for bucket in [a, b] {
                        self.pool.prefetch_copies(
                            st.offset_by(bucket * layout::BUCKET),
                            layout::BUCKET as usize,
                        );
                    }
                }
            }
            for (loc, st) in locs.iter().zip(subtables) {
                if let (Some(loc), Some(st)) = (loc, st) {
                    self.prefetch_objects(loc, st);
                }
            }
        }
    }

    /// Starts loading the head of every object whose slot in `loc`'s candidate buckets
    /// (of subtable `st`) carries `loc`'s fingerprint: a write reads its key's old
    /// object to check the key before replacing it. A bucket whose header does not
    /// cover the key (a stale cached directory) is not followed.
    fn prefetch_objects(&self, loc: &Loc, st: GlobalAddr) {
        let (a, b) = hash::buckets(loc.hash, self.buckets);
        for bucket in [a, b] {
            let mut bytes = [0u8; layout::BUCKET as usize];
            if !matches!(
                self.pool
                    .read_now(st.offset_by(bucket * layout::BUCKET), &mut bytes),
                Some(Ok(()))
            ) || !layout::header_covers(le64(&bytes, 0), loc.hash, loc.slot)
            {
                return;
            }
            for i in 0..SLOTS_PER_BUCKET {
                let at = (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize;
                if bytes[at + 7] == loc.fp
                    && let Some(obj) = SlotWord(le64(&bytes, at)).object()
                {
                    self.pool
                        .prefetch(obj.block.addr, (obj.block.size() as usize).min(OBJECT_HEAD));
                }
            }
        }
    }
}
