//! One-sided verbs on region copies: reads from the primary (completed inline when the
//! backend can, batched per node), writes to every copy, and fetch-and-add on the
//! primary; each also right now (`*_now`) where every copy completes verbs inline.
//! Called by object reads and writes, the superblock and the hash table. Nothing here
//! validates: `write_all` is for bytes no committed word points at yet, and words other
//! clients validate change only through `commit`.

use std::collections::BTreeMap;

use dmc_verbs::Verb;
use futures::future::join_all;

use dmc_verbs::RegionId;

use super::counters::unchanged_low_bytes;
use super::failover::FAILOVER_RETRIES;
use super::{Pool, RegionEntry};
use crate::addr::GlobalAddr;
use crate::error::UmoError;

impl Pool {
    /// Reads from the primary copy right now, if its backend completes verbs inline;
    /// `None` means use [`read`](Self::read).
    pub fn read_now(&self, addr: GlobalAddr, buf: &mut [u8]) -> Option<Result<(), UmoError>> {
        // An unknown region is learned on the awaited path.
        let node = &self.nodes[self.primary(addr.region()).ok()?];
        let mut verbs = [Verb::Read {
            region: addr.region(),
            offset: addr.offset(),
            buf,
        }];
        Some(node.post_now(&mut verbs)?.map_err(|e| UmoError::Node {
            node: node.node(),
            source: e,
        }))
    }

    /// [`faa`](Self::faa) right now, if every copy's backend completes verbs inline;
    /// returns the primary's old value.
    pub fn faa_now(&self, addr: GlobalAddr, add: u64) -> Option<Result<u64, UmoError>> {
        self.faa_now_from(addr, add, 0)
    }

    /// [`faa_now`](Self::faa_now) on a field of the word (a slot's LFU count): the
    /// backups are written only the sum's bytes the addition can change
    /// (`counters::unchanged_low_bytes`), not the word's other fields. A backup that
    /// missed an earlier sum keeps its stale low bytes, so this is for a field that
    /// fills the word's high bytes, not for a whole-word counter.
    pub fn faa_field_now(&self, addr: GlobalAddr, add: u64) -> Option<Result<u64, UmoError>> {
        self.faa_now_from(addr, add, unchanged_low_bytes(add))
    }

    /// [`faa_now`](Self::faa_now), the backups written the sum from byte `skip` on.
    fn faa_now_from(
        &self,
        addr: GlobalAddr,
        add: u64,
        skip: usize,
    ) -> Option<Result<u64, UmoError>> {
        let region = addr.region();
        self.inline_on_copies(addr, 8, |primary, entry| {
            // The primary takes the addition; the backups get its result (see
            // `faa_mirrored`: a client that dies in between leaves a backup behind, not
            // different for good). Adding zero reads the primary alone.
            let node = &self.nodes[primary];
            let mut verbs = [Verb::Faa {
                region,
                offset: addr.offset(),
                add,
                old: 0,
            }];
            if let Err(e) = node
                .post_now(&mut verbs)?
                .map_err(UmoError::node(node.node()))
            {
                return Some(Err(e));
            }
            let [Verb::Faa { old, .. }] = verbs else {
                return None;
            };
            if add != 0 {
                let now = old.wrapping_add(add).to_le_bytes();
                for n in entry.copies().filter(|&n| n != primary) {
                    let mut write = [Verb::Write {
                        region,
                        offset: addr.offset() + skip as u64,
                        data: now.get(skip..).unwrap_or_default(),
                    }];
                    let _ = self.nodes[n].post_now(&mut write)?;
                }
            }
            Some(Ok(old))
        })
    }

    /// Writes `data` at `addr` on every copy right now, if every copy's backend
    /// completes verbs inline (advisory metadata: a backup that fails is left behind);
    /// `None` means use [`write_all`](Self::write_all).
    pub fn write_now(&self, addr: GlobalAddr, data: &[u8]) -> Option<Result<(), UmoError>> {
        self.write_copies_now(addr, data, false)
    }

    /// Reads several ranges from their primaries right now, one batch per node, if
    /// every primary's backend completes verbs inline; `None` means use
    /// [`read_batch`](Self::read_batch).
    pub fn read_batch_now(
        &self,
        reads: &mut [(GlobalAddr, &mut [u8])],
    ) -> Option<Result<(), UmoError>> {
        let nodes: smallvec::SmallVec<[usize; 64]> = reads
            .iter()
            .map(|(a, _)| self.primary(a.region()).ok())
            .collect::<Option<_>>()?;
        let mut distinct: smallvec::SmallVec<[usize; 4]> = smallvec::SmallVec::new();
        for &n in &nodes {
            if !distinct.contains(&n) {
                if !self.nodes[n].completes_inline() {
                    return None;
                }
                distinct.push(n);
            }
        }
        for n in distinct {
            let node = &self.nodes[n];
            let mut verbs: smallvec::SmallVec<[Verb<'_>; 4]> = reads
                .iter_mut()
                .zip(&nodes)
                .filter(|(_, m)| **m == n)
                .map(|((addr, buf), _)| Verb::Read {
                    region: addr.region(),
                    offset: addr.offset(),
                    buf,
                })
                .collect();
            if let Err(e) = node
                .post_now(&mut verbs)?
                .map_err(UmoError::node(node.node()))
            {
                return Some(Err(e));
            }
        }
        Some(Ok(()))
    }

    /// [`write_all`](Self::write_all) of one range right now, if every copy of its
    /// region completes verbs inline. `None`: nothing was written; use `write_all`. An
    /// error may leave the bytes on some copies only (a copy that failed, or could not
    /// take a verb now: [`UmoError::NotInline`]); `write_all` also waits out a failed
    /// node.
    pub fn write_all_now(&self, addr: GlobalAddr, data: &[u8]) -> Option<Result<(), UmoError>> {
        self.write_copies_now(addr, data, true)
    }

    /// Writes `data` on every copy, primary first; a backup that fails is an error if
    /// `every`, else left behind. `None`: the primary took nothing (or the region is not
    /// inline).
    fn write_copies_now(
        &self,
        addr: GlobalAddr,
        data: &[u8],
        every: bool,
    ) -> Option<Result<(), UmoError>> {
        self.inline_on_copies(addr, data.len() as u64, |primary, entry| {
            for n in entry.copies() {
                let node = &self.nodes[n];
                let mut write = [Verb::Write {
                    region: addr.region(),
                    offset: addr.offset(),
                    data,
                }];
                let done = match node.post_now(&mut write) {
                    Some(done) => done.map_err(UmoError::node(node.node())),
                    None if n == primary => return None,
                    None => Err(UmoError::NotInline(node.node())),
                };
                if let Err(e) = done
                    && (every || n == primary)
                {
                    return Some(Err(e));
                }
            }
            Some(Ok(()))
        })
    }

    /// Runs `verbs` (given the primary node and the region's entry) on a region whose
    /// every copy completes verbs inline, with the region's gate entered and the map's
    /// read lock held (inline verbs do not wait, and no list of copies is allocated);
    /// `len` bytes at `addr` are marked dirty for a region being filled. `None`: the
    /// awaited path must do it.
    fn inline_on_copies<T>(
        &self,
        addr: GlobalAddr,
        len: u64,
        verbs: impl FnOnce(usize, &RegionEntry) -> Option<Result<T, UmoError>>,
    ) -> Option<Result<T, UmoError>> {
        if self.lease_lapsed() {
            return Some(Err(UmoError::LeaseLapsed));
        }
        let region = addr.region();
        let primary = self.primary(region).ok()?;
        if !self.nodes[primary].completes_inline() {
            return None;
        }
        let _permit = self.gate.try_enter([region]).ok()?;
        let regions = self.regions.read();
        let entry = regions.get(region as usize)?.as_ref()?;
        if entry.copies().any(|n| !self.nodes[n].completes_inline()) {
            return None;
        }
        if !entry.filling.is_empty() {
            self.dirty.mark(region, addr.offset(), len);
        }
        verbs(primary, entry)
    }

    /// Reads from the primary copy; a primary that failed is waited out (its failover
    /// promotes a backup) and the read retried there.
    pub async fn read(&self, addr: GlobalAddr, buf: &mut [u8]) -> Result<(), UmoError> {
        let mut tries = 0;
        loop {
            match self.read_once(addr, buf).await {
                Err(e)
                    if tries < FAILOVER_RETRIES && self.failed_over(&e, &[addr.region()]).await =>
                {
                    tries += 1
                }
                done => return done,
            }
        }
    }

    async fn read_once(&self, addr: GlobalAddr, buf: &mut [u8]) -> Result<(), UmoError> {
        let node = &self.nodes[self.discover(addr.region()).await?];
        let mut verbs = [Verb::Read {
            region: addr.region(),
            offset: addr.offset(),
            buf,
        }];
        if let Some(r) = node.post_now(&mut verbs) {
            return r.map_err(|e| UmoError::Node {
                node: node.node(),
                source: e,
            });
        }
        node.post(&mut verbs).await.map_err(|e| UmoError::Node {
            node: node.node(),
            source: e,
        })
    }

    /// Reads several ranges from their primaries: one posted batch per node; failed
    /// nodes are waited out as in [`read`](Self::read).
    pub async fn read_batch(&self, reads: &mut [(GlobalAddr, &mut [u8])]) -> Result<(), UmoError> {
        let mut tries = 0;
        loop {
            match self.read_batch_once(reads).await {
                Err(e) if tries < FAILOVER_RETRIES => {
                    let regions: Vec<RegionId> = reads.iter().map(|(a, _)| a.region()).collect();
                    if !self.failed_over(&e, &regions).await {
                        return Err(e);
                    }
                    tries += 1;
                }
                done => return done,
            }
        }
    }

    async fn read_batch_once(&self, reads: &mut [(GlobalAddr, &mut [u8])]) -> Result<(), UmoError> {
        self.discover_all(self.unknown(reads.iter().map(|(a, _)| a.region())))
            .await?;
        // Common case: every range on one node (a key's two buckets share a subtable).
        if let [(first, _), rest @ ..] = &*reads {
            let n = self.primary(first.region())?;
            let same = rest.iter().all(|(a, _)| {
                a.region() == first.region() || self.primary(a.region()).ok() == Some(n)
            });
            if same {
                let node = &self.nodes[n];
                let mut verbs: Vec<Verb<'_>> = reads
                    .iter_mut()
                    .map(|(addr, buf)| Verb::Read {
                        region: addr.region(),
                        offset: addr.offset(),
                        buf,
                    })
                    .collect();
                if let Some(r) = node.post_now(&mut verbs) {
                    return r.map_err(|e| UmoError::Node {
                        node: node.node(),
                        source: e,
                    });
                }
                return node.post(&mut verbs).await.map_err(|e| UmoError::Node {
                    node: node.node(),
                    source: e,
                });
            }
        }
        let mut by_node: BTreeMap<usize, Vec<Verb<'_>>> = BTreeMap::new();
        for (addr, buf) in reads.iter_mut() {
            let n = self.primary(addr.region())?;
            by_node.entry(n).or_default().push(Verb::Read {
                region: addr.region(),
                offset: addr.offset(),
                buf,
            });
        }
        self.post_per_node(by_node).await
    }

    /// The node index of copy `copy` of `addr`'s region (0 = primary, 1.. = backups).
    async fn copy_node(&self, addr: GlobalAddr, copy: usize) -> Result<usize, UmoError> {
        self.discover(addr.region()).await?;
        let entry = self.entry(addr.region())?;
        entry
            .complete()
            .nth(copy)
            .ok_or_else(|| UmoError::Config(format!("region {} has no copy {copy}", addr.region())))
    }

    /// How many complete copies `region` has (primary included; not those being
    /// filled).
    pub async fn copy_count(&self, region: dmc_verbs::RegionId) -> Result<usize, UmoError> {
        self.discover(region).await?;
        Ok(self.entry(region)?.complete().count())
    }

    /// The fewest complete copies any region this client knows has (every write this
    /// client acknowledged is on all of its region's complete copies); the configured
    /// replica count before it knows a region.
    pub fn fewest_copies(&self) -> usize {
        self.regions
            .read()
            .iter()
            .flatten()
            .map(|e| e.complete().count())
            .min()
            .unwrap_or(self.config().replicas)
    }

    /// Reads from copy `copy` of the region (0 = primary, 1.. = backups).
    pub async fn read_copy(
        &self,
        addr: GlobalAddr,
        copy: usize,
        buf: &mut [u8],
    ) -> Result<(), UmoError> {
        let n = self.copy_node(addr, copy).await?;
        let node = &self.nodes[n];
        node.read(addr.region(), addr.offset(), buf)
            .await
            .map_err(|e| UmoError::Node {
                node: node.node(),
                source: e,
            })
    }

    /// Writes `data` to copy `copy` of the region only: for recovery, which repairs
    /// one copy, and fault injection. Normal writes go to every copy.
    pub async fn write_copy(
        &self,
        addr: GlobalAddr,
        copy: usize,
        data: &[u8],
    ) -> Result<(), UmoError> {
        let n = self.copy_node(addr, copy).await?;
        let _permit = self.write_permit(addr, data.len() as u64).await?;
        let mut verbs = [Verb::Write {
            region: addr.region(),
            offset: addr.offset(),
            data,
        }];
        self.post_on(n, &mut verbs).await
    }

    /// Compare-and-swap on copy `copy` of the region only (recovery, fault injection);
    /// returns the word found.
    pub async fn cas_copy(
        &self,
        addr: GlobalAddr,
        copy: usize,
        expected: u64,
        new: u64,
    ) -> Result<u64, UmoError> {
        let n = self.copy_node(addr, copy).await?;
        let _permit = self.write_permit(addr, 8).await?;
        self.cas_on(n, addr, expected, new).await
    }

    /// A permit for a repair of one copy, the bytes marked dirty if the region has a
    /// copy being filled (which the repair does not reach).
    async fn write_permit(
        &self,
        addr: GlobalAddr,
        len: u64,
    ) -> Result<super::gate::Permit<'_>, UmoError> {
        if self.lease_lapsed() {
            return Err(UmoError::LeaseLapsed);
        }
        let permit = self.gate.enter(addr.region()).await?;
        if self.dirty.active()
            && self
                .entry(addr.region())
                .is_ok_and(|e| !e.filling.is_empty())
        {
            self.dirty.mark(addr.region(), addr.offset(), len);
        }
        Ok(permit)
    }

    /// Writes every range to every copy of its region: one posted batch per node. A
    /// copy's node that failed is waited out (its failover takes the copy out) and the
    /// writes repeated on the copies left: writing the same bytes twice is harmless, as
    /// nothing points at them yet.
    pub async fn write_all(&self, writes: &[(GlobalAddr, &[u8])]) -> Result<(), UmoError> {
        let mut tries = 0;
        loop {
            match self.write_all_once(writes).await {
                Err(e) if tries < FAILOVER_RETRIES => {
                    let regions: Vec<RegionId> = writes.iter().map(|(a, _)| a.region()).collect();
                    if !self.failed_over(&e, &regions).await {
                        return Err(e);
                    }
                    tries += 1;
                }
                done => return done,
            }
        }
    }

    async fn write_all_once(&self, writes: &[(GlobalAddr, &[u8])]) -> Result<(), UmoError> {
        if self.lease_lapsed() {
            return Err(UmoError::LeaseLapsed);
        }
        self.discover_all(self.unknown(writes.iter().map(|(a, _)| a.region())))
            .await?;
        let _permit = loop {
            match self.gate.try_enter(writes.iter().map(|(a, _)| a.region())) {
                Ok(p) => break p,
                Err(frozen) => self.gate.thawed(frozen).await?,
            }
        };
        let by_node = self.writes_per_node(writes, |_| true, true)?;
        self.post_per_node(by_node).await
    }

    /// Writes advisory metadata (access clocks, access-metadata entries) to every
    /// copy, as [`write_all`](Self::write_all) does, but never late: a write to a
    /// region being moved (frozen) is dropped rather than waited for, and a failed
    /// node is not waited out and retried. Such a write is blind; held back for
    /// seconds, it could land after its block was freed and reused.
    pub async fn write_advisory(&self, writes: &[(GlobalAddr, &[u8])]) -> Result<(), UmoError> {
        if self.lease_lapsed() {
            return Err(UmoError::LeaseLapsed);
        }
        let mut regions: Vec<RegionId> = writes.iter().map(|(a, _)| a.region()).collect();
        regions.sort_unstable();
        regions.dedup();
        regions.retain(|r| !self.gate.is_frozen(*r));
        let Ok(_permit) = self.gate.try_enter(regions.iter().copied()) else {
            return Ok(());
        };
        // A region this client has not learned yet is skipped: nothing of it was read.
        let by_node = self.writes_per_node(writes, |r| regions.binary_search(&r).is_ok(), false)?;
        self.post_per_node(by_node).await
    }

    /// `writes` (those whose region `keep` says) as a batch of verbs per node, every
    /// copy of each; a region being filled marks the bytes dirty. A region this client
    /// does not know is an error if `strict`, else skipped.
    fn writes_per_node<'a>(
        &self,
        writes: &'a [(GlobalAddr, &'a [u8])],
        keep: impl Fn(RegionId) -> bool,
        strict: bool,
    ) -> Result<BTreeMap<usize, Vec<Verb<'a>>>, UmoError> {
        let mut by_node: BTreeMap<usize, Vec<Verb<'a>>> = BTreeMap::new();
        let map = self.regions.read();
        for (addr, data) in writes {
            let region = addr.region();
            if !keep(region) {
                continue;
            }
            let Some(entry) = map.get(region as usize).and_then(|e| e.as_ref()) else {
                if strict {
                    return Err(UmoError::UnknownRegion(region));
                }
                continue;
            };
            if !entry.filling.is_empty() {
                self.dirty.mark(region, addr.offset(), data.len() as u64);
            }
            for n in entry.copies() {
                by_node.entry(n).or_default().push(Verb::Write {
                    region,
                    offset: addr.offset(),
                    data,
                });
            }
        }
        Ok(by_node)
    }

    async fn post_per_node(&self, by_node: BTreeMap<usize, Vec<Verb<'_>>>) -> Result<(), UmoError> {
        // Backends with the memory at hand complete inline; the rest run concurrently.
        let mut waiting = Vec::new();
        for (n, mut verbs) in by_node {
            let node = &self.nodes[n];
            match node.post_now(&mut verbs) {
                Some(r) => r.map_err(|e| UmoError::Node {
                    node: node.node(),
                    source: e,
                })?,
                None => waiting.push((n, verbs)),
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        let results = join_all(waiting.iter_mut().map(|(n, verbs)| {
            let node = &self.nodes[*n];
            async move {
                node.post(verbs).await.map_err(|e| UmoError::Node {
                    node: node.node(),
                    source: e,
                })
            }
        }))
        .await;
        results.into_iter().collect()
    }

    /// Fetch-and-add on a metadata counter (access statistics, the pool's usage): the
    /// primary takes the addition and the backups its result, see
    /// [`faa_mirrored`](Self::faa_mirrored). A per-copy addition agreed only while every
    /// client lived through its additions; a client killed between copies left them
    /// different for good (`faults.rs` caught it). Returns the primary's old value.
    pub async fn faa(&self, addr: GlobalAddr, add: u64) -> Result<u64, UmoError> {
        self.faa_mirrored(addr, add).await
    }

    /// A counter whose primary copy is authoritative: `add` is added at the primary
    /// alone and the sum written to every backup. An FAA on every copy, as
    /// [`faa`](Self::faa) does, leaves the copies different for good when its client
    /// dies between them; here a backup is at worst behind until the next change by
    /// any client. Adding 0 reads the primary alone (an idle client keeps no backup's
    /// connection busy). Returns the primary's value before the addition.
    pub async fn faa_mirrored(&self, addr: GlobalAddr, add: u64) -> Result<u64, UmoError> {
        if self.lease_lapsed() {
            return Err(UmoError::LeaseLapsed);
        }
        let region = addr.region();
        let primary = self.discover(region).await?;
        let _permit = self.gate.enter(region).await?;
        let copies: Vec<usize> = {
            let entry = self.entry(region)?;
            if !entry.filling.is_empty() {
                self.dirty.mark(region, addr.offset(), 8);
            }
            entry.copies().collect()
        };
        let mut verbs = [Verb::Faa {
            region,
            offset: addr.offset(),
            add,
            old: 0,
        }];
        self.post_on(primary, &mut verbs).await?;
        let [Verb::Faa { old, .. }] = verbs else {
            return Err(UmoError::UnknownRegion(region));
        };
        let now = old.wrapping_add(add).to_le_bytes();
        for n in copies.into_iter().filter(|&n| n != primary && add != 0) {
            let mut write = [Verb::Write {
                region,
                offset: addr.offset(),
                data: &now,
            }];
            if let Err(e) = self.post_on(n, &mut write).await {
                tracing::debug!(region, error = %e, "a backup missed a counter's value");
            }
        }
        Ok(old)
    }
}
