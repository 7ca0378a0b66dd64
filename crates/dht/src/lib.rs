//! The disaggregated hash table and its client-centric caching (DESIGN.md §4).
//!
//! | module | owns |
//! |---|---|
//! | [`layout`] | root, directories, subtables, buckets, slot words and metadata |
//! | [`hash`] | Redis hash slots (CRC16) and placement hashes |
//! | [`table`] | [`Dht`]: get, set (NX/XX, expiry), delete, expire, scan, eviction |
//! | [`policy`] | the `update`/`priority` policy interface and Redis's policies |
//! | [`algorithms`] | Ditto's twelve caching algorithms as `priority`/`update` pairs |
//! | [`owner`] | which hash slots this client writes, under which epoch |
//! | [`clock`] | time as an input |
//!
//! Below it is `dmc-umo` (pool memory, objects, transactions); above it the compute
//! agent's engine. The table stores bytes; Redis types are the engine's business.

pub mod adaptive;
pub mod algorithms;
pub mod clock;
pub mod hash;
pub mod layout;
pub mod owner;
pub mod policy;
pub(crate) use dmc_proto::rng;
pub mod table;

pub use clock::{Clock, ManualClock, SystemClock};
pub use dmc_umo::ValueKind;
pub use owner::{Lease, Ownership};
pub use policy::{Policy, RedisPolicy};
pub use table::{
    AdaptiveStatus, Change, Dht, DhtConfig, DhtError, DhtStats, Entry, Removal, SetCond, SetExpiry,
    SetOptions, SetOutcome, SlotRef, Staged, Ttl, groups_within_shards, slot_group_bits,
};
