//! Prefetch hints: start loading bytes of region copies whose memory is in this address
//! space into this core's cache (see `Transport::prefetch`), one hint or many at once
//! (one look at each node's region map per batch, not per hint). A hint never fails
//! or waits; over the network it does nothing and takes no lock.

use dmc_verbs::RegionId;
use smallvec::SmallVec;

use super::Pool;
use crate::addr::GlobalAddr;

/// Hints for one node, as `Transport::prefetch_many` takes them.
type NodeHints = SmallVec<[(RegionId, u64, usize); 16]>;

impl Pool {
    /// Starts loading `len` bytes at `addr` of the primary copy into this core's cache,
    /// if its memory is in this address space (see `Transport::prefetch`); nothing for
    /// a region this client has not learned. A hint: it never fails or waits.
    pub fn prefetch(&self, addr: GlobalAddr, len: usize) {
        if let Ok(n) = self.primary(addr.region())
            && self.nodes[n].completes_inline()
        {
            self.nodes[n].prefetch(addr.region(), addr.offset(), len);
        }
    }

    /// [`prefetch`](Self::prefetch) on every copy: for bytes about to be written (the
    /// object of a write, a slot's CAS), which every copy takes.
    pub fn prefetch_copies(&self, addr: GlobalAddr, len: usize) {
        // With one copy the primary is all there is (a copy being filled, rarely, goes
        // without: a hint may miss), and its lookup takes no lock.
        if self.config.replicas <= 1 {
            return self.prefetch(addr, len);
        }
        // Over the network a hint does nothing: not worth the map's lock.
        match self.primary(addr.region()) {
            Ok(n) if self.nodes[n].completes_inline() => {}
            _ => return,
        }
        if let Some(Some(entry)) = self.regions.read().get(addr.region() as usize) {
            for n in entry.copies() {
                self.nodes[n].prefetch(addr.region(), addr.offset(), len);
            }
        }
    }

    /// [`prefetch`](Self::prefetch) of many ranges (address, length): one batch per
    /// node.
    pub fn prefetch_many(&self, ranges: &[(GlobalAddr, usize)]) {
        self.hint_per_node(
            ranges
                .iter()
                .filter_map(|&(a, len)| Some((self.primary(a.region()).ok()?, a, len))),
        );
    }

    /// [`prefetch_copies`](Self::prefetch_copies) of many ranges: one batch per node,
    /// the region map's lock taken once.
    pub fn prefetch_copies_many(&self, ranges: &[(GlobalAddr, usize)]) {
        if self.config.replicas <= 1 {
            return self.prefetch_many(ranges);
        }
        // Over the network a hint does nothing: not worth the map's lock.
        let Some(&(first, _)) = ranges.first() else {
            return;
        };
        match self.primary(first.region()) {
            Ok(n) if self.nodes[n].completes_inline() => {}
            _ => return,
        }
        let regions = self.regions.read();
        self.hint_per_node(ranges.iter().flat_map(|&(a, len)| {
            regions
                .get(a.region() as usize)
                .and_then(|e| e.as_ref())
                .into_iter()
                .flat_map(move |e| e.copies().map(move |n| (n, a, len)))
        }));
    }

    /// Sends `hints` (node index, address, length) as one batch per node whose memory
    /// is in this address space.
    fn hint_per_node(&self, hints: impl Iterator<Item = (usize, GlobalAddr, usize)>) {
        let mut by_node: SmallVec<[(usize, NodeHints); 2]> = SmallVec::new();
        for (n, a, len) in hints {
            let at = match by_node.iter().position(|(m, _)| *m == n) {
                Some(at) => at,
                None if self.nodes[n].completes_inline() => {
                    by_node.push((n, NodeHints::new()));
                    by_node.len() - 1
                }
                None => continue,
            };
            by_node[at].1.push((a.region(), a.offset(), len));
        }
        for (n, hints) in &by_node {
            self.nodes[*n].prefetch_many(hints);
        }
    }
}
