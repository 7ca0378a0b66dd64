//! Finding a key: reading its two candidate buckets (a [`Probe`]), matching
//! fingerprints, verifying the object's key, and the bucket-header guard a commit
//! validates.
//!
//! Used by every read and write path. It never writes: what it finds is a hint until a
//! transaction validates the slot word and the bucket header on commit.

use std::sync::atomic::Ordering;

use dmc_umo::{GlobalAddr, ReadObject, TxWrite};

use super::{Dht, DhtError, Found, Loc, MAX_RETRIES};
use crate::hash;
use crate::layout::{self, SLOTS_PER_BUCKET, SlotMeta, SlotWord, le64};

/// The two candidate buckets of a key as read.
pub(super) struct Probe {
    /// Bucket addresses and bytes.
    pub(super) buckets: [(GlobalAddr, [u8; layout::BUCKET as usize]); 2],
    /// Each bucket's first access-metadata entry, when its subtable has that area
    /// (see [`Dht::ext_base`]).
    pub(super) ext: [Option<GlobalAddr>; 2],
}

impl Probe {
    pub(super) fn header(&self, b: usize) -> u64 {
        le64(&self.buckets[b].1, 0)
    }
    /// The access-metadata entry of slot `i` of bucket `b`, if the subtable has them.
    pub(super) fn ext(&self, b: usize, i: usize) -> Option<GlobalAddr> {
        self.ext[b].map(|e| e.offset_by(i as u64 * layout::EXT_ENTRY))
    }

    /// The access-metadata entry of the slot at `addr`, one of the probe's.
    pub(super) fn ext_at(&self, addr: GlobalAddr) -> Option<GlobalAddr> {
        (0..2).find_map(|b| {
            let base = self.buckets[b].0;
            (0..SLOTS_PER_BUCKET)
                .find(|&i| base.offset_by(layout::BUCKET_HEADER + layout::SLOT * i as u64) == addr)
                .and_then(|i| self.ext(b, i))
        })
    }

    pub(super) fn slot(&self, b: usize, i: usize) -> (GlobalAddr, SlotWord, SlotMeta) {
        let at = (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize;
        let bytes = &self.buckets[b].1;
        (
            self.buckets[b].0.offset_by(at as u64),
            SlotWord(le64(bytes, at)),
            SlotMeta(le64(bytes, at + 8)),
        )
    }
}

impl Dht {
    /// Reads the key's two candidate buckets, refreshing a stale directory.
    async fn probe(&self, loc: &Loc) -> Result<Option<Probe>, DhtError> {
        for _ in 0..MAX_RETRIES {
            // The lock-free copy first: no shared reference count to bump per write.
            let st = match self.cached_subtable(loc) {
                Some(st) => st,
                None => match self.load_dir(loc.slot).await? {
                    Some(dir) => dir.subtable(loc.hash),
                    None => return Ok(None),
                },
            };
            let (a, b) = hash::buckets(loc.hash, self.buckets);
            let mut probe = Probe {
                buckets: [
                    (
                        st.offset_by(a * layout::BUCKET),
                        [0u8; layout::BUCKET as usize],
                    ),
                    (
                        st.offset_by(b * layout::BUCKET),
                        [0u8; layout::BUCKET as usize],
                    ),
                ],
                ext: [None, None],
            };
            {
                let [(a_addr, a_buf), (b_addr, b_buf)] = &mut probe.buckets;
                let mut reads = [(*a_addr, &mut a_buf[..]), (*b_addr, &mut b_buf[..])];
                self.pool.read_batch(&mut reads).await?;
            }
            if layout::header_covers(probe.header(0), loc.hash, loc.slot)
                && layout::header_covers(probe.header(1), loc.hash, loc.slot)
            {
                probe.ext = [
                    self.ext_base(st, a, probe.header(0)),
                    self.ext_base(st, b, probe.header(1)),
                ];
                return Ok(Some(probe));
            }
            // A split retired this subtable (or the cache is older than a reuse).
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
            self.load_dir(loc.slot).await?;
        }
        Err(DhtError::Contention(loc.key_slot))
    }

    /// Finds `key` among the probe's slots.
    pub(super) async fn find(
        &self,
        loc: &Loc,
        key: &[u8],
        probe: &Probe,
        want_value: bool,
    ) -> Result<Option<Found>, DhtError> {
        for b in 0..2 {
            if b == 1 && probe.buckets[0].0 == probe.buckets[1].0 {
                break;
            }
            for i in 0..SLOTS_PER_BUCKET {
                // The fingerprint is the word's top byte: test it before decoding.
                let fp_at = (layout::BUCKET_HEADER + layout::SLOT * i as u64 + 7) as usize;
                if probe.buckets[b].1[fp_at] != loc.fp {
                    continue;
                }
                let (addr, word, meta) = probe.slot(b, i);
                if word.is_empty() {
                    continue;
                }
                let Some(obj) = word.object() else { continue };
                match self.pool.read_object(obj, loc.db, key).await {
                    Ok(ReadObject::Value(v, kind)) => {
                        return Ok(Some(Found {
                            bucket: b,
                            addr,
                            word,
                            meta,
                            value: want_value.then_some(v),
                            kind,
                            ext: probe.ext(b, i),
                        }));
                    }
                    // A fingerprint collision, or a slot that changed under us: the
                    // caller's commit validates the words it relies on.
                    Ok(ReadObject::Mismatch) => continue,
                    // A failed read is not an absent key: reporting a miss could let
                    // NX succeed or a second slot take the key.
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(None)
    }

    /// Probes and finds in one go; `None` probe means the hash slot has no table yet.
    /// Inside a transaction ([`Dht::atomically`]) a key it changed is found as changed.
    pub(super) async fn lookup(
        &self,
        loc: &Loc,
        key: &[u8],
        want_value: bool,
    ) -> Result<(Option<Probe>, Option<Found>), DhtError> {
        // Boxed: the staged path is rare, and would otherwise enlarge every future
        // that looks a key up.
        if self.is_staging()
            && let Some(found) = Box::pin(self.staged_found(loc, key, want_value)).await
        {
            return Ok((Box::pin(self.probe(loc)).await?, found?));
        }
        self.lookup_committed(loc, key, want_value).await
    }

    /// [`lookup`](Self::lookup) of the committed table, whatever this task staged.
    pub(super) async fn lookup_committed(
        &self,
        loc: &Loc,
        key: &[u8],
        want_value: bool,
    ) -> Result<(Option<Probe>, Option<Found>), DhtError> {
        let Some(probe) = self.probe(loc).await? else {
            return Ok((None, None));
        };
        let found = self.find(loc, key, &probe, want_value).await?;
        Ok((Some(probe), found))
    }

    /// The header of `probe`'s bucket `b`, validated (unchanged) by a transaction.
    pub(super) fn header_guard(probe: &Probe, b: usize) -> TxWrite {
        let h = probe.header(b);
        TxWrite {
            addr: probe.buckets[b].0,
            expect: Some(h),
            new: h,
            in_word_lock: false,
        }
    }
}
