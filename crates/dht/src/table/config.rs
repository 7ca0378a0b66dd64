//! What callers pass to the table and get back: [`DhtConfig`], [`DhtError`], set
//! options and outcomes, [`Entry`] and its [`SlotRef`], [`Ttl`], [`DhtStats`].
//!
//! Plain data, re-exported by `table` and the crate root under these names, which the
//! engine depends on. Nothing here touches the pool.

use bytes::Bytes;
use dmc_umo::{GlobalAddr, UmoError, ValueKind};

use crate::layout::SlotMeta;
use crate::policy::RedisPolicy;

// Only the docs name the handle.
#[cfg(doc)]
use super::Dht;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DhtError {
    #[error(transparent)]
    Pool(UmoError),
    /// Redis's `noeviction` error, or nothing left that the policy may evict.
    #[error("OOM command not allowed when used memory > 'maxmemory'.")]
    OutOfMemory,
    /// This client does not own the key's hash slot (or was fenced off it).
    #[error("hash slot {0} is owned by another agent")]
    NotOwner(u16),
    /// This client's lease ran out (its heartbeats stopped being accepted): it starts
    /// no write until one is accepted again.
    #[error("this agent's lease lapsed: the cluster manager has not answered its heartbeats")]
    LeaseExpired,
    #[error("the table is corrupt or was written by an incompatible version: {0}")]
    Corrupt(String),
    #[error("too much contention on hash slot {0}; try again")]
    Contention(u16),
    /// The key holds a value of another type than the operation works on.
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    /// A request this table cannot serve (the text says which and why).
    #[error("{0}")]
    Unsupported(String),
}

impl From<UmoError> for DhtError {
    /// A pool that cannot grow (no region left within maxmemory) is Redis's OOM.
    fn from(e: UmoError) -> Self {
        match e {
            UmoError::OutOfMemory(_) => DhtError::OutOfMemory,
            e => DhtError::Pool(e),
        }
    }
}

#[derive(Debug, Clone)]
pub struct DhtConfig {
    /// Buckets per subtable (a power of two); 4 buckets are 512 bytes.
    pub buckets_per_subtable: u32,
    /// Hash slots share one directory in groups of `2^slot_group_bits` consecutive
    /// slots (at most [`MAX_SLOT_GROUP_BITS`](crate::layout::MAX_SLOT_GROUP_BITS)), so
    /// a small instance does not spend its memory on 16384 near-empty subtables; see
    /// [`slot_group_bits`]. Only a table created now takes it: an existing table keeps
    /// its own.
    pub slot_group_bits: u32,
    /// Bytes of pool memory this instance may use (0: unlimited).
    pub maxmemory: u64,
    pub policy: RedisPolicy,
    /// Keys sampled per eviction (`maxmemory-samples`; 0: every key, see [`Dht::set_samples`]).
    pub samples: usize,
    /// Local hits combined before their metadata updates are sent.
    pub hit_batch: usize,
    /// The experts `maxmemory-policy adaptive` runs (`adaptive-experts`).
    pub adaptive_experts: Vec<crate::adaptive::Expert>,
}

impl Default for DhtConfig {
    fn default() -> Self {
        Self {
            buckets_per_subtable: 4,
            slot_group_bits: 0,
            maxmemory: 0,
            policy: RedisPolicy::NoEviction,
            samples: 5,
            hit_batch: 64,
            adaptive_experts: vec![crate::adaptive::Expert::Lru, crate::adaptive::Expert::Lfu],
        }
    }
}

/// The slot-group size for a table of an instance limited to `maxmemory` bytes (0:
/// unlimited) with `buckets` buckets per subtable: the smallest groups whose empty
/// partitions (a subtable and a directory each) together cost at most 1/32 of
/// `maxmemory`, so the index grows with the keys rather than with the 16384 hash slots
/// (a 1-slot group on an 8 MB instance spent the whole 8 MB on subtables). A group
/// never spans two shards (`shard_of`: the shard of a hash slot), since one shard's
/// owner alone writes a partition.
pub fn slot_group_bits(maxmemory: u64, buckets: u32, shard_of: impl Fn(u16) -> u32) -> u32 {
    if maxmemory == 0 {
        return 0;
    }
    let per_partition = u64::from(buckets) * crate::layout::BUCKET + 64;
    let budget = maxmemory / 32;
    let slots = crate::layout::HASH_SLOTS as u64;
    let mut bits = 0;
    while bits < crate::layout::MAX_SLOT_GROUP_BITS && (slots >> bits) * per_partition > budget {
        bits += 1;
    }
    // The largest size up to that which keeps every group inside one shard.
    while bits > 0 && !groups_within_shards(bits, &shard_of) {
        bits -= 1;
    }
    bits
}

/// Whether every group of `2^bits` consecutive hash slots lies inside one shard.
pub fn groups_within_shards(bits: u32, shard_of: &impl Fn(u16) -> u32) -> bool {
    let size = 1usize << bits;
    (0..crate::layout::HASH_SLOTS)
        .step_by(size)
        .all(|first| shard_of(first as u16) == shard_of((first + size - 1) as u16))
}

/// The condition of a set (`NX` / `XX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetCond {
    #[default]
    Always,
    IfAbsent,
    IfPresent,
}

/// What a set does to the key's time to live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetExpiry {
    /// Remove any TTL (plain `SET`).
    #[default]
    Clear,
    /// Keep the existing TTL (`KEEPTTL`).
    Keep,
    /// Expire at this Unix time in milliseconds.
    At(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetOptions {
    pub cond: SetCond,
    pub expiry: SetExpiry,
    /// Return the previous value (`SET … GET`); a previous value that is not a string
    /// is [`DhtError::WrongType`] and nothing is written.
    pub get: bool,
    /// The type of the value written.
    pub kind: ValueKind,
}

/// What a read-modify-write ([`Dht::update`]) does with the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Nothing: the key stays as it is.
    Keep,
    /// The key's new value (its type is the update's).
    Write(Bytes),
    /// A new value that shares the old one's chunk tree (a copy-on-write update, which
    /// frees the chunks it replaced itself): only the old object's own block is freed.
    WriteSharing(Bytes),
    /// Remove the key (a collection left empty).
    Delete,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetOutcome {
    pub written: bool,
    /// The previous value, when asked for with [`SetOptions::get`].
    pub old: Option<Bytes>,
}

/// A key's value with its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub value: Bytes,
    /// The value's type: a string, or a collection's encoding (see `dmc_engine`).
    pub kind: ValueKind,
    /// Unix time in ms when the key expires.
    pub expire_at: Option<u64>,
    /// Seconds since the last access (LRU clock).
    pub idle_secs: u64,
    /// The LFU counter, decayed.
    pub lfu: u8,
    /// Where the key's metadata is, for reporting hits served elsewhere (a local cache)
    /// with [`Dht::record_hit`].
    pub slot: SlotRef,
}

/// A key's metadata word in the table, as last seen, and when. A reference is only
/// used while it is younger than half the pool's reuse grace period: after that the
/// slot's subtable may have been split, freed and reused, and an FAA there would
/// corrupt whatever lives there now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRef {
    pub(super) meta_addr: GlobalAddr,
    pub(super) meta: SlotMeta,
    pub(super) seen: std::time::Instant,
    /// The key's access-metadata entry, if its subtable has one.
    pub(super) ext: Option<GlobalAddr>,
    /// The key's fingerprint (its access-metadata entry must carry it).
    pub(super) fp: u8,
}

impl SlotRef {
    /// The address of the key's metadata word (the slot's second word).
    pub fn meta_addr(&self) -> GlobalAddr {
        self.meta_addr
    }
}

/// A key's time to live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    Missing,
    Persistent,
    /// Unix time in ms.
    ExpiresAt(u64),
}

/// Counters of one client's view of the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DhtStats {
    pub keys: i64,
    pub hits: u64,
    pub misses: u64,
    pub evicted: u64,
    pub expired: u64,
    pub splits: u64,
    /// Slot words a stopped single-key commit left locked that this client resolved
    /// (rolled forward or unlocked).
    pub recovered_commits: u64,
    /// Slot metadata words a backup held differently from the primary (a writer
    /// stopped between the two), set to the primary's when a shard was taken over.
    pub repaired_meta: u64,
    /// Accesses not applied to access-metadata entries: more were queued than a
    /// flush takes (the inline read path queues them for the next flush).
    pub accesses_dropped: u64,
    pub retries: u64,
    pub used_memory: u64,
    pub partitions: u64,
    /// Two-phase commit batches the group committer has in flight.
    pub commit_batches_in_flight: u64,
}

pub(super) fn corrupt(what: impl Into<String>) -> DhtError {
    DhtError::Corrupt(what.into())
}
