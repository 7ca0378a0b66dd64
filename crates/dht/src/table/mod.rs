//! The disaggregated hash table: [`Dht`] is one client's handle on the table all agents
//! of an instance share.
//!
//! Reads are one-sided: a get reads the key's two candidate buckets in one batch, then
//! the object a fingerprint-matching slot points at, and verifies key and checksum.
//! Writes are out of place and owned: the owner of the key's hash slot writes the object
//! to every copy, then commits the slot word (validated against the bucket header, so a
//! concurrent split is detected) through a group committer that batches transactions per
//! memory node. Subtables split on demand (extendible hashing per hash slot); a split
//! retires the old subtable by setting MOVED in its bucket headers in the same
//! transaction that updates the directory, so readers with a stale directory notice.
//!
//! Expired keys are never returned; a reader that owns the slot deletes them on the way
//! (lazy expiry) and [`Dht::active_expire`] samples for them. When used memory passes
//! `maxmemory`, the owner samples `K` slots and evicts the lowest priority of its policy.
//!
//! This file holds the handle's state, settings and counters; each job has a file:
//!
//! | file | owns |
//! |---|---|
//! | `config` | configuration, errors, the options and outcomes callers see |
//! | `open` | opening or creating the table, counting keys on open |
//! | `dir` | cached directories and their lock-free flat copy |
//! | `probe` | reading a key's candidate buckets and finding it there |
//! | `read` | the GET paths, `peek`, `exists`, `ttl` |
//! | `hits` | access metadata: recorded, combined, sent as FAAs |
//! | `write` | `set`, `set_many` and installing a written object |
//! | `write_now` | `set_now` and `update_now`: SET and INCR's kin without futures on in-process memory |
//! | `update` | read-modify-write of one key in one probe (INCR and its kin) |
//! | `commit` | the group committer and retry pacing |
//! | `delete` | clearing a slot, `delete` |
//! | `expire` | TTL changes, lazy and active expiry |
//! | `partition` | creating, splitting and rebuilding subtables |
//! | `rebuild_gate` | the per-slot gates inline writes enter and rebuilds close |
//! | `evict` | making room, sampling and evicting per the policy |
//! | `adaptive` | the adaptive policy: expert picks, history entries, regret, weights |
//! | `vacate` | emptying a memory range or a region |
//! | `scan` | a hash slot's keys |
//! | `staged` | transactions that stage their writes and commit them at once |
//! | `db_map` | logical to stored database numbers, `SWAPDB` |
//! | `maintenance` | the background upkeep task |
//! | `recover` | half-done single-key commits resolved when a shard is gained |
//! | `meta_repair` | slot metadata words levelled across copies when a shard is gained |

mod access;
pub(crate) use access::inline_access;
mod adaptive;
mod commit;
mod config;
mod db_map;
mod delete;
mod dir;
mod evict;
mod expire;
mod hits;
mod maintenance;
mod meta_repair;
mod open;
mod partition;
mod pool_view;
mod prefetch;
mod probe;
mod read;
mod rebuild_gate;
mod recover;
mod scan;
mod send_turn;
mod staged;
mod update;
mod vacate;
mod write;
mod write_now;

pub use adaptive::AdaptiveStatus;
pub use config::{
    Change, DhtConfig, DhtError, DhtStats, Entry, SetCond, SetExpiry, SetOptions, SetOutcome,
    SlotRef, Ttl, groups_within_shards, slot_group_bits,
};
pub use staged::Staged;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use bytes::Bytes;
use dmc_umo::{GlobalAddr, Pool};
use parking_lot::{Mutex, RwLock};
use tokio::sync::mpsc;

use crate::clock::Clock;
use crate::hash::{fingerprint, key_hash, key_slot};
use crate::layout::{self, SlotMeta, SlotWord};
use crate::owner::{Lease, Ownership};
use crate::policy::{Now, RedisPolicy};
use commit::CommitJob;
use config::corrupt;
use dir::{Dir, FlatDirs};
use hits::PendingHit;

/// Optimistic retries before an operation gives up.
const MAX_RETRIES: usize = 256;

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    evicted: AtomicU64,
    expired: AtomicU64,
    splits: AtomicU64,
    retries: AtomicU64,
    /// Slot words left locked by a stopped single-key commit, resolved.
    recovered: AtomicU64,
    /// Backup metadata words set to the primary's at a takeover.
    meta_repaired: AtomicU64,
    /// Accesses not applied to access-metadata entries because too many were queued.
    accesses_dropped: AtomicU64,
}

/// A key's coordinates.
#[derive(Debug, Clone, Copy)]
struct Loc {
    db: u8,
    /// The partition the key is stored in: the first hash slot of its slot group
    /// ([`Dht::partition_of`]); everything that finds, locks or rebuilds the key's
    /// subtables goes by it.
    slot: u16,
    /// The key's own hash slot (what errors name).
    key_slot: u16,
    hash: u64,
    fp: u8,
}

/// A key found in the table.
#[derive(Debug, Clone)]
struct Found {
    bucket: usize,
    addr: GlobalAddr,
    word: SlotWord,
    meta: SlotMeta,
    value: Option<Bytes>,
    /// The value's type (a string when the object was not read).
    kind: dmc_umo::ValueKind,
    /// The slot's access-metadata entry, when its subtable has that area.
    ext: Option<GlobalAddr>,
}

pub struct Dht {
    pool: Arc<Pool>,
    clock: Arc<dyn Clock>,
    root: GlobalAddr,
    buckets: u64,
    /// Hash slots share partitions in groups of `2^group_bits` (the table's setting).
    group_bits: u32,
    maxmemory: AtomicU64,
    /// See [`Dht::set_eviction_limit`].
    evict_at: AtomicU64,
    /// When [`Dht::keep_spare_segment`] last emptied a segment.
    spare_started: Mutex<Option<std::time::Instant>>,
    samples: AtomicU64,
    /// Index into [`RedisPolicy::ALL`].
    policy: std::sync::atomic::AtomicU8,
    hit_batch: usize,
    /// Every memory node's memory is in this address space: a get reads its first
    /// bucket alone and reads the second only when the key is not in the first.
    inline_reads: bool,
    /// Every memory node is in this process: commits are function calls.
    inline_calls: bool,
    owner: Ownership,
    dirs: Vec<RwLock<Option<Arc<Dir>>>>,
    flat: FlatDirs,
    /// Per hash slot: held exclusively while its subtables are rebuilt (split, moved),
    /// shared by awaited writers that must not race a rebuild (one-sided single-key
    /// writes, which no bucket-header validation protects, and metadata-only changes).
    locks: Vec<tokio::sync::RwLock<()>>,
    /// Per hash slot: what inline writes (`write_now`) enter instead of `locks`, and a
    /// rebuild closes after taking its lock ([`Dht::lock_for_rebuild`]).
    gates: rebuild_gate::RebuildGates,
    partitions: RwLock<Vec<u16>>,
    commits: mpsc::UnboundedSender<CommitJob>,
    /// Batches the group committer has in flight.
    commit_batches: Arc<AtomicU64>,
    hits: Mutex<Vec<PendingHit>>,
    /// Held while a batch of `hits` is being sent: one at a time.
    hits_sending: send_turn::SendTurn,
    /// Accesses waiting to be applied to access-metadata entries (`access.rs`).
    accesses: Mutex<Vec<access::PendingAccess>>,
    /// Held while `accesses` are being applied: one flush at a time.
    accesses_flushing: send_turn::SendTurn,
    /// This client's inflation value `L` (f64 bits) for GDS, GDSF and LFUDA.
    inflation: AtomicU64,
    /// Keys per database in the slots this client owns.
    keys: Box<[AtomicI64]>,
    /// Of those, keys with a time to live (INFO's `expires=`).
    volatile: Box<[AtomicI64]>,
    counters: Counters,
    removed: RwLock<Option<RemovedHook>>,
    /// Slot words (with their hash slot) this client's failed single-key commits may
    /// have left locked, for `recover_in_doubt`.
    in_doubt: Mutex<Vec<(u16, GlobalAddr)>>,
    /// Logical database -> the database number keys are stored under (SWAPDB).
    db_map: Box<[std::sync::atomic::AtomicU8]>,
    adaptive: adaptive::Adaptive,
}

/// A slot held for a rebuild ([`Dht::lock_for_rebuild`]): the gate opens, then the
/// lock is released, when dropped.
struct RebuildGuard<'a> {
    _closed: Option<rebuild_gate::Closed<'a>>,
    _locked: tokio::sync::RwLockWriteGuard<'a, ()>,
}

type RemovedHook = Box<dyn Fn(u8, &[u8], Removal) + Send + Sync>;

/// Why the table removed a key on its own (not a client's delete).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Evicted for room (the policy's pick, or a segment being emptied).
    Evicted,
    /// Reclaimed past its expiry (by a reader, a writer or active expiry).
    Expired,
}

fn policy_index(p: RedisPolicy) -> u8 {
    RedisPolicy::ALL.iter().position(|q| *q == p).unwrap_or(0) as u8
}

impl Dht {
    /// The pool under the table, for opening another table client on it (tests,
    /// tools). The engine and the agent use the narrower view in `pool_view.rs`.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    pub fn ownership(&self) -> &Ownership {
        &self.owner
    }

    /// Evict already at `bytes` of live data, below maxmemory (0: at maxmemory): a
    /// cluster's pool holds less than its regions' bytes (headers, partly used segments).
    pub fn set_eviction_limit(&self, bytes: u64) {
        self.evict_at.store(bytes, Ordering::Relaxed);
    }

    /// Where eviction starts: maxmemory, or the lower eviction limit if one is set.
    pub fn eviction_limit(&self) -> u64 {
        match (self.maxmemory(), self.evict_at.load(Ordering::Relaxed)) {
            (0, _) => 0,
            (max, 0) => max,
            (max, at) => max.min(at),
        }
    }

    pub fn set_maxmemory(&self, bytes: u64) {
        self.maxmemory.store(bytes, Ordering::Relaxed);
    }

    pub fn maxmemory(&self) -> u64 {
        self.maxmemory.load(Ordering::Relaxed)
    }

    pub fn set_policy(&self, p: RedisPolicy) {
        self.policy.store(policy_index(p), Ordering::Relaxed);
    }

    pub fn policy(&self) -> RedisPolicy {
        RedisPolicy::ALL[self.policy.load(Ordering::Relaxed) as usize % RedisPolicy::ALL.len()]
    }

    /// Keys sampled per eviction (`maxmemory-samples`); 0 compares every key the
    /// client owns (exact, and as slow as that sounds: for tests and studies).
    pub fn set_samples(&self, k: usize) {
        self.samples.store(k as u64, Ordering::Relaxed);
    }

    pub fn samples(&self) -> usize {
        self.samples.load(Ordering::Relaxed) as usize
    }

    /// Pool bytes in use by this instance: objects and index, as allocated.
    /// Bytes of live blocks in the instance's pool, every agent's (what `maxmemory`
    /// limits).
    pub fn used_memory(&self) -> u64 {
        self.pool.used_bytes()
    }

    /// Keys in the slots this client owns (expired ones not yet reclaimed included, as
    /// Redis's `DBSIZE`).
    pub fn key_count(&self) -> i64 {
        self.keys.iter().map(|k| k.load(Ordering::Relaxed)).sum()
    }

    /// Keys of database `db` in the slots this client owns (as Redis's `DBSIZE`).
    pub fn key_count_db(&self, db: u8) -> i64 {
        self.keys[db as usize].load(Ordering::Relaxed)
    }

    /// Adjusts the key counts of `db`: `keys` more keys, and the volatile count by
    /// whether the metadata before (`from`) and after (`to`) carry a TTL.
    fn count_key(&self, db: u8, keys: i64, from: Option<SlotMeta>, to: Option<SlotMeta>) {
        if keys != 0 {
            self.keys[db as usize].fetch_add(keys, Ordering::Relaxed);
        }
        let ttl = |m: Option<SlotMeta>| i64::from(m.is_some_and(|m| m.expire() != 0));
        let delta = ttl(to) - ttl(from);
        if delta != 0 {
            self.volatile[db as usize].fetch_add(delta, Ordering::Relaxed);
        }
    }

    /// Keys of `db` with a time to live, in the slots this client owns.
    pub fn volatile_count_db(&self, db: u8) -> i64 {
        self.volatile[db as usize].load(Ordering::Relaxed).max(0)
    }

    pub fn stats(&self) -> DhtStats {
        DhtStats {
            keys: self.key_count(),
            hits: self.counters.hits.load(Ordering::Relaxed),
            misses: self.counters.misses.load(Ordering::Relaxed),
            evicted: self.counters.evicted.load(Ordering::Relaxed),
            expired: self.counters.expired.load(Ordering::Relaxed),
            splits: self.counters.splits.load(Ordering::Relaxed),
            recovered_commits: self.counters.recovered.load(Ordering::Relaxed),
            repaired_meta: self.counters.meta_repaired.load(Ordering::Relaxed),
            accesses_dropped: self.counters.accesses_dropped.load(Ordering::Relaxed),
            retries: self.counters.retries.load(Ordering::Relaxed),
            used_memory: self.used_memory(),
            partitions: self.partitions.read().len() as u64,
            commit_batches_in_flight: self.commit_batches.load(Ordering::Relaxed),
        }
    }

    /// Runs `f`, a synchronous batch of commands (inline writes of a pipeline), with
    /// this table's time read once for all of them, as Redis caches its clock for the
    /// commands of one event-loop turn: the batch takes microseconds, and a clock read
    /// per write was 2 % of a pipelined SET.
    pub fn at_one_time<R>(&self, f: impl FnOnce() -> R) -> R {
        crate::clock::frozen(self.clock_owner(), self.clock.now_ms(), f)
    }

    /// Who [`at_one_time`](Self::at_one_time) freezes the time for: this table.
    fn clock_owner(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    fn now(&self) -> (u64, Now) {
        let abs =
            crate::clock::frozen_ms(self.clock_owner()).unwrap_or_else(|| self.clock.now_ms());
        let pool_ms = abs.saturating_sub(self.pool.created_ms());
        (
            abs,
            Now {
                pool_ms,
                access: (pool_ms / 1000) as u16,
            },
        )
    }

    fn encode_expire(&self, at_ms: u64) -> u64 {
        (at_ms.saturating_sub(self.pool.created_ms()) + 1).min(layout::EXPIRE_MASK)
    }

    fn decode_expire(&self, enc: u64) -> Option<u64> {
        (enc != 0).then(|| self.pool.created_ms() + enc - 1)
    }

    fn is_expired(&self, meta: SlotMeta, now_abs: u64) -> bool {
        self.decode_expire(meta.expire())
            .is_some_and(|at| now_abs >= at)
    }

    fn loc(&self, db: u8, key: &[u8]) -> Loc {
        let hash = key_hash(db, key);
        let key_slot = key_slot(key);
        Loc {
            db,
            slot: self.partition_of(key_slot),
            key_slot,
            hash,
            fp: fingerprint(hash),
        }
    }

    /// Hash slots share partitions in groups of `2^slot_group_bits()`.
    pub fn slot_group_bits(&self) -> u32 {
        self.group_bits
    }

    /// The partition hash slot `slot` is stored in: the first slot of its group of
    /// `2^slot_group_bits` consecutive slots (itself when groups are single slots).
    /// Only a group's first slot ever has a directory.
    pub fn partition_of(&self, slot: u16) -> u16 {
        slot & !((1u16 << self.group_bits) - 1)
    }

    /// Holds off rebuilds of `slot`'s subtables (shared with other writers): at once
    /// when no rebuild holds it, which is nearly always, without building a future.
    /// Either way it spends the task's cooperative budget: over in-process memory a
    /// write completes without awaiting anything else, and a task looping over writes
    /// must still give its thread up now and then.
    async fn no_rebuild(&self, slot: u16) -> tokio::sync::RwLockReadGuard<'_, ()> {
        let lock = &self.locks[slot as usize];
        match lock.try_read() {
            Ok(guard) => {
                tokio::task::consume_budget().await;
                guard
            }
            Err(_) => lock.read().await,
        }
    }

    /// Holds `slot`'s subtables still for a rebuild: its lock taken exclusively (no
    /// awaited writer inside), then its gate closed (no inline writer inside).
    async fn lock_for_rebuild(&self, slot: u16) -> RebuildGuard<'_> {
        let locked = self.locks[slot as usize].write().await;
        // If this future is dropped while `close` waits, `close`'s own guard (a
        // temporary of this expression) reopens the gate before `locked` (declared
        // earlier) releases the lock: no other rebuild holds the lock meanwhile.
        RebuildGuard {
            _closed: self.gates.close(slot).await,
            _locked: locked,
        }
    }

    fn lease(&self, slot: u16) -> Result<Lease, DhtError> {
        self.owner.lease(slot).ok_or(DhtError::NotOwner(slot))
    }
}
