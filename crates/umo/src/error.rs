//! The ways a pool operation fails.

use dmc_verbs::{NodeId, RegionId, VerbsError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UmoError {
    #[error("memory node {node}: {source}")]
    Node {
        node: NodeId,
        #[source]
        source: VerbsError,
    },
    #[error("the pool is out of memory: {0}")]
    OutOfMemory(String),
    #[error("value of {0} bytes exceeds the {max} byte limit", max = crate::object::MAX_OBJECT)]
    TooLarge(u64),
    #[error("region {0} is not in the region map")]
    UnknownRegion(RegionId),
    #[error("pool layout: {0}")]
    Layout(String),
    #[error("configuration: {0}")]
    Config(String),
    #[error("another client is formatting the pool")]
    Formatting,
    /// The region stayed frozen (its copies are being moved) longer than a write
    /// waits; nothing was written.
    #[error("region {0} is being moved; nothing was written")]
    Frozen(RegionId),
    /// This client's lease with the cluster manager ran out: it writes nothing until a
    /// heartbeat is accepted again (its shards may be someone else's by now).
    #[error("this client's lease lapsed; nothing was written")]
    LeaseLapsed,
    /// An inline operation met a copy that cannot complete verbs now (its connection not
    /// open yet, its region not mapped yet): nothing is left applied; the awaited path
    /// does it.
    #[error("memory node {0} cannot complete verbs inline now; nothing was written")]
    NotInline(NodeId),
}

impl UmoError {
    pub fn node(node: NodeId) -> impl FnOnce(VerbsError) -> UmoError {
        move |source| UmoError::Node { node, source }
    }

    /// Whether the address itself was refused (no such region, out of its bounds): what
    /// a reference into freed and reused memory meets, unlike a failure of the node or
    /// of the way to it.
    pub fn is_bad_address(&self) -> bool {
        matches!(
            self,
            UmoError::UnknownRegion(_)
                | UmoError::Node {
                    source: VerbsError::NoSuchRegion(_)
                        | VerbsError::OutOfBounds { .. }
                        | VerbsError::Misaligned { .. },
                    ..
                }
        )
    }
}
