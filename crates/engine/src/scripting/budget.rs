//! What the Rust side of scripting may spend walking a script's values: converting a
//! result to a reply, `redis.call`'s arguments, `cjson.encode`, `cmsgpack.pack`,
//! `struct.pack`. Their output lives outside Lua's memory limit, and a script can make
//! it grow without bound by reference: a table that holds itself, or one large string
//! named a thousand times. So each walk may produce at most one state's memory share
//! of bytes (what the script could have held itself) and visit at most [`NODES_MAX`]
//! values, and fails with an error past either.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Values one walk may visit (about half a second of work at worst).
pub const NODES_MAX: usize = 8 << 20;

/// The memory limit of each Lua state now (set when a state is taken from the pool).
static STATE_LIMIT: AtomicUsize =
    AtomicUsize::new(super::pool::DEFAULT_MEMORY_LIMIT / super::pool::STATES);

/// Records the per-state memory limit (the bytes one walk may produce).
pub(super) fn set_state_limit(bytes: usize) {
    STATE_LIMIT.store(bytes, Ordering::Relaxed);
}

/// Why a walk stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Exceeded {
    #[error("the value is larger than a script may build ({0} bytes)")]
    Bytes(usize),
    #[error("the value has more than {NODES_MAX} elements (a table that holds itself?)")]
    Nodes,
}

/// What is left to spend.
pub struct Budget {
    bytes: usize,
    limit: usize,
    nodes: usize,
}

impl Default for Budget {
    fn default() -> Self {
        let limit = STATE_LIMIT.load(Ordering::Relaxed);
        Budget {
            bytes: limit,
            limit,
            nodes: NODES_MAX,
        }
    }
}

impl Budget {
    /// Spends one value of `bytes` bytes.
    pub fn spend(&mut self, bytes: usize) -> Result<(), Exceeded> {
        self.nodes = self.nodes.checked_sub(1).ok_or(Exceeded::Nodes)?;
        self.bytes = self
            .bytes
            .checked_sub(bytes)
            .ok_or(Exceeded::Bytes(self.limit))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_stops_at_its_bytes_or_its_nodes() {
        let mut b = Budget {
            bytes: 10,
            limit: 10,
            nodes: 3,
        };
        assert_eq!(b.spend(4), Ok(()));
        assert_eq!(b.spend(6), Ok(()));
        assert_eq!(b.spend(1), Err(Exceeded::Bytes(10)));
        let mut b = Budget {
            bytes: 100,
            limit: 100,
            nodes: 2,
        };
        assert_eq!(b.spend(0), Ok(()));
        assert_eq!(b.spend(0), Ok(()));
        assert_eq!(b.spend(0), Err(Exceeded::Nodes));
    }
}
