//! The memory nodes a pool client reaches, growing while it runs: a cluster gains a
//! memory node, and every agent adds it when its map names it (so the manager can
//! place copies there without restarting the agents).
//!
//! Indexed on every verb (region entries name their copies by index), so reads take no
//! lock: a fixed array of write-once slots filled in order, and a length published
//! after its slot is set. Node ids map to indexes under a lock (placements and
//! failover use it, not the verb path). Nodes are never removed: a failed node's index
//! stays, and region entries stop naming it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use dmc_verbs::{NodeId, Transport};
use hashbrown::HashMap;
use parking_lot::{Mutex, RwLock};

use super::load;
use crate::error::UmoError;

/// Most memory nodes one client reaches.
pub const MAX_NODES: usize = 1024;

pub(crate) struct NodeTable {
    slots: Box<[OnceLock<Arc<dyn Transport>>]>,
    /// The same nodes' timing wrappers, for the load report.
    timed: Box<[OnceLock<Arc<load::Timed>>]>,
    len: AtomicUsize,
    index: RwLock<HashMap<NodeId, usize>>,
    /// One addition at a time (slots are filled in order).
    adding: Mutex<()>,
    tallies: Arc<load::RegionTallies>,
}

impl NodeTable {
    /// A table of `nodes` (each timed for the load report); ids must be distinct.
    pub(crate) fn new(
        nodes: Vec<Arc<dyn Transport>>,
        tallies: Arc<load::RegionTallies>,
    ) -> Result<NodeTable, UmoError> {
        let table = NodeTable {
            slots: (0..MAX_NODES).map(|_| OnceLock::new()).collect(),
            timed: (0..MAX_NODES).map(|_| OnceLock::new()).collect(),
            len: AtomicUsize::new(0),
            index: RwLock::new(HashMap::new()),
            adding: Mutex::new(()),
            tallies,
        };
        for n in nodes {
            let id = n.node();
            if !table.add(n)? {
                return Err(UmoError::Config(format!(
                    "memory node id {id} appears twice"
                )));
            }
        }
        Ok(table)
    }

    /// Adds a node; false if one with its id is there already.
    pub(crate) fn add(&self, node: Arc<dyn Transport>) -> Result<bool, UmoError> {
        let _one = self.adding.lock();
        let id = node.node();
        if self.index.read().contains_key(&id) {
            return Ok(false);
        }
        let at = self.len.load(Ordering::Relaxed);
        let (Some(slot), Some(timed)) = (self.slots.get(at), self.timed.get(at)) else {
            return Err(UmoError::Config(format!(
                "a pool reaches at most {MAX_NODES} memory nodes"
            )));
        };
        // Neither is set yet: slots fill in order, one addition at a time.
        let t = load::Timed::wrap(node, self.tallies.clone());
        let _ = timed.set(t.clone());
        let _ = slot.set(t);
        self.len.store(at + 1, Ordering::Release);
        self.index.write().insert(id, at);
        Ok(true)
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Node `i`'s transport, if the table has it.
    pub(crate) fn get(&self, i: usize) -> Option<&Arc<dyn Transport>> {
        if i >= self.len() {
            return None;
        }
        self.slots.get(i).and_then(OnceLock::get)
    }

    /// The index of node `id`.
    pub(crate) fn index_of(&self, id: NodeId) -> Option<usize> {
        self.index.read().get(&id).copied()
    }

    /// Every node, in index order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<dyn Transport>> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Every node's timing wrapper.
    pub(crate) fn timed(&self) -> impl Iterator<Item = &Arc<load::Timed>> + '_ {
        (0..self.len()).filter_map(|i| self.timed.get(i).and_then(OnceLock::get))
    }
}

impl std::ops::Index<usize> for NodeTable {
    type Output = Arc<dyn Transport>;

    /// Node `i`. Indexes come from this table (region entries are built from
    /// [`NodeTable::index_of`]), and slots are never emptied, so `i` is always there.
    fn index(&self, i: usize) -> &Self::Output {
        match self.get(i) {
            Some(n) => n,
            None => panic!("memory node index {i} is not in the pool's table"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmc_verbs::{LocalTransport, NodeConfig, NodeCore, Storage};

    fn node(id: u32) -> Arc<dyn Transport> {
        let core = NodeCore::open(NodeConfig {
            id,
            capacity: 1 << 20,
            storage: Storage::Heap,
            secret: None,
        })
        .unwrap();
        Arc::new(LocalTransport::new(core))
    }

    #[test]
    fn nodes_are_added_once_in_order_and_found_by_id() {
        let t = NodeTable::new(vec![node(4), node(2)], load::RegionTallies::new()).unwrap();
        assert_eq!(t.len(), 2);
        assert!(t.add(node(7)).unwrap());
        assert!(!t.add(node(2)).unwrap(), "known already");
        assert_eq!(t.len(), 3);
        assert_eq!(t.index_of(7), Some(2));
        assert_eq!(t[2].node(), 7);
        assert_eq!(t.iter().map(|n| n.node()).collect::<Vec<_>>(), [4, 2, 7]);
        assert!(t.get(3).is_none());
        assert!(NodeTable::new(vec![node(1), node(1)], load::RegionTallies::new()).is_err());
    }
}
