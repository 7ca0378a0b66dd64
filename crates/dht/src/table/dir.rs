//! Cached directories: a hash slot's [`Dir`] (depth and subtable addresses), the
//! lock-free [`FlatDirs`] copy the read path uses, loading both from the table root, and
//! which hash slots have a partition.
//!
//! Every operation finds its subtable here. A cached directory may be stale: its users
//! check the bucket header they read and reload on a mismatch, never trusting a cached
//! address on its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dmc_umo::{Block, GlobalAddr};

use super::{Dht, DhtError, Loc, corrupt};
use crate::layout::{self, HASH_SLOTS, le64};

/// A hash slot's directory, as cached.
#[derive(Debug)]
pub(super) struct Dir {
    pub(super) block: Block,
    pub(super) depth: u32,
    pub(super) subtables: Vec<GlobalAddr>,
    /// The first entries again, inside this allocation: most directories are this
    /// small, and the get path then costs one cache miss less.
    inline: [GlobalAddr; INLINE_DIR],
}

const INLINE_DIR: usize = 8;

impl Dir {
    pub(super) fn new(block: Block, depth: u32, subtables: Vec<GlobalAddr>) -> Self {
        let mut inline = [GlobalAddr::NULL; INLINE_DIR];
        for (d, s) in inline.iter_mut().zip(&subtables) {
            *d = *s;
        }
        Dir {
            block,
            depth,
            subtables,
            inline,
        }
    }

    pub(super) fn subtable(&self, hash: u64) -> GlobalAddr {
        let i = (hash & ((1u64 << self.depth) - 1)) as usize;
        if i < INLINE_DIR {
            self.inline[i]
        } else {
            self.subtables[i]
        }
    }
}

/// Directories of this depth or less are also kept in the [`FlatDirs`].
const FLAT_DEPTH: u32 = 5;

/// A lock-free copy of every hash slot's directory for the read path: `2^FLAT_DEPTH`
/// words per slot, word `i` the subtable for hashes ending in `i`, word 0 also holding
/// the depth (`(depth + 1) << 48`; 0 means not cached). A get then finds its subtable
/// with plain loads in one cache line (depth ≤ 3) instead of a lock and two pointer
/// hops, so the loads of a batch of keys overlap. Words may be stale or mixed between
/// two directories during an update: every address in them is a subtable this slot had,
/// and the bucket header each get checks says whether it still covers the hash (a
/// deeper directory, or a miss in the flat copy, takes the locked [`Dir`] path).
pub(super) struct FlatDirs {
    words: Box<[AtomicU64]>,
}

impl FlatDirs {
    pub(super) fn new() -> Self {
        FlatDirs {
            words: (0..HASH_SLOTS << FLAT_DEPTH)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    fn set(&self, slot: u16, dir: Option<&Dir>) {
        let base = (slot as usize) << FLAT_DEPTH;
        match dir {
            Some(d) if d.depth <= FLAT_DEPTH => {
                for i in 1..1usize << d.depth {
                    self.words[base + i].store(d.subtable(i as u64).bits(), Ordering::Relaxed);
                }
                let first = d.subtable(0).bits() | (u64::from(d.depth) + 1) << 48;
                self.words[base].store(first, Ordering::Release);
            }
            _ => self.words[base].store(0, Ordering::Release),
        }
    }

    /// Starts loading the words [`subtable`](Self::subtable) will read for `hash` in
    /// `slot` (the slot's first line, and the hash's own when the directory is deeper).
    fn prefetch(&self, slot: u16, hash: u64) {
        let base = (slot as usize) << FLAT_DEPTH;
        let mine = base + (hash & ((1u64 << FLAT_DEPTH) - 1)) as usize;
        for i in [base, mine] {
            if let Some(word) = self.words.get(i) {
                dmc_verbs::memory::prefetch_line(std::ptr::from_ref(word).cast());
            }
        }
    }

    fn subtable(&self, slot: u16, hash: u64) -> Option<GlobalAddr> {
        let base = (slot as usize) << FLAT_DEPTH;
        let first = self.words[base].load(Ordering::Acquire);
        let depth = (first >> 48).checked_sub(1)?;
        let i = (hash & ((1u64 << depth) - 1)) as usize;
        let word = match i {
            0 => first & ((1 << 48) - 1),
            _ => self.words[base + i].load(Ordering::Relaxed),
        };
        (word != 0).then(|| GlobalAddr::from_bits(word))
    }
}

impl Dht {
    pub(super) fn slot_entry(&self, slot: u16) -> GlobalAddr {
        self.root.offset_by(layout::ROOT_HEADER + 8 * slot as u64)
    }

    pub(super) async fn load_dir(&self, slot: u16) -> Result<Option<Arc<Dir>>, DhtError> {
        let mut w = [0u8; 8];
        self.pool.read(self.slot_entry(slot), &mut w).await?;
        let r = u64::from_le_bytes(w);
        if r == 0 {
            // Most often nothing was cached: no write lock for every miss on a slot
            // without a table.
            if self.dirs[slot as usize].read().is_some() {
                *self.dirs[slot as usize].write() = None;
                self.flat.set(slot, None);
            }
            return Ok(None);
        }
        let block = layout::dir_block(r)
            .ok_or_else(|| corrupt(format!("bad directory ref {r:#x} for slot {slot}")))?;
        let mut bytes = vec![0u8; block.size() as usize];
        self.pool.read(block.addr, &mut bytes).await?;
        let depth = le64(&bytes, 0) as u32;
        let n = 1usize << depth.min(layout::MAX_DEPTH);
        if depth > layout::MAX_DEPTH || 8 + 8 * n > bytes.len() {
            return Err(corrupt(format!(
                "directory of slot {slot} has depth {depth}"
            )));
        }
        let subtables = (0..n)
            .map(|i| GlobalAddr::from_bits(le64(&bytes, 8 + 8 * i)))
            .collect();
        let dir = Arc::new(Dir::new(block, depth, subtables));
        *self.dirs[slot as usize].write() = Some(dir.clone());
        self.flat.set(slot, Some(&dir));
        self.known_partition(slot);
        Ok(Some(dir))
    }

    /// The hash slots with a directory that this client owns (and so writes).
    pub(super) fn owned_partitions(&self) -> Vec<u16> {
        self.partitions
            .read()
            .iter()
            .copied()
            .filter(|s| self.owner.lease(*s).is_some())
            .collect()
    }

    /// Records that `slot` has a directory (another agent may have created it).
    pub(super) fn known_partition(&self, slot: u16) {
        let mut parts = self.partitions.write();
        if let Err(at) = parts.binary_search(&slot) {
            parts.insert(at, slot);
        }
    }

    /// Starts loading what [`cached_subtable`](Self::cached_subtable) reads for `loc`.
    pub(super) fn prefetch_subtable(&self, loc: &Loc) {
        self.flat.prefetch(loc.slot, loc.hash);
    }

    /// The subtable `loc` maps to in the cached directory (lock-free where it can be).
    pub(super) fn cached_subtable(&self, loc: &Loc) -> Option<GlobalAddr> {
        self.flat.subtable(loc.slot, loc.hash).or_else(|| {
            self.dirs[loc.slot as usize]
                .read()
                .as_ref()
                .map(|d| d.subtable(loc.hash))
        })
    }

    pub(super) async fn dir(&self, slot: u16) -> Result<Option<Arc<Dir>>, DhtError> {
        if let Some(d) = self.dirs[slot as usize].read().clone() {
            return Ok(Some(d));
        }
        self.load_dir(slot).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(depth: u32) -> Dir {
        let subtables = (0..1u64 << depth)
            .map(|i| GlobalAddr::new(7, 4096 * (i + 1)))
            .collect();
        let block = Block {
            addr: GlobalAddr::new(7, 0),
            class: 0,
        };
        Dir::new(block, depth, subtables)
    }

    #[test]
    fn flat_dirs_agree_with_the_directory_or_defer_to_it() {
        let flat = FlatDirs::new();
        assert_eq!(flat.subtable(3, 12345), None, "nothing cached yet");
        for depth in 0..=FLAT_DEPTH + 1 {
            let d = dir(depth);
            flat.set(3, Some(&d));
            for hash in [0u64, 1, 5, 31, 12345, u64::MAX, 0xdead_beef] {
                let want = (depth <= FLAT_DEPTH).then(|| d.subtable(hash));
                assert_eq!(flat.subtable(3, hash), want, "depth {depth} hash {hash}");
                assert_eq!(flat.subtable(4, hash), None, "other slots untouched");
            }
        }
        flat.set(3, Some(&dir(1)));
        flat.set(3, None);
        assert_eq!(flat.subtable(3, 1), None);
    }
}
