//! One-sided verbs on region copies: reads from the primary (completed inline when the
//! backend can, batched per node), writes to every copy, and fetch-and-add on the
//! primary. Called by object reads and writes, the superblock and the hash table.
//! Nothing here locks or validates: `write_all` is for bytes no committed word points at
//! yet, and words other clients validate change only through `commit`.

use std::collections::BTreeMap;

use dmc_verbs::Verb;
use futures::future::join_all;

use super::Pool;
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

    /// Fetch-and-add on the primary right now, if the backend completes verbs inline.
    pub fn faa_now(&self, addr: GlobalAddr, add: u64) -> Option<Result<u64, UmoError>> {
        let node = &self.nodes[self.primary(addr.region()).ok()?];
        let mut verbs = [Verb::Faa {
            region: addr.region(),
            offset: addr.offset(),
            add,
            old: 0,
        }];
        if let Err(e) = node.post_now(&mut verbs)? {
            return Some(Err(UmoError::Node {
                node: node.node(),
                source: e,
            }));
        }
        match verbs {
            [Verb::Faa { old, .. }] => Some(Ok(old)),
            _ => unreachable!("the batch holds the FAA it was built with"),
        }
    }

    /// Reads from the primary copy.
    pub async fn read(&self, addr: GlobalAddr, buf: &mut [u8]) -> Result<(), UmoError> {
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

    /// Reads several ranges from their primaries: one posted batch per node.
    pub async fn read_batch(&self, reads: &mut [(GlobalAddr, &mut [u8])]) -> Result<(), UmoError> {
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
            .copies()
            .nth(copy)
            .ok_or_else(|| UmoError::Config(format!("region {} has no copy {copy}", addr.region())))
    }

    /// How many copies `region` has (primary included).
    pub async fn copy_count(&self, region: dmc_verbs::RegionId) -> Result<usize, UmoError> {
        self.discover(region).await?;
        Ok(self.entry(region)?.copies().count())
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
        self.cas_on(n, addr, expected, new).await
    }

    /// Writes every range to every copy of its region: one posted batch per node.
    pub async fn write_all(&self, writes: &[(GlobalAddr, &[u8])]) -> Result<(), UmoError> {
        self.discover_all(self.unknown(writes.iter().map(|(a, _)| a.region())))
            .await?;
        let mut by_node: BTreeMap<usize, Vec<Verb<'_>>> = BTreeMap::new();
        {
            let regions = self.regions.read();
            for (addr, data) in writes {
                let entry = regions[addr.region() as usize]
                    .as_ref()
                    .ok_or(UmoError::UnknownRegion(addr.region()))?;
                for n in entry.copies() {
                    by_node.entry(n).or_default().push(Verb::Write {
                        region: addr.region(),
                        offset: addr.offset(),
                        data,
                    });
                }
            }
        }
        self.post_per_node(by_node).await
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

    /// Fetch-and-add on the primary copy (metadata counters; backups do not follow).
    pub async fn faa(&self, addr: GlobalAddr, add: u64) -> Result<u64, UmoError> {
        let node = &self.nodes[self.discover(addr.region()).await?];
        let mut verbs = [Verb::Faa {
            region: addr.region(),
            offset: addr.offset(),
            add,
            old: 0,
        }];
        match node.post_now(&mut verbs) {
            Some(r) => r.map_err(|e| UmoError::Node {
                node: node.node(),
                source: e,
            })?,
            None => node.post(&mut verbs).await.map_err(|e| UmoError::Node {
                node: node.node(),
                source: e,
            })?,
        }
        match verbs {
            [Verb::Faa { old, .. }] => Ok(old),
            _ => unreachable!("the batch holds the FAA it was built with"),
        }
    }
}
