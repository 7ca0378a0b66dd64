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

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use bytes::Bytes;
use dmc_umo::{Block, GlobalAddr, ObjectRef, Pool, ReadObject, Tx, TxOutcome, TxWrite, UmoError};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};

use crate::clock::Clock;
use crate::hash::{self, fingerprint, key_hash, key_slot};
use crate::layout::{self, HASH_SLOTS, SLOTS_PER_BUCKET, SlotMeta, SlotWord, le64};
use crate::owner::{Lease, Ownership};
use crate::policy::{self, Now, Policy, RedisPolicy};
use crate::rng;

/// Transactions one commit RPC batch carries at most.
const MAX_COMMIT_BATCH: usize = 256;
/// Objects up to this size are read by `get_many`'s batched path.
const BATCH_OBJECT: usize = 128;
/// Optimistic retries before an operation gives up.
const MAX_RETRIES: usize = 256;

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
    #[error("the table is corrupt or was written by an incompatible version: {0}")]
    Corrupt(String),
    #[error("too much contention on hash slot {0}; try again")]
    Contention(u16),
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
    /// Bytes of pool memory this instance may use (0: unlimited).
    pub maxmemory: u64,
    pub policy: RedisPolicy,
    /// Keys sampled per eviction (`maxmemory-samples`).
    pub samples: usize,
    /// Local hits combined before their metadata updates are sent.
    pub hit_batch: usize,
}

impl Default for DhtConfig {
    fn default() -> Self {
        Self {
            buckets_per_subtable: 4,
            maxmemory: 0,
            policy: RedisPolicy::NoEviction,
            samples: 5,
            hit_batch: 64,
        }
    }
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
    /// Return the previous value (`SET … GET`).
    pub get: bool,
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
    meta_addr: GlobalAddr,
    meta: SlotMeta,
    seen: std::time::Instant,
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
    pub retries: u64,
    pub used_memory: u64,
    pub partitions: u64,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    evicted: AtomicU64,
    expired: AtomicU64,
    splits: AtomicU64,
    retries: AtomicU64,
}

/// A hash slot's directory, as cached.
#[derive(Debug)]
struct Dir {
    block: Block,
    depth: u32,
    subtables: Vec<GlobalAddr>,
    /// The first entries again, inside this allocation: most directories are this
    /// small, and the get path then costs one cache miss less.
    inline: [GlobalAddr; INLINE_DIR],
}

const INLINE_DIR: usize = 8;

impl Dir {
    fn new(block: Block, depth: u32, subtables: Vec<GlobalAddr>) -> Self {
        let mut inline = [GlobalAddr::NULL; INLINE_DIR];
        for (d, s) in inline.iter_mut().zip(&subtables) {
            *d = *s;
        }
        Dir {
            block,
            depth,
            subtables,
            inline,
        }
    }

    fn subtable(&self, hash: u64) -> GlobalAddr {
        let i = (hash & ((1u64 << self.depth) - 1)) as usize;
        if i < INLINE_DIR {
            self.inline[i]
        } else {
            self.subtables[i]
        }
    }
}

/// Directories of this depth or less are also kept in the [`FlatDirs`].
const FLAT_DEPTH: u32 = 5;

/// A lock-free copy of every hash slot's directory for the read path: `2^FLAT_DEPTH`
/// words per slot, word `i` the subtable for hashes ending in `i`, word 0 also holding
/// the depth (`(depth + 1) << 48`; 0 means not cached). A get then finds its subtable
/// with plain loads in one cache line (depth ≤ 3) instead of a lock and two pointer
/// hops, so the loads of a batch of keys overlap. Words may be stale or mixed between
/// two directories during an update: every address in them is a subtable this slot had,
/// and the bucket header each get checks says whether it still covers the hash (a
/// deeper directory, or a miss in the flat copy, takes the locked [`Dir`] path).
struct FlatDirs {
    words: Box<[AtomicU64]>,
}

impl FlatDirs {
    fn new() -> Self {
        FlatDirs {
            words: (0..HASH_SLOTS << FLAT_DEPTH)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    fn set(&self, slot: u16, dir: Option<&Dir>) {
        let base = (slot as usize) << FLAT_DEPTH;
        match dir {
            Some(d) if d.depth <= FLAT_DEPTH => {
                for i in 1..1usize << d.depth {
                    self.words[base + i].store(d.subtable(i as u64).bits(), Ordering::Relaxed);
                }
                let first = d.subtable(0).bits() | (u64::from(d.depth) + 1) << 48;
                self.words[base].store(first, Ordering::Release);
            }
            _ => self.words[base].store(0, Ordering::Release),
        }
    }

    fn subtable(&self, slot: u16, hash: u64) -> Option<GlobalAddr> {
        let base = (slot as usize) << FLAT_DEPTH;
        let first = self.words[base].load(Ordering::Acquire);
        let depth = (first >> 48).checked_sub(1)?;
        let i = (hash & ((1u64 << depth) - 1)) as usize;
        let word = match i {
            0 => first & ((1 << 48) - 1),
            _ => self.words[base + i].load(Ordering::Relaxed),
        };
        (word != 0).then(|| GlobalAddr::from_bits(word))
    }
}

/// A key's coordinates.
#[derive(Debug, Clone, Copy)]
struct Loc {
    db: u8,
    slot: u16,
    hash: u64,
    fp: u8,
}

/// The two candidate buckets of a key as read.
struct Probe {
    /// Bucket addresses and bytes.
    buckets: [(GlobalAddr, [u8; layout::BUCKET as usize]); 2],
}

impl Probe {
    fn header(&self, b: usize) -> u64 {
        le64(&self.buckets[b].1, 0)
    }
    fn slot(&self, b: usize, i: usize) -> (GlobalAddr, SlotWord, SlotMeta) {
        let at = (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize;
        let bytes = &self.buckets[b].1;
        (
            self.buckets[b].0.offset_by(at as u64),
            SlotWord(le64(bytes, at)),
            SlotMeta(le64(bytes, at + 8)),
        )
    }
}

/// A key found in the table.
#[derive(Debug, Clone)]
struct Found {
    bucket: usize,
    addr: GlobalAddr,
    word: SlotWord,
    meta: SlotMeta,
    value: Option<Bytes>,
}

/// One access not yet reported to the pool: the metadata word's address, the metadata
/// as the reader saw it, and what the access adds.
struct PendingHit {
    addr: GlobalAddr,
    seen: SlotMeta,
    /// When the slot was read: updates older than half the grace period are dropped.
    at: std::time::Instant,
    lfu_add: u8,
    access: u16,
}

type CommitJob = (Tx, oneshot::Sender<TxOutcome>);

pub struct Dht {
    pool: Arc<Pool>,
    clock: Arc<dyn Clock>,
    root: GlobalAddr,
    buckets: u64,
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
    locks: Vec<tokio::sync::Mutex<()>>,
    partitions: RwLock<Vec<u16>>,
    commits: mpsc::UnboundedSender<CommitJob>,
    hits: Mutex<Vec<PendingHit>>,
    /// Keys per database in the slots this client owns.
    keys: Box<[AtomicI64]>,
    /// Of those, keys with a time to live (INFO's `expires=`).
    volatile: Box<[AtomicI64]>,
    counters: Counters,
    removed: RwLock<Option<RemovedHook>>,
    /// Logical database -> the database number keys are stored under (SWAPDB).
    db_map: Box<[std::sync::atomic::AtomicU8]>,
}

type RemovedHook = Box<dyn Fn(u8, &[u8]) + Send + Sync>;

fn policy_index(p: RedisPolicy) -> u8 {
    RedisPolicy::ALL.iter().position(|q| *q == p).unwrap_or(0) as u8
}

fn corrupt(what: impl Into<String>) -> DhtError {
    DhtError::Corrupt(what.into())
}

impl Dht {
    /// Opens the table in `pool`, creating it if the pool has none, with this client
    /// owning the slots `owner` says.
    pub async fn open(
        pool: Arc<Pool>,
        config: DhtConfig,
        clock: Arc<dyn Clock>,
        owner: Ownership,
    ) -> Result<Arc<Dht>, DhtError> {
        if !config.buckets_per_subtable.is_power_of_two() || config.buckets_per_subtable > 1 << 12 {
            return Err(corrupt(
                "buckets_per_subtable must be a power of two up to 4096",
            ));
        }
        let (root, buckets) = Self::open_root(&pool, config.buckets_per_subtable).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(commit_loop(pool.clone(), rx));
        let inline_reads = pool.nodes().iter().all(|n| n.completes_inline());
        let inline_calls = pool.nodes().iter().all(|n| n.calls_inline());
        let dht = Dht {
            pool,
            clock,
            root,
            buckets,
            maxmemory: AtomicU64::new(config.maxmemory),
            evict_at: AtomicU64::new(0),
            spare_started: Mutex::new(None),
            samples: AtomicU64::new(config.samples.max(1) as u64),
            policy: std::sync::atomic::AtomicU8::new(policy_index(config.policy)),
            hit_batch: config.hit_batch.max(1),
            inline_reads,
            inline_calls,
            owner,
            dirs: (0..HASH_SLOTS).map(|_| RwLock::new(None)).collect(),
            flat: FlatDirs::new(),
            locks: (0..HASH_SLOTS)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            partitions: RwLock::new(Vec::new()),
            commits: tx,
            hits: Mutex::new(Vec::new()),
            keys: (0..256).map(|_| AtomicI64::new(0)).collect(),
            volatile: (0..256).map(|_| AtomicI64::new(0)).collect(),
            counters: Counters::default(),
            removed: RwLock::new(None),
            db_map: (0..=u8::MAX)
                .map(std::sync::atomic::AtomicU8::new)
                .collect(),
        };
        dht.load_db_map().await?;
        dht.recover().await?;
        Ok(Arc::new(dht))
    }

    async fn open_root(pool: &Pool, buckets: u32) -> Result<(GlobalAddr, u64), DhtError> {
        loop {
            let root = pool.root().await?;
            if root != 0 {
                let addr = GlobalAddr::from_bits(root);
                let mut head = [0u8; 16];
                pool.read(addr, &mut head).await?;
                if le64(&head, 0) != layout::MAGIC {
                    return Err(corrupt("the pool root does not point at a hash table"));
                }
                let version = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
                if version != layout::VERSION {
                    return Err(corrupt(format!(
                        "table version {version}, this build reads {}",
                        layout::VERSION
                    )));
                }
                let b = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as u64;
                if !b.is_power_of_two() {
                    return Err(corrupt("bad buckets_per_subtable in the table header"));
                }
                return Ok((addr, b));
            }
            let block = pool.alloc(layout::ROOT_LEN, true).await?;
            let mut bytes = vec![0u8; layout::ROOT_LEN as usize];
            bytes[0..8].copy_from_slice(&layout::MAGIC.to_le_bytes());
            bytes[8..12].copy_from_slice(&layout::VERSION.to_le_bytes());
            bytes[12..16].copy_from_slice(&buckets.to_le_bytes());
            pool.write_all(&[(block.addr, &bytes)]).await?;
            match pool.set_root(0, block.addr.bits()).await? {
                TxOutcome::Committed => {
                    tracing::info!(root = %block.addr, buckets, "created the hash table");
                    return Ok((block.addr, buckets as u64));
                }
                _ => pool.free(block), // another client created it first: use theirs
            }
        }
    }

    /// Learns which hash slots have directories and counts the keys of owned ones.
    async fn recover(&self) -> Result<(), DhtError> {
        let mut table = vec![0u8; 8 * HASH_SLOTS];
        self.pool
            .read(self.root.offset_by(layout::ROOT_HEADER), &mut table)
            .await?;
        let mut parts = Vec::new();
        let mut keys = 0i64;
        for slot in 0..HASH_SLOTS {
            if le64(&table, slot * 8) == 0 {
                continue;
            }
            parts.push(slot as u16);
            if self.owner.lease(slot as u16).is_some() {
                for (word, meta) in self.scan_words(slot as u16).await? {
                    let Some(obj) = word.object() else { continue };
                    if let Some((db, _, _)) = self.pool.read_any(obj).await? {
                        self.count_key(db, 1, None, Some(meta));
                        keys += 1;
                    }
                }
            }
        }
        tracing::info!(partitions = parts.len(), keys, "hash table opened");
        *self.partitions.write() = parts;
        Ok(())
    }

    // ------------------------------------------------------------ settings, stats

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

    pub fn set_samples(&self, k: usize) {
        self.samples.store(k.max(1) as u64, Ordering::Relaxed);
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

    pub fn stats(&self) -> DhtStats {
        DhtStats {
            keys: self.key_count(),
            hits: self.counters.hits.load(Ordering::Relaxed),
            misses: self.counters.misses.load(Ordering::Relaxed),
            evicted: self.counters.evicted.load(Ordering::Relaxed),
            expired: self.counters.expired.load(Ordering::Relaxed),
            splits: self.counters.splits.load(Ordering::Relaxed),
            retries: self.counters.retries.load(Ordering::Relaxed),
            used_memory: self.used_memory(),
            partitions: self.partitions.read().len() as u64,
        }
    }

    fn now(&self) -> (u64, Now) {
        let abs = self.clock.now_ms();
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

    fn loc(db: u8, key: &[u8]) -> Loc {
        let hash = key_hash(db, key);
        Loc {
            db,
            slot: key_slot(key),
            hash,
            fp: fingerprint(hash),
        }
    }

    fn lease(&self, slot: u16) -> Result<Lease, DhtError> {
        self.owner.lease(slot).ok_or(DhtError::NotOwner(slot))
    }

    // ------------------------------------------------------------ directories

    fn slot_entry(&self, slot: u16) -> GlobalAddr {
        self.root.offset_by(layout::ROOT_HEADER + 8 * slot as u64)
    }

    async fn load_dir(&self, slot: u16) -> Result<Option<Arc<Dir>>, DhtError> {
        let mut w = [0u8; 8];
        self.pool.read(self.slot_entry(slot), &mut w).await?;
        let r = u64::from_le_bytes(w);
        if r == 0 {
            *self.dirs[slot as usize].write() = None;
            self.flat.set(slot, None);
            return Ok(None);
        }
        let block = layout::dir_block(r)
            .ok_or_else(|| corrupt(format!("bad directory ref {r:#x} for slot {slot}")))?;
        let mut bytes = vec![0u8; block.size() as usize];
        self.pool.read(block.addr, &mut bytes).await?;
        let depth = le64(&bytes, 0) as u32;
        let n = 1usize << depth.min(layout::MAX_DEPTH);
        if depth > layout::MAX_DEPTH || 8 + 8 * n > bytes.len() {
            return Err(corrupt(format!(
                "directory of slot {slot} has depth {depth}"
            )));
        }
        let subtables = (0..n)
            .map(|i| GlobalAddr::from_bits(le64(&bytes, 8 + 8 * i)))
            .collect();
        let dir = Arc::new(Dir::new(block, depth, subtables));
        *self.dirs[slot as usize].write() = Some(dir.clone());
        self.flat.set(slot, Some(&dir));
        self.known_partition(slot);
        Ok(Some(dir))
    }

    /// The hash slots with a directory that this client owns (and so writes).
    fn owned_partitions(&self) -> Vec<u16> {
        self.partitions
            .read()
            .iter()
            .copied()
            .filter(|s| self.owner.lease(*s).is_some())
            .collect()
    }

    /// Records that `slot` has a directory (another agent may have created it).
    fn known_partition(&self, slot: u16) {
        let mut parts = self.partitions.write();
        if let Err(at) = parts.binary_search(&slot) {
            parts.insert(at, slot);
        }
    }

    /// The subtable `loc` maps to in the cached directory (lock-free where it can be).
    fn cached_subtable(&self, loc: &Loc) -> Option<GlobalAddr> {
        self.flat.subtable(loc.slot, loc.hash).or_else(|| {
            self.dirs[loc.slot as usize]
                .read()
                .as_ref()
                .map(|d| d.subtable(loc.hash))
        })
    }

    async fn dir(&self, slot: u16) -> Result<Option<Arc<Dir>>, DhtError> {
        if let Some(d) = self.dirs[slot as usize].read().clone() {
            return Ok(Some(d));
        }
        self.load_dir(slot).await
    }

    /// Reads the key's two candidate buckets, refreshing a stale directory.
    async fn probe(&self, loc: &Loc) -> Result<Option<Probe>, DhtError> {
        for _ in 0..MAX_RETRIES {
            // The lock-free copy first: no shared reference count to bump per write.
            let st = match self.cached_subtable(loc) {
                Some(st) => st,
                None => match self.load_dir(loc.slot).await? {
                    Some(dir) => dir.subtable(loc.hash),
                    None => return Ok(None),
                },
            };
            let (a, b) = hash::buckets(loc.hash, self.buckets);
            let mut probe = Probe {
                buckets: [
                    (
                        st.offset_by(a * layout::BUCKET),
                        [0u8; layout::BUCKET as usize],
                    ),
                    (
                        st.offset_by(b * layout::BUCKET),
                        [0u8; layout::BUCKET as usize],
                    ),
                ],
            };
            {
                let [(a_addr, a_buf), (b_addr, b_buf)] = &mut probe.buckets;
                let mut reads = [(*a_addr, &mut a_buf[..]), (*b_addr, &mut b_buf[..])];
                self.pool.read_batch(&mut reads).await?;
            }
            if layout::header_covers(probe.header(0), loc.hash, loc.slot)
                && layout::header_covers(probe.header(1), loc.hash, loc.slot)
            {
                return Ok(Some(probe));
            }
            // A split retired this subtable (or the cache is older than a reuse).
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
            self.load_dir(loc.slot).await?;
        }
        Err(DhtError::Contention(loc.slot))
    }

    /// Finds `key` among the probe's slots.
    async fn find(
        &self,
        loc: &Loc,
        key: &[u8],
        probe: &Probe,
        want_value: bool,
    ) -> Result<Option<Found>, DhtError> {
        for b in 0..2 {
            if b == 1 && probe.buckets[0].0 == probe.buckets[1].0 {
                break;
            }
            for i in 0..SLOTS_PER_BUCKET {
                // The fingerprint is the word's top byte: test it before decoding.
                let fp_at = (layout::BUCKET_HEADER + layout::SLOT * i as u64 + 7) as usize;
                if probe.buckets[b].1[fp_at] != loc.fp {
                    continue;
                }
                let (addr, word, meta) = probe.slot(b, i);
                if word.is_empty() {
                    continue;
                }
                let Some(obj) = word.object() else { continue };
                match self.pool.read_object(obj, loc.db, key).await {
                    Ok(ReadObject::Value(v)) => {
                        return Ok(Some(Found {
                            bucket: b,
                            addr,
                            word,
                            meta,
                            value: want_value.then_some(v),
                        }));
                    }
                    // A fingerprint collision, or a slot that changed under us: the
                    // caller's commit validates the words it relies on.
                    Ok(ReadObject::Mismatch) => continue,
                    // A failed read is not an absent key: reporting a miss could let
                    // NX succeed or a second slot take the key.
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(None)
    }

    /// Probes and finds in one go; `None` probe means the hash slot has no table yet.
    async fn lookup(
        &self,
        loc: &Loc,
        key: &[u8],
        want_value: bool,
    ) -> Result<(Option<Probe>, Option<Found>), DhtError> {
        let Some(probe) = self.probe(loc).await? else {
            return Ok((None, None));
        };
        let found = self.find(loc, key, &probe, want_value).await?;
        Ok((Some(probe), found))
    }

    // ------------------------------------------------------------ reads

    /// The get path without futures, for inline backends (local, shm): both candidate
    /// buckets and the object are read with `post_now`. `None` hands the key to the
    /// general path: no cached directory, a stale one, a chained object, an expired key
    /// (which that path reclaims), or a backend that must be awaited.
    fn find_now(&self, loc: &Loc, key: &[u8], abs: u64) -> Option<Result<Option<Found>, DhtError>> {
        let st = self.cached_subtable(loc)?;
        let (a, b) = hash::buckets(loc.hash, self.buckets);
        for (n, bucket) in [a, b].into_iter().enumerate() {
            let addr = st.offset_by(bucket * layout::BUCKET);
            let mut bytes = [0u8; layout::BUCKET as usize];
            if let Err(e) = self.pool.read_now(addr, &mut bytes)? {
                return Some(Err(e.into()));
            }
            if !layout::header_covers(le64(&bytes, 0), loc.hash, loc.slot) {
                return None;
            }
            for i in 0..SLOTS_PER_BUCKET {
                let at = (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize;
                if bytes[at + 7] != loc.fp {
                    continue;
                }
                let word = SlotWord(le64(&bytes, at));
                let Some(obj) = word.object() else { continue };
                let meta = SlotMeta(le64(&bytes, at + 8));
                match self.pool.read_object_now(obj, loc.db, key)? {
                    Ok(ReadObject::Value(v)) => {
                        if self.is_expired(meta, abs) {
                            return None;
                        }
                        return Some(Ok(Some(Found {
                            bucket: n,
                            addr: addr.offset_by(at as u64),
                            word,
                            meta,
                            value: Some(v),
                        })));
                    }
                    Ok(ReadObject::Mismatch) => continue,
                    Err(e) => return Some(Err(e.into())),
                }
            }
        }
        Some(Ok(None))
    }

    /// The live value of `key` in `db`, or `None`.
    pub async fn get(&self, db: u8, key: &[u8]) -> Result<Option<Entry>, DhtError> {
        let loc = Self::loc(db, key);
        let (abs, now) = self.now();
        if self.inline_reads {
            match self.find_now(&loc, key, abs) {
                Some(Ok(Some(f))) => return Ok(Some(self.hit_now(f, &now))),
                Some(Ok(None)) => {
                    self.counters.misses.fetch_add(1, Ordering::Relaxed);
                    return Ok(None);
                }
                Some(Err(e)) => return Err(e),
                None => {}
            }
        }
        if self.inline_reads
            && let Some(f) = self.find_in_first_bucket(&loc, key).await?
            && !self.is_expired(f.meta, abs)
        {
            return Ok(Some(self.hit(f, &now).await));
        }
        let (probe, found) = self.lookup(&loc, key, true).await?;
        let Some(f) = found else {
            self.counters.misses.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        };
        if self.is_expired(f.meta, abs) {
            self.counters.misses.fetch_add(1, Ordering::Relaxed);
            if let Some(p) = &probe {
                self.reclaim_expired(&loc, p, &f).await;
            }
            return Ok(None);
        }
        Ok(Some(self.hit(f, &now).await))
    }

    /// Gets many keys of `db` at once. On inline backends the first buckets of all keys
    /// are read in one batch, then all the objects, so their memory latencies overlap
    /// (the CPU's version of a doorbell batch); keys this fast path cannot settle (in
    /// the second bucket, absent, expired, chained) go through [`get`](Self::get).
    pub async fn get_many(&self, db: u8, keys: &[&[u8]]) -> Result<Vec<Option<Entry>>, DhtError> {
        let mut out: Vec<Option<Entry>> = vec![None; keys.len()];
        let mut settled = vec![false; keys.len()];
        if self.inline_reads && keys.len() > 1 {
            let (abs, now) = self.now();
            let locs: Vec<Loc> = keys.iter().map(|k| Self::loc(db, k)).collect();
            // Stage 1: the first candidate bucket of every key with a cached directory.
            let mut buckets: Vec<(usize, GlobalAddr)> = Vec::with_capacity(keys.len());
            for (i, loc) in locs.iter().enumerate() {
                if let Some(st) = self.cached_subtable(loc) {
                    let (a, _) = hash::buckets(loc.hash, self.buckets);
                    buckets.push((i, st.offset_by(a * layout::BUCKET)));
                }
            }
            let mut bytes = vec![[0u8; layout::BUCKET as usize]; buckets.len()];
            {
                let mut reads: Vec<(GlobalAddr, &mut [u8])> = buckets
                    .iter()
                    .zip(bytes.iter_mut())
                    .map(|((_, a), b)| (*a, &mut b[..]))
                    .collect();
                self.pool.read_batch(&mut reads).await?;
            }
            // Stage 2: the object of the first fingerprint match in each bucket.
            let mut objects: Vec<(usize, Found, ObjectRef)> = Vec::with_capacity(buckets.len());
            for ((i, addr), b) in buckets.iter().zip(&bytes) {
                let probe = Probe {
                    buckets: [(*addr, *b), (*addr, *b)],
                };
                if !layout::header_covers(probe.header(0), locs[*i].hash, locs[*i].slot) {
                    continue;
                }
                let hit = (0..SLOTS_PER_BUCKET)
                    .map(|s| probe.slot(0, s))
                    .find(|(_, w, _)| !w.is_empty() && w.fp() == locs[*i].fp);
                if let Some((slot, word, meta)) = hit
                    && let Some(obj) = word.object()
                    && !obj.chained
                    && obj.block.size() as usize <= BATCH_OBJECT
                    && !self.is_expired(meta, abs)
                {
                    objects.push((
                        *i,
                        Found {
                            bucket: 0,
                            addr: slot,
                            word,
                            meta,
                            value: None,
                        },
                        obj,
                    ));
                }
            }
            let mut heads = vec![[0u8; BATCH_OBJECT]; objects.len()];
            {
                let mut reads: Vec<(GlobalAddr, &mut [u8])> = objects
                    .iter()
                    .zip(heads.iter_mut())
                    .map(|((_, _, o), h)| (o.block.addr, &mut h[..o.block.size() as usize]))
                    .collect();
                self.pool.read_batch(&mut reads).await?;
            }
            let mut hits: Vec<(usize, Found)> = Vec::with_capacity(objects.len());
            for ((i, mut f, obj), head) in objects.into_iter().zip(heads) {
                let head = &head[..obj.block.size() as usize];
                if let dmc_umo::object::Head::Inline {
                    db: d,
                    key: k,
                    value,
                } = dmc_umo::object::parse_head(head)
                    && d == db
                    && head[k] == *keys[i]
                {
                    f.value = Some(Bytes::copy_from_slice(&head[value]));
                    settled[i] = true;
                    hits.push((i, f));
                }
            }
            for (i, entry) in self.hits_now(hits, &now) {
                out[i] = Some(entry);
            }
        }
        for (i, key) in keys.iter().enumerate() {
            if !settled[i] {
                out[i] = self.get(db, key).await?;
            }
        }
        Ok(out)
    }

    /// [`hit`](Self::hit) without futures: the access is recorded, and a full batch
    /// of combined metadata updates is sent with inline FAAs.
    fn hit_now(&self, f: Found, now: &Now) -> Entry {
        self.counters.hits.fetch_add(1, Ordering::Relaxed);
        let at = std::time::Instant::now();
        if let Some(batch) = self.record_touch(f.addr.offset_by(8), f.meta, at, now) {
            self.send_hits_now(batch);
        }
        self.entry(f, now, at)
    }

    /// [`hit_now`](Self::hit_now) for a batch of keys read together: one clock read,
    /// one counter update and one lock for all of them.
    fn hits_now<'a>(
        &'a self,
        found: Vec<(usize, Found)>,
        now: &'a Now,
    ) -> impl Iterator<Item = (usize, Entry)> + 'a {
        self.counters
            .hits
            .fetch_add(found.len() as u64, Ordering::Relaxed);
        let at = std::time::Instant::now();
        let policy = self.policy();
        let full = {
            let mut hits = self.hits.lock();
            for (_, f) in &found {
                hits.push(Self::pending_hit(
                    policy,
                    f.addr.offset_by(8),
                    f.meta,
                    at,
                    now,
                ));
            }
            (hits.len() >= self.hit_batch).then(|| std::mem::take(&mut *hits))
        };
        if let Some(batch) = full {
            self.send_hits_now(batch);
        }
        found
            .into_iter()
            .map(move |(i, f)| (i, self.entry(f, now, at)))
    }

    /// Sends combined metadata updates with inline FAAs.
    fn send_hits_now(&self, batch: Vec<PendingHit>) {
        for (addr, add) in combine_hits(batch, self.ref_lifetime()) {
            // Metadata is advisory: a failed update only ages the key a little.
            let _ = self.pool.faa_now(addr, add);
        }
    }

    /// The entry a found key is returned as; `at` is when its slot was read.
    fn entry(&self, f: Found, now: &Now, at: std::time::Instant) -> Entry {
        Entry {
            value: f.value.unwrap_or_default(),
            expire_at: self.decode_expire(f.meta.expire()),
            idle_secs: now.idle_secs(f.meta),
            lfu: policy::lfu_decayed(f.meta, now),
            slot: SlotRef {
                meta_addr: f.addr.offset_by(8),
                meta: f.meta,
                seen: at,
            },
        }
    }

    async fn hit(&self, f: Found, now: &Now) -> Entry {
        self.counters.hits.fetch_add(1, Ordering::Relaxed);
        self.touch_meta(f.addr.offset_by(8), f.meta, now).await;
        self.entry(f, now, std::time::Instant::now())
    }

    /// Reports a hit served outside the table (the agent's local cache) to the key's
    /// metadata, combined with other hits into one FAA per key per batch. Returns
    /// `false` when the reference is too old to use: the caller should refresh it with
    /// a [`get`](Self::get).
    pub async fn record_hit(&self, slot: SlotRef) -> bool {
        self.counters.hits.fetch_add(1, Ordering::Relaxed);
        if slot.seen.elapsed() >= self.ref_lifetime() {
            return false;
        }
        let (_, now) = self.now();
        if let Some(batch) = self.record_touch(slot.meta_addr, slot.meta, slot.seen, &now) {
            self.send_hits(batch).await;
        }
        true
    }

    /// How long a slot reference stays safe to write through: half the grace period
    /// before freed blocks are reused.
    fn ref_lifetime(&self) -> std::time::Duration {
        self.pool.config().grace / 2
    }

    /// Registers a function told of every key this client evicts or reclaims as
    /// expired, so copies of it elsewhere (the agent's cache) can be dropped.
    pub fn on_removed(&self, f: impl Fn(u8, &[u8]) + Send + Sync + 'static) {
        *self.removed.write() = Some(Box::new(f));
    }

    fn removed(&self, db: u8, key: &[u8]) {
        if let Some(f) = self.removed.read().as_ref() {
            f(db, key);
        }
    }

    /// The key if it is in its first candidate bucket (read alone); `None` sends the
    /// caller down the full two-bucket path, which also handles stale directories.
    async fn find_in_first_bucket(&self, loc: &Loc, key: &[u8]) -> Result<Option<Found>, DhtError> {
        let st = match self.cached_subtable(loc) {
            Some(st) => st,
            None => match self.load_dir(loc.slot).await? {
                Some(d) => d.subtable(loc.hash),
                None => return Ok(None),
            },
        };
        let (a, _) = hash::buckets(loc.hash, self.buckets);
        let addr = st.offset_by(a * layout::BUCKET);
        let mut bytes = [0u8; layout::BUCKET as usize];
        self.pool.read(addr, &mut bytes).await?;
        let probe = Probe {
            buckets: [(addr, bytes), (addr, bytes)],
        };
        if !layout::header_covers(probe.header(0), loc.hash, loc.slot) {
            return Ok(None);
        }
        self.find(loc, key, &probe, true).await
    }

    /// The key's value and metadata without recording an access (`OBJECT`, `MEMORY
    /// USAGE`, `LCS`-style inspection), with the pool bytes one copy of it occupies
    /// (its slot plus its object's blocks).
    pub async fn peek(&self, db: u8, key: &[u8]) -> Result<Option<(Entry, u64)>, DhtError> {
        let loc = Self::loc(db, key);
        let (abs, now) = self.now();
        let (_, found) = self.lookup(&loc, key, true).await?;
        let Some(f) = found.filter(|f| !self.is_expired(f.meta, abs)) else {
            return Ok(None);
        };
        let object = match f.word.object() {
            Some(o) if !o.chained => u64::from(o.block.size()),
            // A chain's blocks are each full but the last: estimate from the content.
            _ => {
                let len = f.value.as_ref().map_or(0, |v| v.len()) + key.len();
                (dmc_umo::object::CHAINED_HEADER + len) as u64
            }
        };
        Ok(Some((
            self.entry(f, &now, std::time::Instant::now()),
            layout::SLOT + object,
        )))
    }

    // ------------------------------------------------------------ databases

    /// The database number the keys of logical database `db` are stored under: the
    /// same number unless SWAPDB swapped it with another.
    pub fn physical_db(&self, db: u8) -> u8 {
        self.db_map[db as usize].load(Ordering::Relaxed)
    }

    async fn read_db_map(&self) -> Result<[u8; layout::DB_MAP_LEN], DhtError> {
        let mut map = [0u8; layout::DB_MAP_LEN];
        self.pool
            .read(self.root.offset_by(layout::DB_MAP), &mut map)
            .await?;
        Ok(map)
    }

    /// Reloads the db map from the pool (after another agent's SWAPDB).
    pub async fn load_db_map(&self) -> Result<(), DhtError> {
        let map = self.read_db_map().await?;
        for (i, x) in map.iter().enumerate() {
            self.db_map[i].store(i as u8 ^ x, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Swaps two logical databases (Redis's `SWAPDB`) by swapping which stored
    /// databases they name: one transaction on the table root, no key moves. Only the
    /// first [`layout::DB_MAP_LEN`] databases can be swapped.
    pub async fn swap_dbs(&self, a: u8, b: u8) -> Result<(), DhtError> {
        let n = layout::DB_MAP_LEN;
        if a as usize >= n || b as usize >= n {
            return Err(DhtError::Unsupported(format!(
                "SWAPDB is supported for databases 0 to {} on this pool",
                n - 1
            )));
        }
        for _ in 0..MAX_RETRIES {
            let old = self.read_db_map().await?;
            let mut new = old;
            // Stored as i ^ physical(i): swap the physical numbers.
            let (pa, pb) = (a ^ old[a as usize], b ^ old[b as usize]);
            new[a as usize] = a ^ pb;
            new[b as usize] = b ^ pa;
            let writes = (0..n / 8)
                .filter(|w| old[w * 8..w * 8 + 8] != new[w * 8..w * 8 + 8])
                .map(|w| TxWrite {
                    addr: self.root.offset_by(layout::DB_MAP + 8 * w as u64),
                    expect: Some(le64(&old, w * 8)),
                    new: le64(&new, w * 8),
                })
                .collect::<Vec<_>>();
            if writes.is_empty() {
                return Ok(());
            }
            let tx = Tx {
                shard: dmc_umo::pool::POOL_SHARD,
                epoch: 0,
                writes,
            };
            match self.pool.commit(std::slice::from_ref(&tx)).await.remove(0) {
                TxOutcome::Committed => return self.load_db_map().await,
                TxOutcome::Failed(e) => return Err(e.into()),
                _ => continue,
            }
        }
        Err(DhtError::Contention(0))
    }

    /// Whether `key` exists (and has not expired), without fetching its value.
    pub async fn exists(&self, db: u8, key: &[u8]) -> Result<bool, DhtError> {
        Ok(self.ttl(db, key).await? != Ttl::Missing)
    }

    /// The key's time to live.
    pub async fn ttl(&self, db: u8, key: &[u8]) -> Result<Ttl, DhtError> {
        let loc = Self::loc(db, key);
        let (_, found) = self.lookup(&loc, key, false).await?;
        let abs = self.clock.now_ms();
        Ok(match found {
            Some(f) if !self.is_expired(f.meta, abs) => match self.decode_expire(f.meta.expire()) {
                Some(at) => Ttl::ExpiresAt(at),
                None => Ttl::Persistent,
            },
            _ => Ttl::Missing,
        })
    }

    /// Records an access to a key's metadata: combined locally, sent as one FAA per key
    /// per batch. The engine calls this for hits served from its own cache too.
    async fn touch_meta(&self, meta_addr: GlobalAddr, meta: SlotMeta, now: &Now) {
        if let Some(batch) = self.record_touch(meta_addr, meta, std::time::Instant::now(), now) {
            self.send_hits(batch).await;
        }
    }

    /// Adjusts the key counts of `db`: `keys` more keys, and the volatile count by
    /// whether the metadata before (`from`) and after (`to`) carry a TTL.
    /// After a committed insert or overwrite: counts the key and frees the object the
    /// slot held before (`found`), if any.
    async fn replaced(&self, db: u8, found: Option<Found>, meta: SlotMeta) {
        let prev_meta = found.as_ref().map(|f| f.meta);
        match found.and_then(|f| f.word.object()) {
            Some(prev) => {
                self.count_key(db, 0, prev_meta, Some(meta));
                self.pool.free_object(prev).await
            }
            None => self.count_key(db, 1, None, Some(meta)),
        }
    }

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

    /// Records one access; returns the pending batch when it is full.
    fn record_touch(
        &self,
        meta_addr: GlobalAddr,
        meta: SlotMeta,
        at: std::time::Instant,
        now: &Now,
    ) -> Option<Vec<PendingHit>> {
        let hit = Self::pending_hit(self.policy(), meta_addr, meta, at, now);
        let mut hits = self.hits.lock();
        hits.push(hit);
        (hits.len() >= self.hit_batch).then(|| std::mem::take(&mut *hits))
    }

    /// One access as the policy scores it, waiting to be combined and sent.
    fn pending_hit(
        policy: RedisPolicy,
        meta_addr: GlobalAddr,
        meta: SlotMeta,
        at: std::time::Instant,
        now: &Now,
    ) -> PendingHit {
        let t = policy.update(meta, now, rng::next_f64());
        PendingHit {
            addr: meta_addr,
            seen: meta,
            at,
            lfu_add: t.lfu_add,
            access: t.access,
        }
    }

    /// Sends the combined metadata updates now.
    pub async fn flush_hits(&self) {
        let batch = std::mem::take(&mut *self.hits.lock());
        self.send_hits(batch).await;
    }

    async fn send_hits(&self, batch: Vec<PendingHit>) {
        for (addr, add) in combine_hits(batch, self.ref_lifetime()) {
            // Metadata is advisory: a failed update only ages the key a little.
            let _ = self.pool.faa(addr, add).await;
        }
    }

    // ------------------------------------------------------------ writes

    async fn commit(&self, tx: Tx) -> TxOutcome {
        if self.inline_calls {
            // In-process nodes: commit here; a batch would only add a task hop.
            return self.pool.commit(std::slice::from_ref(&tx)).await.remove(0);
        }
        let (done, wait) = oneshot::channel();
        if self.commits.send((tx, done)).is_err() {
            return TxOutcome::Failed(UmoError::Config("the commit task stopped".into()));
        }
        wait.await.unwrap_or_else(|_| {
            TxOutcome::Failed(UmoError::Config("the commit task stopped".into()))
        })
    }

    /// The header of `probe`'s bucket `b`, validated (unchanged) by a transaction.
    fn header_guard(probe: &Probe, b: usize) -> TxWrite {
        let h = probe.header(b);
        TxWrite {
            addr: probe.buckets[b].0,
            expect: Some(h),
            new: h,
        }
    }

    /// Sets `key` to `value` in `db`.
    pub async fn set(
        &self,
        db: u8,
        key: &[u8],
        value: &[u8],
        opts: SetOptions,
    ) -> Result<SetOutcome, DhtError> {
        let loc = Self::loc(db, key);
        let lease = self.lease(loc.slot)?;
        let need = (dmc_umo::object::HEADER + key.len() + value.len()) as u64;
        self.make_room(need).await?;
        let obj = self.write_with_room(db, key, value).await?;
        match self.install(&loc, lease, key, obj, opts).await {
            Ok(out) => {
                if !out.written {
                    self.pool.free_object(obj).await;
                }
                Ok(out)
            }
            Err(e) => {
                // An in-doubt commit may have made the object reachable: leak it rather
                // than risk freeing live data.
                if !matches!(e, DhtError::Pool(_)) {
                    self.pool.free_object(obj).await;
                }
                Err(e)
            }
        }
    }

    /// Sets many keys of `db` in one transaction (Redis's MSET and MSETNX): readers see
    /// all of the new values or none. A repeated key keeps its last value. With
    /// `only_if_all_absent` nothing is written if any key exists (returns false). Keys
    /// must all be in hash slots of one shard lease (always so for a standalone agent);
    /// otherwise the error is [`DhtError::Unsupported`].
    pub async fn set_many(
        &self,
        db: u8,
        pairs: &[(&[u8], &[u8])],
        only_if_all_absent: bool,
    ) -> Result<bool, DhtError> {
        let mut seen: std::collections::HashSet<&[u8]> =
            std::collections::HashSet::with_capacity(pairs.len());
        let mut unique: Vec<(&[u8], &[u8])> = Vec::with_capacity(pairs.len());
        for (k, v) in pairs.iter().rev() {
            if seen.insert(k) {
                unique.push((k, v));
            }
        }
        unique.reverse();
        let locs: Vec<Loc> = unique.iter().map(|(k, _)| Self::loc(db, k)).collect();
        let mut lease = None;
        for loc in &locs {
            let l = self.lease(loc.slot)?;
            match lease {
                None => lease = Some(l),
                Some(first) if (first.shard, first.epoch) != (l.shard, l.epoch) => {
                    // Hash slots of several shards cannot share one transaction: write
                    // key by key (not atomic), as Redis Cluster would refuse CROSSSLOT.
                    return self.set_each(db, &unique, only_if_all_absent).await;
                }
                Some(_) => {}
            }
        }
        let Some(lease) = lease else {
            return Ok(true);
        };
        let need: u64 = unique
            .iter()
            .map(|(k, v)| (dmc_umo::object::HEADER + k.len() + v.len()) as u64)
            .sum();
        self.make_room(need).await?;
        let mut objects = Vec::with_capacity(unique.len());
        for (k, v) in &unique {
            match self.write_with_room(db, k, v).await {
                Ok(o) => objects.push(o),
                Err(e) => {
                    for o in objects {
                        self.pool.free_object(o).await;
                    }
                    return Err(e);
                }
            }
        }
        let result = self
            .install_many(&locs, lease, &unique, &objects, only_if_all_absent)
            .await;
        match result {
            Ok(true) => Ok(true),
            Ok(false) => {
                for o in objects {
                    self.pool.free_object(o).await;
                }
                Ok(false)
            }
            // In doubt (the commit's outcome is unknown): the objects may be reachable;
            // leak them rather than free live data.
            Err((e, true)) => Err(e),
            Err((e, false)) => {
                for o in objects {
                    self.pool.free_object(o).await;
                }
                Err(e)
            }
        }
    }

    /// The keys of `pairs` one `set` at a time (not atomic), for batches whose keys
    /// span shards; with `only_if_all_absent`, checked first.
    async fn set_each(
        &self,
        db: u8,
        pairs: &[(&[u8], &[u8])],
        only_if_all_absent: bool,
    ) -> Result<bool, DhtError> {
        if only_if_all_absent {
            for (k, _) in pairs {
                if self.exists(db, k).await? {
                    return Ok(false);
                }
            }
        }
        for (k, v) in pairs {
            self.set(db, k, v, SetOptions::default()).await?;
        }
        Ok(true)
    }

    async fn install_many(
        &self,
        locs: &[Loc],
        lease: Lease,
        pairs: &[(&[u8], &[u8])],
        objects: &[ObjectRef],
        only_if_all_absent: bool,
    ) -> Result<bool, (DhtError, bool)> {
        // Errors before the commit leave nothing reachable (`false`); a failed commit
        // is in doubt (`true`).
        let early = |e: DhtError| (e, false);
        'retry: for attempt in 0..MAX_RETRIES {
            let (abs, now) = self.now();
            let mut writes: Vec<TxWrite> = Vec::with_capacity(3 * pairs.len());
            let mut taken: Vec<GlobalAddr> = Vec::new();
            // (db, previous found slot, new metadata) per key, for the bookkeeping.
            let mut done: Vec<(Option<Found>, SlotMeta)> = Vec::with_capacity(pairs.len());
            for ((loc, (key, _)), obj) in locs.iter().zip(pairs).zip(objects) {
                let (probe, found) = self.lookup(loc, key, false).await.map_err(early)?;
                let Some(probe) = probe else {
                    self.create_partition(loc.slot, lease)
                        .await
                        .map_err(early)?;
                    continue 'retry;
                };
                let live = found.as_ref().filter(|f| !self.is_expired(f.meta, abs));
                if only_if_all_absent && live.is_some() {
                    return Ok(false);
                }
                let lfu = found
                    .as_ref()
                    .map(|f| f.meta.lfu())
                    .unwrap_or(policy::LFU_INIT);
                let meta = SlotMeta::new(0, now.access, lfu);
                let (bucket, addr, expect) = match &found {
                    Some(f) => (f.bucket, f.addr, f.word),
                    None => {
                        // An empty slot no earlier key of this batch took.
                        let free = (0..2).flat_map(|b| (0..SLOTS_PER_BUCKET).map(move |i| (b, i)));
                        let pick = free
                            .map(|(b, i)| (b, probe.slot(b, i)))
                            .find(|(_, (a, w, _))| w.is_empty() && !taken.contains(a));
                        match pick {
                            Some((b, (a, _, _))) => (b, a, SlotWord::EMPTY),
                            None => {
                                self.split(loc, lease).await.map_err(early)?;
                                continue 'retry;
                            }
                        }
                    }
                };
                taken.push(addr);
                let guard = Self::header_guard(&probe, bucket);
                if !writes.iter().any(|w| w.addr == guard.addr) {
                    writes.push(guard);
                }
                writes.push(TxWrite {
                    addr,
                    expect: Some(expect.0),
                    new: SlotWord::new(loc.fp, *obj).0,
                });
                writes.push(TxWrite {
                    addr: addr.offset_by(8),
                    expect: None,
                    new: meta.0,
                });
                done.push((found, meta));
            }
            let tx = Tx {
                shard: lease.shard,
                epoch: lease.epoch,
                writes,
            };
            match self.commit(tx).await {
                TxOutcome::Committed => {
                    for (loc, (found, meta)) in locs.iter().zip(done) {
                        self.replaced(loc.db, found, meta).await;
                    }
                    return Ok(true);
                }
                TxOutcome::Conflict { .. } => self.backoff(attempt, false).await,
                TxOutcome::Locked => self.backoff(attempt, true).await,
                TxOutcome::StaleEpoch { .. } => {
                    return Err(early(DhtError::NotOwner(locs[0].slot)));
                }
                TxOutcome::Failed(e) => return Err((e.into(), true)),
            }
        }
        Err(early(DhtError::Contention(locs[0].slot)))
    }

    async fn install(
        &self,
        loc: &Loc,
        lease: Lease,
        key: &[u8],
        obj: ObjectRef,
        opts: SetOptions,
    ) -> Result<SetOutcome, DhtError> {
        let new_word = SlotWord::new(loc.fp, obj);
        for attempt in 0..MAX_RETRIES {
            let (probe, found) = self.lookup(loc, key, opts.get).await?;
            let Some(probe) = probe else {
                self.create_partition(loc.slot, lease).await?;
                continue;
            };
            let (abs, now) = self.now();
            let live = found.as_ref().filter(|f| !self.is_expired(f.meta, abs));
            let old = live.and_then(|f| f.value.clone());
            let blocked = match opts.cond {
                SetCond::Always => false,
                SetCond::IfAbsent => live.is_some(),
                SetCond::IfPresent => live.is_none(),
            };
            if blocked {
                return Ok(SetOutcome {
                    written: false,
                    old,
                });
            }
            let expire = match opts.expiry {
                SetExpiry::Clear => 0,
                SetExpiry::Keep => live.map(|f| f.meta.expire()).unwrap_or(0),
                SetExpiry::At(at) => self.encode_expire(at),
            };
            let lfu = found
                .as_ref()
                .map(|f| f.meta.lfu())
                .unwrap_or(policy::LFU_INIT);
            let meta = SlotMeta::new(expire, now.access, lfu);
            let (bucket, addr, expect) = match &found {
                Some(f) => (f.bucket, f.addr, f.word),
                None => match Self::empty_slot(&probe) {
                    Some((b, addr)) => (b, addr, SlotWord::EMPTY),
                    None => {
                        self.split(loc, lease).await?;
                        continue;
                    }
                },
            };
            let tx = Tx {
                shard: lease.shard,
                epoch: lease.epoch,
                writes: vec![
                    Self::header_guard(&probe, bucket),
                    TxWrite {
                        addr,
                        expect: Some(expect.0),
                        new: new_word.0,
                    },
                    TxWrite {
                        addr: addr.offset_by(8),
                        expect: None,
                        new: meta.0,
                    },
                ],
            };
            match self.commit(tx).await {
                TxOutcome::Committed => {
                    self.replaced(loc.db, found, meta).await;
                    return Ok(SetOutcome { written: true, old });
                }
                TxOutcome::Conflict { .. } => self.backoff(attempt, false).await,
                TxOutcome::Locked => self.backoff(attempt, true).await,
                TxOutcome::StaleEpoch { .. } => return Err(DhtError::NotOwner(loc.slot)),
                TxOutcome::Failed(e) => return Err(e.into()),
            }
        }
        Err(DhtError::Contention(loc.slot))
    }

    /// An empty slot in the emptier of the two buckets.
    fn empty_slot(probe: &Probe) -> Option<(usize, GlobalAddr)> {
        let empties = |b: usize| {
            (0..SLOTS_PER_BUCKET)
                .filter(|&i| probe.slot(b, i).1.is_empty())
                .count()
        };
        let order = if empties(1) > empties(0) {
            [1, 0]
        } else {
            [0, 1]
        };
        // A random empty slot rather than the first: concurrent inserts into one bucket
        // then rarely pick the same slot and conflict.
        order.into_iter().find_map(|b| {
            let n = empties(b);
            if n == 0 {
                return None;
            }
            let pick = rng::below(n as u64) as usize;
            (0..SLOTS_PER_BUCKET)
                .map(|i| probe.slot(b, i))
                .filter(|(_, w, _)| w.is_empty())
                .nth(pick)
                .map(|(addr, _, _)| (b, addr))
        })
    }

    /// Counts an optimistic retry and lets the competing writer finish first. A
    /// conflict (the word changed) is retried at once; a word still `locked` by a
    /// commit in flight is retried at once a few dozen times, then after sleeps
    /// growing to 1 ms, so a long-held lock (the previous owner's commit across a
    /// rescale) is waited for, about 200 ms at most, rather than reported as
    /// contention.
    async fn backoff(&self, attempt: usize, locked: bool) {
        self.counters.retries.fetch_add(1, Ordering::Relaxed);
        const SPIN: usize = 32;
        if !locked || attempt < SPIN {
            tokio::task::yield_now().await;
        } else {
            let micros = (50u64 << ((attempt - SPIN) / 8).min(5)).min(1000);
            tokio::time::sleep(std::time::Duration::from_micros(micros)).await;
        }
    }

    /// Clears a found slot (delete, eviction, expiry) and frees its object.
    async fn clear(
        &self,
        loc_slot: u16,
        probe_bucket: (GlobalAddr, u64),
        f: &Found,
        db: Option<u8>,
        expect_meta: bool,
    ) -> Result<bool, DhtError> {
        let lease = self.lease(loc_slot)?;
        let tx = Tx {
            shard: lease.shard,
            epoch: lease.epoch,
            writes: vec![
                TxWrite {
                    addr: probe_bucket.0,
                    expect: Some(probe_bucket.1),
                    new: probe_bucket.1,
                },
                TxWrite {
                    addr: f.addr,
                    expect: Some(f.word.0),
                    new: 0,
                },
                TxWrite {
                    addr: f.addr.offset_by(8),
                    // Reclaiming an expired key must not act on a torn read (a fresh
                    // word with the old, expired metadata): validate the metadata too.
                    expect: expect_meta.then_some(f.meta.0),
                    new: 0,
                },
            ],
        };
        match self.commit(tx).await {
            TxOutcome::Committed => {
                if let Some(db) = db {
                    self.count_key(db, -1, Some(f.meta), None);
                }
                if let Some(obj) = f.word.object() {
                    self.pool.free_object(obj).await;
                }
                Ok(true)
            }
            TxOutcome::Conflict { .. } | TxOutcome::Locked => Ok(false),
            TxOutcome::StaleEpoch { .. } => Err(DhtError::NotOwner(loc_slot)),
            TxOutcome::Failed(e) => Err(e.into()),
        }
    }

    async fn reclaim_expired(&self, loc: &Loc, probe: &Probe, f: &Found) {
        if self.owner.lease(loc.slot).is_some()
            && let Ok(true) = self
                .clear(
                    loc.slot,
                    (probe.buckets[f.bucket].0, probe.header(f.bucket)),
                    f,
                    Some(loc.db),
                    true,
                )
                .await
        {
            self.counters.expired.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Deletes `key`; returns whether a live key was removed.
    pub async fn delete(&self, db: u8, key: &[u8]) -> Result<bool, DhtError> {
        let loc = Self::loc(db, key);
        self.lease(loc.slot)?;
        for attempt in 0..MAX_RETRIES {
            let (probe, found) = self.lookup(&loc, key, false).await?;
            let (Some(probe), Some(f)) = (probe, found) else {
                return Ok(false);
            };
            let live = !self.is_expired(f.meta, self.clock.now_ms());
            if self
                .clear(
                    loc.slot,
                    (probe.buckets[f.bucket].0, probe.header(f.bucket)),
                    &f,
                    Some(loc.db),
                    false,
                )
                .await?
            {
                if !live {
                    self.counters.expired.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(live);
            }
            self.backoff(attempt, false).await;
        }
        Err(DhtError::Contention(loc.slot))
    }

    /// Sets (`Some(unix ms)`) or removes (`None`) the key's expiry. Returns whether the
    /// key existed. An expiry in the past deletes the key, as Redis does.
    pub async fn expire(&self, db: u8, key: &[u8], at: Option<u64>) -> Result<bool, DhtError> {
        let loc = Self::loc(db, key);
        let lease = self.lease(loc.slot)?;
        // Only the metadata word changes, which a split copies without validating: hold
        // the hash slot's split lock so a split cannot carry the old metadata over.
        let _split_guard = self.locks[loc.slot as usize].lock().await;
        for attempt in 0..MAX_RETRIES {
            let (probe, found) = self.lookup(&loc, key, false).await?;
            let (Some(probe), Some(f)) = (probe, found) else {
                return Ok(false);
            };
            let abs = self.clock.now_ms();
            if self.is_expired(f.meta, abs) {
                self.reclaim_expired(&loc, &probe, &f).await;
                return Ok(false);
            }
            if let Some(at) = at
                && at <= abs
            {
                return self.delete(db, key).await;
            }
            let meta = f
                .meta
                .with_expire(at.map(|a| self.encode_expire(a)).unwrap_or(0));
            let tx = Tx {
                shard: lease.shard,
                epoch: lease.epoch,
                writes: vec![
                    Self::header_guard(&probe, f.bucket),
                    TxWrite {
                        addr: f.addr,
                        expect: Some(f.word.0),
                        new: f.word.0,
                    },
                    TxWrite {
                        addr: f.addr.offset_by(8),
                        expect: None,
                        new: meta.0,
                    },
                ],
            };
            match self.commit(tx).await {
                TxOutcome::Committed => {
                    self.count_key(db, 0, Some(f.meta), Some(meta));
                    return Ok(true);
                }
                TxOutcome::Conflict { .. } => self.backoff(attempt, false).await,
                TxOutcome::Locked => self.backoff(attempt, true).await,
                TxOutcome::StaleEpoch { .. } => return Err(DhtError::NotOwner(loc.slot)),
                TxOutcome::Failed(e) => return Err(e.into()),
            }
        }
        Err(DhtError::Contention(loc.slot))
    }

    // ------------------------------------------------------------ growth

    fn subtable_bytes(&self, depth: u32, suffix: u64, slot: u16) -> Vec<u8> {
        let mut bytes = vec![0u8; (self.buckets * layout::BUCKET) as usize];
        let h = layout::header(depth, suffix, slot).to_le_bytes();
        for b in 0..self.buckets as usize {
            let at = b * layout::BUCKET as usize;
            bytes[at..at + 8].copy_from_slice(&h);
        }
        bytes
    }

    /// Places split entries into 2^k child subtables of depth `depth + k`; `None` if a
    /// child cannot hold its share.
    fn place(
        &self,
        entries: &[(u64, u64, u64)],
        depth: u32,
        suffix: u64,
        k: u32,
        slot: u16,
    ) -> Option<Vec<Vec<u8>>> {
        let mut children: Vec<Vec<u8>> = (0..1u64 << k)
            .map(|j| self.subtable_bytes(depth + k, suffix | (j << depth), slot))
            .collect();
        for (hash, word, meta) in entries {
            let side = ((hash >> depth) & ((1 << k) - 1)) as usize;
            let (a, b) = hash::buckets(*hash, self.buckets);
            let table = &mut children[side];
            let free = [a, b].into_iter().find_map(|bucket| {
                let base = (bucket * layout::BUCKET) as usize;
                (0..SLOTS_PER_BUCKET)
                    .map(|i| base + (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize)
                    .find(|&at| le64(table, at) == 0)
            })?;
            table[free..free + 8].copy_from_slice(&word.to_le_bytes());
            table[free + 8..free + 16].copy_from_slice(&meta.to_le_bytes());
        }
        Some(children)
    }

    async fn create_partition(&self, slot: u16, lease: Lease) -> Result<(), DhtError> {
        let _guard = self.locks[slot as usize].lock().await;
        if self.load_dir(slot).await?.is_some() {
            return Ok(());
        }
        let st_len = self.buckets * layout::BUCKET;
        let st = self.room_for(|| self.pool.alloc(st_len, true)).await?;
        let dir = self
            .room_for(|| self.pool.alloc(layout::DIR_HEADER + 8, true))
            .await?;
        let mut dir_bytes = [0u8; 16];
        dir_bytes[8..].copy_from_slice(&st.addr.bits().to_le_bytes());
        self.pool
            .write_all(&[
                (st.addr, &self.subtable_bytes(0, 0, slot)),
                (dir.addr, &dir_bytes),
            ])
            .await?;
        let tx = Tx {
            shard: lease.shard,
            epoch: lease.epoch,
            writes: vec![TxWrite {
                addr: self.slot_entry(slot),
                expect: Some(0),
                new: layout::dir_ref(dir),
            }],
        };
        match self.commit(tx).await {
            TxOutcome::Committed => {
                self.known_partition(slot);
                self.load_dir(slot).await?;
                Ok(())
            }
            other => {
                // An in-doubt commit may have made the blocks reachable: leak them.
                if !matches!(other, TxOutcome::Failed(_)) {
                    self.pool.free(st);
                    self.pool.free(dir);
                }
                match other {
                    TxOutcome::StaleEpoch { .. } => Err(DhtError::NotOwner(slot)),
                    TxOutcome::Failed(e) => Err(e.into()),
                    _ => Ok(()), // somebody else created it: retry the operation
                }
            }
        }
    }

    /// Splits the subtable `loc` maps to in two (extendible hashing).
    async fn split(&self, loc: &Loc, lease: Lease) -> Result<(), DhtError> {
        let _guard = self.locks[loc.slot as usize].lock().await;
        let Some(dir) = self.load_dir(loc.slot).await? else {
            return Ok(());
        };
        let old = dir.subtable(loc.hash);
        self.rebuild(loc.slot, &dir, old, 1, lease).await
    }

    /// Rewrites subtable `old` of `slot` as `2^k` new subtables, `k` from `min_k` up
    /// (a split; with `min_k = 0`, a move to a new block), and commits the directory
    /// change with every entry and bucket header of `old` validated, so a concurrent
    /// write makes it fail rather than lose a key. The caller holds the slot's lock.
    async fn rebuild(
        &self,
        slot: u16,
        dir: &Dir,
        old: GlobalAddr,
        min_k: u32,
        lease: Lease,
    ) -> Result<(), DhtError> {
        let st_len = (self.buckets * layout::BUCKET) as usize;
        let mut bytes = vec![0u8; st_len];
        self.pool.read(old, &mut bytes).await?;
        let h0 = le64(&bytes, 0);
        let depth = layout::header_depth(h0);
        let suffix = layout::header_suffix(h0);
        if h0 & layout::MOVED != 0 {
            return Ok(()); // split by someone else meanwhile; the caller retries
        }
        if min_k > 0 && depth >= layout::MAX_DEPTH.min(32) {
            return Err(DhtError::OutOfMemory);
        }
        // Every entry's full hash decides its side; the slot keeps only a fingerprint,
        // so read the keys.
        let mut guards = Vec::new();
        let mut entries = Vec::new();
        for b in 0..self.buckets as usize {
            let base = b * layout::BUCKET as usize;
            let hdr = le64(&bytes, base);
            guards.push(TxWrite {
                addr: old.offset_by(base as u64),
                expect: Some(hdr),
                new: hdr | layout::MOVED,
            });
            for i in 0..SLOTS_PER_BUCKET {
                let at = base + (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize;
                let word = SlotWord(le64(&bytes, at));
                // Empty slots are validated too: a set that fills one after this read
                // must make the split fail, or its key would be left behind.
                guards.push(TxWrite {
                    addr: old.offset_by(at as u64),
                    expect: Some(word.0),
                    new: word.0,
                });
                if word.is_empty() {
                    continue;
                }
                let meta = le64(&bytes, at + 8);
                let obj = word
                    .object()
                    .ok_or_else(|| corrupt(format!("malformed slot word {:#x}", word.0)))?;
                let (db, key, _) = self.pool.read_any(obj).await?.ok_or_else(|| {
                    corrupt(format!("slot word {:#x} points at no valid object", word.0))
                })?;
                entries.push((key_hash(db, &key), word.0, meta));
            }
        }
        // Split in two; in the rare case a half cannot hold its entries (two-choice
        // placement failed), split into four or eight instead.
        let mut placed = None;
        for k in min_k..=3u32 {
            if depth + k > layout::MAX_DEPTH {
                break;
            }
            if let Some(children) = self.place(&entries, depth, suffix, k, slot) {
                placed = Some((k, children));
                break;
            }
        }
        let Some((k, children)) = placed else {
            return Err(DhtError::Contention(slot));
        };
        let mut blocks = Vec::with_capacity(children.len());
        for _ in 0..children.len() {
            match self.room_for(|| self.pool.alloc(st_len as u64, true)).await {
                Ok(b) => blocks.push(b),
                Err(e) => {
                    blocks.into_iter().for_each(|b| self.pool.free(b));
                    return Err(e);
                }
            }
        }
        let writes_out: Vec<(GlobalAddr, &[u8])> = blocks
            .iter()
            .zip(&children)
            .map(|(b, c)| (b.addr, &c[..]))
            .collect();
        self.pool.write_all(&writes_out).await?;
        let child = |i: usize| blocks[(i >> depth) & ((1 << k) - 1)].addr;

        let mut writes = guards;
        let mut new_dir = None;
        if depth + k <= dir.depth {
            for (i, st) in dir.subtables.iter().enumerate() {
                if *st == old {
                    writes.push(TxWrite {
                        addr: dir.block.addr.offset_by(layout::DIR_HEADER + 8 * i as u64),
                        expect: Some(old.bits()),
                        new: child(i).bits(),
                    });
                }
            }
        } else {
            let nd = depth + k;
            let n = 1usize << nd;
            let mut bytes = vec![0u8; 8 + 8 * n];
            bytes[..8].copy_from_slice(&(nd as u64).to_le_bytes());
            for i in 0..n {
                let prev = dir.subtables[i & ((1 << dir.depth) - 1)];
                let st = if prev == old { child(i) } else { prev };
                bytes[8 + 8 * i..16 + 8 * i].copy_from_slice(&st.bits().to_le_bytes());
            }
            let block = self
                .room_for(|| self.pool.alloc(bytes.len() as u64, true))
                .await?;
            self.pool.write_all(&[(block.addr, &bytes)]).await?;
            writes.push(TxWrite {
                addr: self.slot_entry(slot),
                expect: Some(layout::dir_ref(dir.block)),
                new: layout::dir_ref(block),
            });
            new_dir = Some(block);
        }
        let tx = Tx {
            shard: lease.shard,
            epoch: lease.epoch,
            writes,
        };
        let outcome = self.commit(tx).await;
        if outcome == TxOutcome::Committed {
            if k > 0 {
                self.counters.splits.fetch_add(1, Ordering::Relaxed);
            }
            self.pool.free(Block {
                addr: old,
                class: blocks[0].class,
            });
            if new_dir.is_some() {
                self.pool.free(dir.block);
            }
            self.load_dir(slot).await?;
            return Ok(());
        }
        // An in-doubt commit may have made the new blocks reachable: leak them then.
        if !matches!(outcome, TxOutcome::Failed(_)) {
            blocks.into_iter().for_each(|b| self.pool.free(b));
            if let Some(b) = new_dir {
                self.pool.free(b);
            }
        }
        self.load_dir(slot).await?;
        match outcome {
            TxOutcome::StaleEpoch { .. } => Err(DhtError::NotOwner(slot)),
            TxOutcome::Failed(e) => Err(e.into()),
            _ => Ok(()), // a concurrent write changed the subtable: the caller retries
        }
    }

    // ------------------------------------------------------------ eviction, expiry

    /// Evicts until used memory plus `need` fits `maxmemory`.
    /// Writes an object, making room if the pool is full (see [`room_for`](Self::room_for)).
    async fn write_with_room(
        &self,
        db: u8,
        key: &[u8],
        value: &[u8],
    ) -> Result<ObjectRef, DhtError> {
        self.room_for(|| self.pool.write_object(db, key, value))
            .await
    }

    /// Runs a pool allocation; if the pool is full (no region left within maxmemory),
    /// evicts per the policy and tries again, waiting out the grace period of the
    /// blocks just freed (they are reusable only after it), before answering OOM.
    async fn room_for<T, F, Fut>(&self, mut attempt: F) -> Result<T, DhtError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, UmoError>>,
    {
        // Long enough for a segment emptied by eviction to pass its grace period even
        // on a loaded host: an evicting cache should wait rather than answer OOM.
        let give_up = std::time::Instant::now() + self.pool.config().grace * 10;
        loop {
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(UmoError::OutOfMemory(_)) => {
                    if !self.policy().evicts() || std::time::Instant::now() > give_up {
                        tracing::warn!(stats = ?self.pool.stats(), used = self.used_memory(), "out of pool memory");
                        return Err(DhtError::OutOfMemory);
                    }
                    for _ in 0..16 {
                        if self.evict_one().await?.is_none() {
                            break;
                        }
                    }
                    // Free blocks scattered over every segment do not make one free.
                    self.keep_spare_segment().await?;
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Evicts every key of this agent's hash slots whose object starts inside
    /// `[start, start + len)` (a segment or a region), policy or not; returns how many.
    /// A full pool whose free memory is scattered over every segment frees a whole
    /// segment this way (memcached's slab rebalancing does the same).
    pub async fn evict_range(&self, start: GlobalAddr, len: u64) -> Result<usize, DhtError> {
        Ok(self.clear_range(start, len, false).await?.1)
    }

    /// Moves (or with `relocate == false`, evicts) the objects of this agent's keys
    /// that start inside `[start, start + len)`. A move writes the object anew (outside
    /// any retired region) and swaps the slot word if it still points at the old one;
    /// a key that cannot be moved for want of room is evicted. Returns (moved, evicted).
    async fn clear_range(
        &self,
        start: GlobalAddr,
        len: u64,
        relocate: bool,
    ) -> Result<(usize, usize), DhtError> {
        let mut moved = 0;
        let inside = |a: GlobalAddr| {
            a.region() == start.region()
                && (start.offset()..start.offset() + len).contains(&a.offset())
        };
        let parts = self.owned_partitions();
        let mut evicted = 0;
        for slot in parts {
            let Some(dir) = self.load_dir(slot).await? else {
                continue;
            };
            let mut subtables = dir.subtables.clone();
            subtables.sort_unstable();
            subtables.dedup();
            for st in subtables {
                for b in 0..self.buckets {
                    let bucket = st.offset_by(b * layout::BUCKET);
                    // Each clear changes the bucket header: read it again after one.
                    for _ in 0..=SLOTS_PER_BUCKET {
                        let mut bytes = [0u8; layout::BUCKET as usize];
                        self.pool.read(bucket, &mut bytes).await?;
                        let header = le64(&bytes, 0);
                        if header & layout::MOVED != 0 || layout::header_slot(header) != slot {
                            break; // split meanwhile: its entries live on elsewhere
                        }
                        let probe = Probe {
                            buckets: [(bucket, bytes), (bucket, bytes)],
                        };
                        let Some((addr, word, meta)) = (0..SLOTS_PER_BUCKET)
                            .map(|i| probe.slot(0, i))
                            .find(|(_, w, _)| w.object().is_some_and(|o| inside(o.block.addr)))
                        else {
                            break;
                        };
                        let Some(obj) = word.object() else { break };
                        let key = self.pool.read_any(obj).await?;
                        if relocate
                            && let Some((db, k, v)) = &key
                            && let Ok(fresh) = self.pool.write_object(*db, k, v).await
                        {
                            let tx = Tx {
                                shard: self.lease(slot)?.shard,
                                epoch: self.lease(slot)?.epoch,
                                writes: vec![
                                    TxWrite {
                                        addr: bucket,
                                        expect: Some(header),
                                        new: header,
                                    },
                                    TxWrite {
                                        addr,
                                        expect: Some(word.0),
                                        new: SlotWord::new(word.fp(), fresh).0,
                                    },
                                ],
                            };
                            match self.commit(tx).await {
                                TxOutcome::Committed => {
                                    moved += 1;
                                    self.pool.free_object(obj).await;
                                }
                                TxOutcome::StaleEpoch { .. } => {
                                    return Err(DhtError::NotOwner(slot));
                                }
                                // Changed meanwhile (the next read sees it) or in doubt.
                                TxOutcome::Failed(_) => {}
                                _ => self.pool.free_object(fresh).await,
                            }
                            continue;
                        }
                        let found = Found {
                            bucket: 0,
                            addr,
                            word,
                            meta,
                            value: None,
                        };
                        if self
                            .evict_entry(slot, (bucket, header), &found)
                            .await?
                            .is_some()
                        {
                            evicted += 1;
                        }
                    }
                }
            }
        }
        Ok((moved, evicted))
    }

    /// Moves this agent's part of the table out of `region` so the pool can return it.
    /// The pool stops allocating there; the agent evicts per its policy down to
    /// maxmemory; then directories and subtables of its hash slots are rewritten
    /// elsewhere (readers holding the old ones see them marked moved) and the objects
    /// still there are moved (evicted only if no room is left). Returns (moved,
    /// evicted) keys.
    pub async fn vacate_region(
        &self,
        region: dmc_verbs::RegionId,
    ) -> Result<(usize, usize), DhtError> {
        self.pool.retire_region(region);
        // Shrinking evicts per the policy first; what is left in the region moves.
        self.shrink_to_maxmemory(usize::MAX).await?;
        let parts = self.owned_partitions();
        for slot in parts {
            let lease = self.lease(slot)?;
            let _guard = self.locks[slot as usize].lock().await;
            // A subtable's move can fail on a concurrent write: try again.
            for _ in 0..MAX_RETRIES {
                let Some(dir) = self.load_dir(slot).await? else {
                    break;
                };
                if let Some(old) = dir.subtables.iter().find(|st| st.region() == region) {
                    self.rebuild(slot, &dir, *old, 0, lease).await?;
                    continue;
                }
                if dir.block.addr.region() == region {
                    self.move_dir(slot, &dir, lease).await?;
                    continue;
                }
                break;
            }
        }
        let size = self.pool.config().region_size;
        self.clear_range(GlobalAddr::new(region, 0), size, true)
            .await
    }

    /// Rewrites `slot`'s directory into a new block (its old one is in a region being
    /// returned). The caller holds the slot's lock.
    async fn move_dir(&self, slot: u16, dir: &Dir, lease: Lease) -> Result<(), DhtError> {
        let mut bytes = vec![0u8; dir.block.size() as usize];
        self.pool.read(dir.block.addr, &mut bytes).await?;
        let block = self
            .room_for(|| self.pool.alloc(bytes.len() as u64, true))
            .await?;
        self.pool.write_all(&[(block.addr, &bytes)]).await?;
        let tx = Tx {
            shard: lease.shard,
            epoch: lease.epoch,
            writes: vec![TxWrite {
                addr: self.slot_entry(slot),
                expect: Some(layout::dir_ref(dir.block)),
                new: layout::dir_ref(block),
            }],
        };
        match self.commit(tx).await {
            TxOutcome::Committed => {
                self.pool.free(dir.block);
                self.load_dir(slot).await?;
                Ok(())
            }
            TxOutcome::StaleEpoch { .. } => Err(DhtError::NotOwner(slot)),
            TxOutcome::Failed(e) => Err(e.into()),
            _ => {
                self.pool.free(block);
                self.load_dir(slot).await?;
                Ok(())
            }
        }
    }

    /// Evicts an entry found in `bucket` (with the header it was read under), policy or
    /// not: clears its slot word if it still holds it, counts the eviction and drops the
    /// key from the local cache. `Some(key)` (the key, if its object was readable) when
    /// evicted, `None` when the entry changed meanwhile.
    async fn evict_entry(
        &self,
        slot: u16,
        bucket: (GlobalAddr, u64),
        found: &Found,
    ) -> Result<Option<Option<(u8, Bytes)>>, DhtError> {
        let Some(obj) = found.word.object() else {
            return Ok(None);
        };
        let key = self.pool.read_any(obj).await?;
        if !self
            .clear(slot, bucket, found, key.as_ref().map(|k| k.0), false)
            .await?
        {
            return Ok(None);
        }
        self.counters.evicted.fetch_add(1, Ordering::Relaxed);
        if let Some((db, k, _)) = &key {
            self.removed(*db, k);
        }
        Ok(Some(key.map(|(db, k, _)| (db, k))))
    }

    /// Keeps a segment free for allocations the full pool cannot serve otherwise (the
    /// maintenance tick calls this, and so does a write that found no room): if no
    /// spare one is left, evicts the keys of the sparsest segment so it empties (after
    /// the grace period) and can serve any size class. At most one segment per two
    /// grace periods. Returns the keys evicted.
    pub async fn keep_spare_segment(&self) -> Result<usize, DhtError> {
        if !self.pool.at_limit() || !self.policy().evicts() || self.pool.spare_segments() > 0 {
            return Ok(0);
        }
        // One segment at a time: the last one empties only after the grace period.
        {
            let mut last = self.spare_started.lock();
            if last.is_some_and(|t| t.elapsed() < self.pool.config().grace * 2) {
                return Ok(0);
            }
            *last = Some(std::time::Instant::now());
        }
        match self.pool.drain_sparsest_segment() {
            Some((start, len)) => self.evict_range(start, len).await,
            None => Ok(0),
        }
    }

    /// Evicts (per the policy, at most `limit` keys) while the pool holds more than
    /// `maxmemory`; returns how many keys went.
    pub async fn shrink_to_maxmemory(&self, limit: usize) -> Result<usize, DhtError> {
        let max = self.eviction_limit();
        let mut evicted = 0;
        while max > 0 && evicted < limit && self.used_memory() > max && self.policy().evicts() {
            if self.evict_one().await?.is_none() {
                break;
            }
            evicted += 1;
        }
        Ok(evicted)
    }

    async fn make_room(&self, need: u64) -> Result<(), DhtError> {
        let max = self.eviction_limit();
        if max == 0 {
            return Ok(());
        }
        while self.used_memory() + need > max {
            if !self.policy().evicts() {
                return Err(DhtError::OutOfMemory);
            }
            if self.evict_one().await?.is_none() {
                return Err(DhtError::OutOfMemory);
            }
        }
        Ok(())
    }

    /// Reads one random bucket of a random owned partition: its slots as candidates.
    async fn sample_bucket(
        &self,
        parts: &[u16],
    ) -> Result<Vec<(u16, GlobalAddr, u64, Found)>, DhtError> {
        let slot = parts[rng::below(parts.len() as u64) as usize];
        let Some(dir) = self.dir(slot).await? else {
            return Ok(Vec::new());
        };
        let st = dir.subtables[rng::below(dir.subtables.len() as u64) as usize];
        let bucket = st.offset_by(rng::below(self.buckets) * layout::BUCKET);
        let mut bytes = [0u8; layout::BUCKET as usize];
        self.pool.read(bucket, &mut bytes).await?;
        let header = le64(&bytes, 0);
        // A cached directory may name a subtable that was split and its memory reused
        // (by any size class): only a live bucket of this slot is sampled.
        if header & layout::MOVED != 0
            || layout::header_slot(header) != slot
            || layout::header_depth(header) > 32
        {
            self.load_dir(slot).await?;
            return Ok(Vec::new());
        }
        let probe = Probe {
            buckets: [(bucket, bytes), (bucket, bytes)],
        };
        Ok((0..SLOTS_PER_BUCKET)
            .map(|i| probe.slot(0, i))
            .filter(|(_, w, _)| !w.is_empty())
            .map(|(addr, word, meta)| {
                (
                    slot,
                    bucket,
                    header,
                    Found {
                        bucket: 0,
                        addr,
                        word,
                        meta,
                        value: None,
                    },
                )
            })
            .collect())
    }

    /// Evicts one key by sampling: at least `maxmemory-samples` eligible candidates
    /// (expired keys first), the lowest priority goes. Returns the evicted key, or
    /// `None` if nothing this client owns may be evicted.
    pub async fn evict_one(&self) -> Result<Option<(u8, Bytes)>, DhtError> {
        let policy = self.policy();
        if !policy.evicts() {
            return Ok(None);
        }
        let parts = self.owned_partitions();
        if parts.is_empty() {
            return Ok(None);
        }
        let k = self.samples();
        let (abs, now) = self.now();
        for _ in 0..MAX_RETRIES {
            let mut best: Option<(f64, (u16, GlobalAddr, u64, Found))> = None;
            let mut seen = 0;
            // Bounded sampling: sparse tables may need many bucket reads to find K keys.
            for _ in 0..(k * 8).max(64) {
                for cand in self.sample_bucket(&parts).await? {
                    let meta = cand.3.meta;
                    let expired = self.is_expired(meta, abs);
                    if !expired && !policy.eligible(meta) {
                        continue;
                    }
                    let p = if expired {
                        f64::NEG_INFINITY
                    } else {
                        policy.priority(meta, &now, rng::next_f64())
                    };
                    seen += 1;
                    if best.as_ref().is_none_or(|(bp, _)| p < *bp) {
                        best = Some((p, cand));
                    }
                }
                if seen >= k {
                    break;
                }
            }
            if best.is_none() {
                // Sampling found nothing eligible (a sparse table, or few keys the
                // policy may evict): look everywhere before declaring nothing evictable.
                best = self
                    .exhaustive_candidate(&parts, &policy, &now, abs)
                    .await?;
            }
            let Some((_, (slot, bucket, header, victim))) = best else {
                return Ok(None);
            };
            if let Some(key) = self.evict_entry(slot, (bucket, header), &victim).await? {
                return Ok(key);
            }
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
        }
        Ok(None)
    }

    /// The best eviction candidate over every bucket of the owned partitions.
    async fn exhaustive_candidate(
        &self,
        parts: &[u16],
        policy: &dyn Policy,
        now: &Now,
        abs: u64,
    ) -> Result<Option<(f64, (u16, GlobalAddr, u64, Found))>, DhtError> {
        let mut best: Option<(f64, (u16, GlobalAddr, u64, Found))> = None;
        let st_len = (self.buckets * layout::BUCKET) as usize;
        for &slot in parts {
            let Some(dir) = self.load_dir(slot).await? else {
                continue;
            };
            let mut subtables = dir.subtables.clone();
            subtables.dedup();
            for st in subtables {
                let mut bytes = vec![0u8; st_len];
                self.pool.read(st, &mut bytes).await?;
                for b in 0..self.buckets as usize {
                    let base = b * layout::BUCKET as usize;
                    let header = le64(&bytes, base);
                    let bucket = st.offset_by(base as u64);
                    for i in 0..SLOTS_PER_BUCKET {
                        let at = base + (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize;
                        let word = SlotWord(le64(&bytes, at));
                        let meta = SlotMeta(le64(&bytes, at + 8));
                        let expired = self.is_expired(meta, abs);
                        if word.is_empty() || (!expired && !policy.eligible(meta)) {
                            continue;
                        }
                        let p = if expired {
                            f64::NEG_INFINITY
                        } else {
                            policy.priority(meta, now, rng::next_f64())
                        };
                        if best.as_ref().is_none_or(|(bp, _)| p < *bp) {
                            let addr = st.offset_by(at as u64);
                            best = Some((
                                p,
                                (
                                    slot,
                                    bucket,
                                    header,
                                    Found {
                                        bucket: 0,
                                        addr,
                                        word,
                                        meta,
                                        value: None,
                                    },
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Ok(best)
    }

    /// One active-expiry pass: samples `buckets` random buckets of owned partitions and
    /// deletes the expired keys found. Returns how many were deleted.
    pub async fn active_expire(&self, buckets: usize) -> Result<usize, DhtError> {
        let parts = self.owned_partitions();
        if parts.is_empty() {
            return Ok(0);
        }
        let abs = self.clock.now_ms();
        let mut n = 0;
        for _ in 0..buckets {
            for (slot, bucket, header, f) in self.sample_bucket(&parts).await? {
                if !self.is_expired(f.meta, abs) {
                    continue;
                }
                let db = match f.word.object() {
                    Some(obj) => self.pool.read_any(obj).await?.map(|(db, _, _)| db),
                    None => None,
                };
                if self.clear(slot, (bucket, header), &f, db, true).await? {
                    self.counters.expired.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// Starts the background upkeep an owner runs (Redis's `serverCron` share of it):
    /// every `every`, active expiry over a sample of buckets, repeated while more than a
    /// quarter of the sample had expired, and a flush of combined access metadata. The
    /// task ends when the table is dropped.
    pub fn spawn_maintenance(
        self: &Arc<Self>,
        every: std::time::Duration,
    ) -> tokio::task::JoinHandle<()> {
        const SAMPLE: usize = 20;
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(dht) = weak.upgrade() else { return };
                for _ in 0..16 {
                    match dht.active_expire(SAMPLE).await {
                        Ok(n) if n * 4 > SAMPLE * SLOTS_PER_BUCKET / 2 => continue,
                        Ok(_) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, "active expiry failed");
                            break;
                        }
                    }
                }
                dht.flush_hits().await;
                dht.pool.sync_usage().await;
                // Over maxmemory without writes (it was lowered): evict down to it.
                if let Err(e) = dht.shrink_to_maxmemory(1024).await {
                    tracing::warn!(error = %e, "evicting down to maxmemory failed");
                }
                // A pool at its limit keeps a segment emptying ahead of need, so a
                // write of a size class without free blocks rarely waits for one.
                if let Err(e) = dht.keep_spare_segment().await {
                    tracing::warn!(error = %e, "freeing a spare segment failed");
                }
                // Another agent's SWAPDB reaches this one within a tick (until the
                // cluster manager pushes such changes).
                if let Err(e) = dht.load_db_map().await {
                    tracing::warn!(error = %e, "reloading the database map failed");
                }
            }
        })
    }

    // ------------------------------------------------------------ scanning

    /// The occupied slot words of a hash slot's partition: (word, meta).
    async fn scan_words(&self, slot: u16) -> Result<Vec<(SlotWord, SlotMeta)>, DhtError> {
        let Some(dir) = self.load_dir(slot).await? else {
            return Ok(Vec::new());
        };
        let mut subtables = dir.subtables.clone();
        subtables.sort_unstable();
        subtables.dedup();
        let st_len = (self.buckets * layout::BUCKET) as usize;
        let mut out = Vec::new();
        for st in subtables {
            let mut bytes = vec![0u8; st_len];
            self.pool.read(st, &mut bytes).await?;
            for b in 0..self.buckets as usize {
                for i in 0..SLOTS_PER_BUCKET {
                    let at = b * layout::BUCKET as usize
                        + (layout::BUCKET_HEADER + layout::SLOT * i as u64) as usize;
                    let w = SlotWord(le64(&bytes, at));
                    if !w.is_empty() {
                        out.push((w, SlotMeta(le64(&bytes, at + 8))));
                    }
                }
            }
        }
        Ok(out)
    }

    /// The live keys of hash slot `slot`, as (db, key). Keys present for the whole call
    /// are all returned; keys written meanwhile may or may not be.
    pub async fn scan_slot(&self, slot: u16) -> Result<Vec<(u8, Bytes)>, DhtError> {
        let abs = self.clock.now_ms();
        let mut keys = Vec::new();
        for (w, m) in self.scan_words(slot).await? {
            if self.is_expired(m, abs) {
                continue;
            }
            if let Some(obj) = w.object()
                && let Some((db, key, _)) = self.pool.read_any(obj).await?
            {
                keys.push((db, key));
            }
        }
        Ok(keys)
    }

    /// Keys (of every db) in hash slot `slot`, expired ones excluded.
    pub async fn count_in_slot(&self, slot: u16) -> Result<usize, DhtError> {
        let abs = self.clock.now_ms();
        Ok(self
            .scan_words(slot)
            .await?
            .into_iter()
            .filter(|(_, m)| !self.is_expired(*m, abs))
            .count())
    }
}

/// Combines the accesses of each key (in order) into one FAA addend per metadata word.
/// Accesses whose slot reference is older than `lifetime` are dropped (see [`SlotRef`]).
fn combine_hits(
    mut batch: Vec<PendingHit>,
    lifetime: std::time::Duration,
) -> Vec<(GlobalAddr, u64)> {
    let now = std::time::Instant::now();
    batch.retain(|h| now.saturating_duration_since(h.at) < lifetime);
    batch.sort_by_key(|h| h.addr);
    let mut out = Vec::new();
    let mut i = 0;
    while i < batch.len() {
        let first = &batch[i];
        let mut j = i;
        let mut lfu = 0u32;
        while j < batch.len() && batch[j].addr == first.addr {
            lfu += batch[j].lfu_add as u32;
            j += 1;
        }
        let last_access = batch[j - 1].access;
        // Never carry the counter past 255: the word's other fields sit below it.
        let lfu = lfu.min(u8::MAX.saturating_sub(first.seen.lfu()) as u32) as u64;
        let add = (lfu << layout::LFU_SHIFT).wrapping_add(
            (last_access.wrapping_sub(first.seen.access()) as u64) << layout::ACCESS_SHIFT,
        );
        if add != 0 {
            out.push((first.addr, add));
        }
        i = j;
    }
    out
}

/// Group commit: transactions queued while a batch is in flight go out together, so
/// pipelined clients cost one commit RPC per node per batch.
async fn commit_loop(pool: Arc<Pool>, mut rx: mpsc::UnboundedReceiver<CommitJob>) {
    let mut batch: Vec<CommitJob> = Vec::with_capacity(MAX_COMMIT_BATCH);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < MAX_COMMIT_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let txs: Vec<Tx> = batch.iter().map(|(tx, _)| tx.clone()).collect();
        let outcomes = pool.commit(&txs).await;
        for ((_, done), outcome) in batch.drain(..).zip(outcomes) {
            let _ = done.send(outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(depth: u32) -> Dir {
        let subtables = (0..1u64 << depth)
            .map(|i| GlobalAddr::new(7, 4096 * (i + 1)))
            .collect();
        let block = Block {
            addr: GlobalAddr::new(7, 0),
            class: 0,
        };
        Dir::new(block, depth, subtables)
    }

    #[test]
    fn flat_dirs_agree_with_the_directory_or_defer_to_it() {
        let flat = FlatDirs::new();
        assert_eq!(flat.subtable(3, 12345), None, "nothing cached yet");
        for depth in 0..=FLAT_DEPTH + 1 {
            let d = dir(depth);
            flat.set(3, Some(&d));
            for hash in [0u64, 1, 5, 31, 12345, u64::MAX, 0xdead_beef] {
                let want = (depth <= FLAT_DEPTH).then(|| d.subtable(hash));
                assert_eq!(flat.subtable(3, hash), want, "depth {depth} hash {hash}");
                assert_eq!(flat.subtable(4, hash), None, "other slots untouched");
            }
        }
        flat.set(3, Some(&dir(1)));
        flat.set(3, None);
        assert_eq!(flat.subtable(3, 1), None);
    }
}
