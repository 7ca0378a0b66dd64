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
    /// `loc`'s two candidate buckets in subtable `st` (of `buckets` buckets), not read
    /// yet.
    pub(super) fn unread(st: GlobalAddr, loc: &Loc, buckets: u64) -> Probe {
        let (a, b) = hash::buckets(loc.hash, buckets);
        let bucket = |i: u64| {
            (
                st.offset_by(i * layout::BUCKET),
                [0u8; layout::BUCKET as usize],
            )
        };
        Probe {
            buckets: [bucket(a), bucket(b)],
            ext: [None, None],
        }
    }

    /// Both buckets' addresses and buffers, to read into.
    pub(super) fn reads(&mut self) -> [(GlobalAddr, &mut [u8]); 2] {
        let [(a_addr, a_buf), (b_addr, b_buf)] = &mut self.buckets;
        [(*a_addr, &mut a_buf[..]), (*b_addr, &mut b_buf[..])]
    }

    /// Whether both buckets as read belong to `loc`'s subtable (no split retired it).
    pub(super) fn covers(&self, loc: &Loc) -> bool {
        (0..2).all(|b| layout::header_covers(self.header(b), loc.hash, loc.slot))
    }

    /// The slots `loc`'s key may be in, as (bucket, slot index): those whose word
    /// carries its fingerprint and points at an object (each bucket once, if both are
    /// one).
    pub(super) fn matching(&self, loc: &Loc) -> impl Iterator<Item = (usize, usize)> + '_ {
        let fp = loc.fp;
        let buckets = if self.buckets[0].0 == self.buckets[1].0 {
            1
        } else {
            2
        };
        (0..buckets).flat_map(move |b| {
            (0..SLOTS_PER_BUCKET)
                .filter(move |&i| {
                    // The fingerprint is the word's top byte: test it before decoding.
                    let fp_at = (layout::BUCKET_HEADER + layout::SLOT * i as u64 + 7) as usize;
                    self.buckets[b].1[fp_at] == fp && self.slot(b, i).1.object().is_some()
                })
                .map(move |i| (b, i))
        })
    }

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
            let mut probe = Probe::unread(st, loc, self.buckets);
            self.pool.read_batch(&mut probe.reads()).await?;
            if probe.covers(loc) {
                self.set_ext(&mut probe, st, loc);
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
        for (b, i) in probe.matching(loc) {
            let (addr, word, meta) = probe.slot(b, i);
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
        Ok(None)
    }

    /// Fills in the probe's access-metadata entries, for a subtable that has them.
    fn set_ext(&self, probe: &mut Probe, st: GlobalAddr, loc: &Loc) {
        let (a, b) = hash::buckets(loc.hash, self.buckets);
        probe.ext = [
            self.ext_base(st, a, probe.header(0)),
            self.ext_base(st, b, probe.header(1)),
        ];
    }

    /// [`lookup`](Self::lookup) of the committed table right now, on a pool whose
    /// memory is in this address space. `None`: use `lookup` (no cached directory or a
    /// stale one, a chained or large object, a remote node).
    pub(super) fn lookup_now(
        &self,
        loc: &Loc,
        key: &[u8],
        want_value: bool,
    ) -> Option<Result<(Probe, Option<Found>), DhtError>> {
        let st = self.cached_subtable(loc)?;
        let mut probe = Probe::unread(st, loc, self.buckets);
        if let Err(e) = self.pool.read_batch_now(&mut probe.reads())? {
            return Some(Err(e.into()));
        }
        if !probe.covers(loc) {
            return None;
        }
        self.set_ext(&mut probe, st, loc);
        let mut found = None;
        for (b, i) in probe.matching(loc) {
            let (addr, word, meta) = probe.slot(b, i);
            let obj = word.object()?;
            let held = if want_value {
                self.pool
                    .read_object_now(obj, loc.db, key)?
                    .map(|r| match r {
                        ReadObject::Value(v, kind) => Some((Some(v), kind)),
                        ReadObject::Mismatch => None,
                    })
            } else {
                self.pool
                    .object_kind_now(obj, loc.db, key)?
                    .map(|kind| kind.map(|k| (None, k)))
            };
            match held {
                Ok(Some((value, kind))) => {
                    found = Some(Found {
                        bucket: b,
                        addr,
                        word,
                        meta,
                        value,
                        kind,
                        ext: probe.ext(b, i),
                    });
                    break;
                }
                // A fingerprint collision, or a slot that changed under us.
                Ok(None) => continue,
                Err(e) => return Some(Err(e.into())),
            }
        }
        Some(Ok((probe, found)))
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
