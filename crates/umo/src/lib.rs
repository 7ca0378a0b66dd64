//! UMO, the unified memory-pool client: the pool as the hash table sees it.
//!
//! | module | owns |
//! |---|---|
//! | [`addr`] | 48-bit global addresses `(region, offset)` |
//! | [`layout`] | the superblock (region map, root) and per-region segment tables |
//! | [`classes`] | the size-class table (part of the pool format) |
//! | [`alloc`] | segments → blocks, free lists and the reuse grace period |
//! | [`object`] | the object format: header, key, value, checksum, chaining |
//! | [`pool`] | [`Pool`]: replicated writes, verified reads, OCC + 2PC commits |
//!
//! Below it is `dmc-verbs` (transports); above it `dmc-dht` (the hash table). UMO
//! never interprets a hash-table word: it moves bytes and commits words.

pub mod addr;
pub mod alloc;
pub mod chunk;
pub mod classes;
pub mod error;
pub mod layout;
pub mod object;
pub mod pool;

pub use addr::GlobalAddr;
pub use alloc::Block;
pub use dmc_verbs::node::WORD_LOCK;
pub use error::UmoError;
pub use layout::RegionRecord;
pub use object::ValueKind;
pub use pool::{
    DirtyChunks, FILL_CHUNK, LatencySample, LoadReport, ObjectRef, Placement, Pool, PoolConfig,
    PoolStats, ReadObject, RegionSource, Settled, SlotRecovery, SlotWrite, StoredObject, Tx,
    TxOutcome, TxWrite,
};
