//! The pool client: one per process that uses the pool (a compute agent's DI client).
//!
//! It holds a transport per memory node, the region map (which node holds the primary
//! and the backups of each region), and the allocator, and it offers the operations the
//! hash table is built from:
//!
//! * [`Pool::alloc`] / [`Pool::free`]: blocks from size classes; the pool grows by a
//!   region, placed on the `r` memory nodes with the most free capacity, when the
//!   allocator runs out of segments;
//! * [`Pool::write_object`]: an object written out of place to every copy, chained
//!   over several blocks when it is larger than one;
//! * [`Pool::read_object`]: one-sided reads on the primary that verify key and checksum;
//! * [`Pool::commit`]: OCC + two-phase commit of word updates over the commit RPCs,
//!   batched per memory node, backups before primaries, fenced by shard epoch;
//! * [`Pool::commit_slot`]: a single key's slot updated with one-sided verbs (the
//!   primary's slot word is the lock), fenced by the owner's lease.
//!
//! The superblock in region 1 records the region map, so a restarted client finds the
//! pool it left, and several clients (the agents of one instance) share one pool: a
//! client learns a region another one grew the pool by from its record the first time
//! an address in it turns up, and segments are claimed with a compare-and-swap on the
//! region's segment table, so no two clients carve the same segment.
//!
//! The `impl Pool` is spread over one file per job:
//!
//! | module | owns |
//! |---|---|
//! | `pool` (this file) | the pool's types, the [`Pool`] struct, opening it, its accessors |
//! | `superblock` | finding, formatting and loading the superblock; region records; the root |
//! | `regions` | the region map: growth, placement of copies, learning others' regions |
//! | `allocation` | blocks, segment claims, the pool-wide usage counter |
//! | `block_cache` | per-thread blocks to hand out and frees, in front of the allocator |
//! | `verbs` | one-sided reads from primaries, writes to every copy, fetch-and-add |
//! | `hints` | prefetch hints for copies in this address space, one or many at once |
//! | `object_write` | objects written out of place (chained when large) and freed |
//! | `object_read` | objects read and verified (db, key, checksum) |
//! | `fence` | shard epochs and the fencing domain of a shard |
//! | `commit` | OCC + 2PC commits of word updates (multi-word transactions) |
//! | `slot_commit` | single-key commits with one-sided verbs, locked in the slot word |
//! | `load` | each node's and region's latency as this client sees it, for the balancer |
//!
//! Nothing here interprets a hash-table word: the pool moves bytes and commits words.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dmc_verbs::{LocalTransport, NodeConfig, NodeCore, RegionId, Storage, Transport};
use futures::future::BoxFuture;
use parking_lot::{Mutex, RwLock};

use crate::addr::GlobalAddr;
use crate::alloc::{AllocStats, Allocator, Block};
use crate::error::UmoError;
use crate::layout::{self, RegionRecord, SUPER_REGION};

mod allocation;
mod block_cache;
mod commit;
mod counters;
mod failover;
mod fence;
mod gate;
mod hints;
mod load;
mod node_table;
mod object_read;
mod object_write;
mod placement;
mod regions;
mod settle;
mod slot_commit;
mod slot_recovery;
mod superblock;
mod verbs;

pub use load::{LatencySample, LoadReport};
pub use object_read::StoredObject;
pub use object_write::RelocatedTree;
pub use placement::{DirtyChunks, FILL_CHUNK, Placement};
pub use settle::Settled;
pub use slot_commit::SlotWrite;
pub use slot_recovery::SlotRecovery;

/// The fencing domain of pool-level metadata (the superblock root).
pub const POOL_SHARD: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Copies of every region (`r`), on distinct memory nodes.
    pub replicas: usize,
    pub region_size: u64,
    pub segment_size: u64,
    /// How long a freed block waits before reuse.
    pub grace: Duration,
    /// This client's id, recorded as the owner of the segments it claims.
    pub client_id: u32,
    /// Most regions the pool may grow to (0: as many as the nodes hold).
    pub max_regions: u32,
    /// The region holding this pool's superblock. Pools with different superblock
    /// regions share memory nodes without sharing data: each one's region table,
    /// usage counter, table root and shard epochs are its own (one per cache
    /// instance of a cluster).
    pub super_region: RegionId,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            replicas: 2,
            region_size: 1 << 30,
            segment_size: 16 << 20,
            grace: Duration::from_millis(500),
            client_id: 1,
            max_regions: 0,
            super_region: SUPER_REGION,
        }
    }
}

/// Where a region's copies are: indexes into the pool's node list.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RegionEntry {
    primary: usize,
    backups: Vec<usize>,
    /// Copies being filled (re-replication): every write goes there too, nothing is
    /// read or validated there, and recovery leaves them alone.
    filling: Vec<usize>,
}

impl RegionEntry {
    /// The complete copies: the primary, then the backups.
    fn complete(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.primary).chain(self.backups.iter().copied())
    }

    /// Every copy a write must reach: the complete ones, then those being filled.
    fn copies(&self) -> impl Iterator<Item = usize> + '_ {
        self.complete().chain(self.filling.iter().copied())
    }
}

/// An object's head block, as a hash-table slot records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    pub block: Block,
    pub chained: bool,
}

/// What a verified read found at an object's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadObject {
    /// The object holds the requested key; this is its value and the value's type.
    Value(Bytes, crate::object::ValueKind),
    /// Another key, a torn or freed block: the index entry was stale, retry.
    Mismatch,
}

/// One word update of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxWrite {
    pub addr: GlobalAddr,
    /// The value the word must still hold; `None` writes without validating.
    pub expect: Option<u64>,
    pub new: u64,
    /// The word carries its lock in place (its lowest bit, [`WORD_LOCK`], always 0
    /// in a committed value): one-sided writers ([`Pool::commit_slot`]) see the lock.
    /// Requires `expect`.
    pub in_word_lock: bool,
}

/// A transaction: word updates committed atomically on every copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tx {
    pub shard: u32,
    pub epoch: u64,
    pub writes: Vec<TxWrite>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxOutcome {
    Committed,
    /// Write `index` found `actual` instead of its expected value.
    Conflict {
        index: usize,
        actual: u64,
    },
    /// Another transaction holds one of the words.
    Locked,
    /// The shard has a newer epoch: this client no longer owns it.
    StaleEpoch {
        current: u64,
    },
    Failed(UmoError),
}

/// Counters of the pool as this client sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub regions: u32,
    pub region_size: u64,
    pub alloc: AllocStats,
    /// Writes that found their region frozen (its copies being moved) and waited.
    pub frozen_waits: u64,
    /// Operations retried on new copies after a memory node failed under them.
    pub failover_retries: u64,
    /// Writes refused because this client's lease with the manager had lapsed.
    pub lease_refusals: u64,
}

/// The counters behind [`PoolStats`]' event counts.
#[derive(Default)]
struct PoolCounters {
    failover_retries: AtomicU64,
    lease_refusals: AtomicU64,
}

/// Where new regions come from when a pool grows. Without one the pool creates them
/// itself on the nodes with the most room; in a cluster the manager grants them, within
/// the instance's `maxmemory` and with its copies on distinct memory nodes.
pub trait RegionSource: Send + Sync {
    /// Allocates region `want` (the superblock's region, when formatting) or the next
    /// free region id, with its copies created; returns the id and where the copies are.
    /// A region that exists already fails with [`dmc_verbs::VerbsError::RegionExists`];
    /// a refusal (maxmemory, no room) with [`UmoError::OutOfMemory`].
    fn grant(
        &self,
        want: Option<RegionId>,
    ) -> BoxFuture<'_, Result<(RegionId, RegionRecord), UmoError>>;
}

pub struct Pool {
    config: PoolConfig,
    source: Option<Arc<dyn RegionSource>>,
    /// Live-block bytes this client allocated minus those it freed, not yet added to
    /// the superblock's pool-wide counter.
    usage_delta: std::sync::atomic::AtomicI64,
    /// The pool-wide counter as this client last read it.
    usage_seen: AtomicU64,
    /// The last attempt to grow was refused.
    at_limit: std::sync::atomic::AtomicBool,
    /// The memory nodes, timed for the load report; grows as the cluster's does.
    nodes: node_table::NodeTable,
    regions: RwLock<Vec<Option<RegionEntry>>>,
    /// Primary node index + 1 per region (0: unknown), read without a lock on every
    /// one-sided read; kept equal to `regions` by `set_entry`.
    primaries: Box<[std::sync::atomic::AtomicU32]>,
    alloc: Mutex<Allocator>,
    /// Per-thread blocks ready to hand out and blocks freed, in front of `alloc`.
    shards: Box<[block_cache::Shard]>,
    /// Object writes the inline path left on some copies only, with their bytes and
    /// tries so far (see `Pool::finish_object_writes`), and how many.
    unfinished: Mutex<Vec<(Block, Vec<u8>, usize)>>,
    unfinished_count: std::sync::atomic::AtomicUsize,
    /// The allocator's largest block, fixed by the segment size.
    max_block: u32,
    grow_lock: tokio::sync::Mutex<()>,
    next_txid: AtomicU64,
    /// Shards of this client's transactions whose commit failed mid-way: their
    /// participants may hold them prepared until settled (`settle.rs`).
    unsettled: Mutex<Vec<u32>>,
    created_ms: u64,
    /// Freezes and drains writes per region (migration, re-replication).
    gate: gate::WriteGate,
    /// Chunks written in regions that have copies being filled (see `placement`).
    dirty: placement::DirtyLog,
    /// Woken whenever `place_regions` changes a placement (see `failover`).
    placed: tokio::sync::Notify,
    /// How long an operation that hit a failed node waits for its failover (ms).
    failover_wait_ms: AtomicU64,
    /// Microseconds after `lease_base` from which this client writes nothing (see
    /// `failover.rs`); 0: no lease (a standalone pool).
    writable_until_us: AtomicU64,
    lease_base: Instant,
    counters: PoolCounters,
    region_tallies: Arc<load::RegionTallies>,
}

impl Pool {
    /// A pool of `replicas` in-process memory nodes of `capacity` bytes each: the
    /// standalone agent's embedded pool.
    pub async fn embedded(capacity: u64, config: PoolConfig) -> Result<Arc<Pool>, UmoError> {
        let mut nodes: Vec<Arc<dyn Transport>> = Vec::new();
        for id in 1..=config.replicas.max(1) as u32 {
            let core = NodeCore::open(NodeConfig {
                id,
                capacity,
                storage: Storage::Heap,
                secret: None,
            })
            .map_err(UmoError::node(id))?;
            nodes.push(Arc::new(LocalTransport::new(core)));
        }
        Pool::open(config, nodes).await
    }

    /// Opens the pool held by `nodes`: loads the superblock if region 1 exists on any of
    /// them, or formats a new pool.
    pub async fn open(
        config: PoolConfig,
        nodes: Vec<Arc<dyn Transport>>,
    ) -> Result<Arc<Pool>, UmoError> {
        Self::open_with(config, nodes, None).await
    }

    /// [`open`](Self::open), growing by regions `source` grants.
    pub async fn open_with(
        config: PoolConfig,
        nodes: Vec<Arc<dyn Transport>>,
        source: Option<Arc<dyn RegionSource>>,
    ) -> Result<Arc<Pool>, UmoError> {
        if config.replicas == 0 || config.replicas > 1 + layout::MAX_BACKUPS {
            return Err(UmoError::Config(format!(
                "replicas must be 1..={}, got {}",
                1 + layout::MAX_BACKUPS,
                config.replicas
            )));
        }
        if nodes.is_empty() {
            return Err(UmoError::Config(
                "a pool needs at least one memory node".into(),
            ));
        }
        if config.segment_size < (1 << 20)
            || config.region_size < layout::REGION_HEADER + config.segment_size
        {
            return Err(UmoError::Config(
                "segment_size must be at least 1mb and a region must hold a segment".into(),
            ));
        }
        // Every node's awaited verbs are timed for the manager's load balancer.
        let region_tallies = load::RegionTallies::new();
        let nodes = node_table::NodeTable::new(nodes, region_tallies.clone())?;
        let allocator = Allocator::new(config.client_id, config.segment_size, config.grace);
        let mut pool = Pool {
            max_block: allocator.max_block(),
            alloc: Mutex::new(allocator),
            shards: (0..block_cache::SHARDS)
                .map(|_| block_cache::Shard::default())
                .collect(),
            unfinished: Mutex::new(Vec::new()),
            unfinished_count: std::sync::atomic::AtomicUsize::new(0),
            config,
            source,
            usage_delta: std::sync::atomic::AtomicI64::new(0),
            usage_seen: AtomicU64::new(0),
            at_limit: std::sync::atomic::AtomicBool::new(false),
            nodes,
            regions: RwLock::new(vec![None; 1 << 16]),
            primaries: (0..1 << 16)
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
            grow_lock: tokio::sync::Mutex::new(()),
            next_txid: AtomicU64::new(1),
            unsettled: Mutex::new(Vec::new()),
            created_ms: 0,
            gate: gate::WriteGate::new(),
            dirty: placement::DirtyLog::default(),
            placed: tokio::sync::Notify::new(),
            failover_wait_ms: AtomicU64::new(0),
            writable_until_us: AtomicU64::new(0),
            lease_base: Instant::now(),
            counters: PoolCounters::default(),
            region_tallies,
        };
        // Several clients may open a new pool at once (agents of a cluster starting
        // together): one formats it, the others wait until they can load it.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let opened = match pool.super_holder().await? {
                Some(i) => pool.load(i).await,
                None => pool.format().await,
            };
            match opened {
                Ok(()) => return Ok(Arc::new(pool)),
                Err(UmoError::Formatting) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(UmoError::Node {
                    source: dmc_verbs::VerbsError::RegionExists(r),
                    ..
                }) if r == pool.config.super_region && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Wall-clock milliseconds when the pool was formatted (a time base for metadata).
    pub fn created_ms(&self) -> u64 {
        self.created_ms
    }

    /// The memory nodes this client reaches (a snapshot: the table grows).
    pub fn nodes(&self) -> Vec<Arc<dyn Transport>> {
        self.nodes.iter().cloned().collect()
    }

    /// Adds a memory node the cluster gained (a new map names it): placements may
    /// then name it. False if this client reaches it already.
    pub fn add_node(&self, node: Arc<dyn Transport>) -> Result<bool, UmoError> {
        self.nodes.add(node)
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            regions: self.regions.read().iter().filter(|r| r.is_some()).count() as u32,
            region_size: self.config.region_size,
            alloc: {
                self.flush_block_caches();
                self.alloc.lock().stats()
            },
            frozen_waits: self.gate.frozen_waits(),
            failover_retries: self
                .counters
                .failover_retries
                .load(std::sync::atomic::Ordering::Relaxed),
            lease_refusals: self
                .counters
                .lease_refusals
                .load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The largest single block; larger objects are chained.
    pub fn max_block(&self) -> u32 {
        self.max_block
    }
}
