//! Shared types of every DMC process (shard map, region map, epochs, control messages).
//!
//! Filled in by the cluster-manager work; the memory pool does not depend on it yet.
