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
//!   batched per memory node, backups before primaries, fenced by shard epoch.
//!
//! The superblock in region 1 records the region map, so a restarted client finds the
//! pool it left, and several clients (the agents of one instance) share one pool: a
//! client learns a region another one grew the pool by from its record the first time
//! an address in it turns up, and segments are claimed with a compare-and-swap on the
//! region's segment table, so no two clients carve the same segment.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use dmc_verbs::wire::{Request, Response, TxPrepare, TxVote, WordWrite};
use dmc_verbs::{LocalTransport, NodeConfig, NodeCore, NodeId, RegionId, Storage, Transport, Verb};
use futures::future::{BoxFuture, join_all};
use parking_lot::{Mutex, RwLock};

use crate::addr::GlobalAddr;
use crate::alloc::{AllocStats, Allocator, Block, Claimed, Need};
use crate::error::UmoError;
use crate::layout::{self, RegionRecord, SUPER_REGION, Superblock};
use crate::object::{self, ChunkRef, Head};

/// What one commit sends one node: its prepares and, for each, the transaction's index,
/// the transaction's write indexes on this node, and whether the node is a primary.
type NodePlan = (Vec<TxPrepare>, Vec<(usize, Vec<usize>, bool)>);

/// Checks a small inline object read whole: db, key and checksum; the value copied out.
fn verify_small(buf: &[u8], db: u8, key: &[u8]) -> ReadObject {
    match object::parse_head(buf) {
        Head::Inline {
            db: d,
            key: k,
            value,
        } if d == db && buf[k.clone()] == *key => {
            ReadObject::Value(Bytes::copy_from_slice(&buf[value]))
        }
        _ => ReadObject::Mismatch,
    }
}

/// Objects up to this size are read through a stack buffer (two sizes, so that small
/// objects do not pay for zeroing a large one).
const SMALL_OBJECT: usize = 512;
const TINY_OBJECT: usize = 128;

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
#[derive(Debug, Clone)]
struct RegionEntry {
    primary: usize,
    backups: Vec<usize>,
}

impl RegionEntry {
    fn copies(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.primary).chain(self.backups.iter().copied())
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
    /// The object holds the requested key; this is its value.
    Value(Bytes),
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

/// Live bytes this client changed since it last told the pool-wide counter; told at
/// once when it passes this.
const USAGE_FLUSH: i64 = 256 << 10;

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
    nodes: Vec<Arc<dyn Transport>>,
    node_index: HashMap<NodeId, usize>,
    regions: RwLock<Vec<Option<RegionEntry>>>,
    /// Primary node index + 1 per region (0: unknown), read without a lock on every
    /// one-sided read; kept equal to `regions` by `set_entry`.
    primaries: Box<[std::sync::atomic::AtomicU32]>,
    alloc: Mutex<Allocator>,
    grow_lock: tokio::sync::Mutex<()>,
    next_txid: AtomicU64,
    created_ms: u64,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
        let mut node_index = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if node_index.insert(n.node(), i).is_some() {
                return Err(UmoError::Config(format!(
                    "memory node id {} appears twice",
                    n.node()
                )));
            }
        }
        let mut pool = Pool {
            alloc: Mutex::new(Allocator::new(
                config.client_id,
                config.segment_size,
                config.grace,
            )),
            config,
            source,
            usage_delta: std::sync::atomic::AtomicI64::new(0),
            usage_seen: AtomicU64::new(0),
            at_limit: std::sync::atomic::AtomicBool::new(false),
            nodes,
            node_index,
            regions: RwLock::new(vec![None; 1 << 16]),
            primaries: (0..1 << 16)
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
            grow_lock: tokio::sync::Mutex::new(()),
            next_txid: AtomicU64::new(1),
            created_ms: 0,
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

    /// The node holding a copy of region 1 (the superblock), if any does.
    async fn super_holder(&self) -> Result<Option<usize>, UmoError> {
        for (i, n) in self.nodes.iter().enumerate() {
            let list = n.list_regions().await.map_err(UmoError::node(n.node()))?;
            if list.iter().any(|(r, _)| *r == self.config.super_region) {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    async fn load(&mut self, holder: usize) -> Result<(), UmoError> {
        let node = &self.nodes[holder];
        let mut sb = [0u8; layout::SB_LEN];
        node.read(self.config.super_region, 0, &mut sb)
            .await
            .map_err(|e| UmoError::Node {
                node: node.node(),
                source: e,
            })?;
        // All zeroes: another client created region 1 and is formatting it.
        if sb.iter().all(|b| *b == 0) {
            return Err(UmoError::Formatting);
        }
        let sb = Superblock::decode(&sb)?;
        if sb.replicas as usize != self.config.replicas
            || sb.region_size != self.config.region_size
            || sb.segment_size != self.config.segment_size
        {
            tracing::warn!(
                replicas = sb.replicas,
                region_size = sb.region_size,
                segment_size = sb.segment_size,
                "the pool was formatted with other settings; using the pool's"
            );
            self.config.replicas = sb.replicas as usize;
            self.config.region_size = sb.region_size;
            self.config.segment_size = sb.segment_size;
            *self.alloc.get_mut() =
                Allocator::new(self.config.client_id, sb.segment_size, self.config.grace);
        }
        self.created_ms = sb.created_ms;
        let mut used = [0u8; 8];
        node.read(self.config.super_region, layout::SB_USED, &mut used)
            .await
            .map_err(UmoError::node(node.node()))?;
        self.usage_seen = AtomicU64::new(u64::from_le_bytes(used));
        let table_len = (layout::MAX_REGIONS * layout::REGION_ENTRY) as usize;
        let mut table = vec![0u8; table_len];
        node.read(self.config.super_region, layout::REGION_TABLE, &mut table)
            .await
            .map_err(|e| UmoError::Node {
                node: node.node(),
                source: e,
            })?;
        let own = (RegionRecord::offset(self.config.super_region) - layout::REGION_TABLE) as usize;
        if table
            .get(own..own + layout::REGION_ENTRY as usize)
            .and_then(RegionRecord::decode)
            .is_none()
        {
            return Err(UmoError::Formatting);
        }
        let mut found = 0;
        for (i, rec) in table.chunks(layout::REGION_ENTRY as usize).enumerate() {
            let Some(rec) = RegionRecord::decode(rec) else {
                continue;
            };
            let region = (i + 1) as RegionId;
            let entry = self.entry_for(region, &rec)?;
            let primary = &self.nodes[entry.primary];
            let nseg =
                layout::segments_per_region(self.config.region_size, self.config.segment_size);
            let mut seg_table = vec![0u8; (nseg * 8) as usize];
            primary
                .read(region, layout::SEGMENT_TABLE, &mut seg_table)
                .await
                .map_err(UmoError::node(primary.node()))?;
            // Segments claimed before a restart stay claimed: their free blocks are found
            // by the hash table's recovery scan, not here.
            self.alloc
                .get_mut()
                .add_region(region, self.config.region_size, |i| {
                    seg_table[(i * 8) as usize] != 0
                });
            {
                let regions = self.regions.get_mut();
                regions[region as usize] = Some(entry.clone());
                self.primaries[region as usize].store(entry.primary as u32 + 1, Ordering::Release);
            }
            found += 1;
        }
        tracing::info!(
            regions = found,
            created_ms = self.created_ms,
            "opened existing pool"
        );
        Ok(())
    }

    /// Maps a region record to configured nodes. A copy on a node this client was not
    /// given is skipped; if that was the primary, the first configured backup serves
    /// reads (degraded: writes reach the remaining copies only).
    fn entry_for(&self, region: RegionId, rec: &RegionRecord) -> Result<RegionEntry, UmoError> {
        let mut copies = std::iter::once(rec.primary)
            .chain(rec.backups.iter().copied())
            .filter_map(|n| self.node_index.get(&n).copied());
        let primary = copies.next().ok_or_else(|| {
            UmoError::Config(format!(
                "no configured memory node holds region {region} (primary {}, backups {:?})",
                rec.primary, rec.backups
            ))
        })?;
        let backups: Vec<usize> = copies.collect();
        if self.nodes[primary].node() != rec.primary || backups.len() < rec.backups.len() {
            tracing::warn!(region, primary = rec.primary, backups = ?rec.backups, serving = self.nodes[primary].node(),
                "region is missing copies on unconfigured nodes: serving it degraded");
        }
        Ok(RegionEntry { primary, backups })
    }

    async fn format(&mut self) -> Result<(), UmoError> {
        if self.nodes.len() < self.config.replicas {
            return Err(UmoError::Config(format!(
                "{} replicas need as many memory nodes, {} configured",
                self.config.replicas,
                self.nodes.len()
            )));
        }
        self.created_ms = unix_ms();
        let sb = Superblock {
            replicas: self.config.replicas as u32,
            region_size: self.config.region_size,
            segment_size: self.config.segment_size,
            created_ms: self.created_ms,
            root: 0,
        };
        let rec = match &self.source {
            Some(source) => source.grant(Some(self.config.super_region)).await?.1,
            None => self.create_region_copies(self.config.super_region).await?,
        };
        let entry = self.entry_for(self.config.super_region, &rec)?;
        self.primaries[self.config.super_region as usize]
            .store(entry.primary as u32 + 1, Ordering::Release);
        self.regions.get_mut()[self.config.super_region as usize] = Some(entry);
        self.write_all(&[(
            GlobalAddr::new(self.config.super_region, 0),
            &sb.encode()[..],
        )])
        .await?;
        self.record_region(self.config.super_region, &rec).await?;
        self.alloc
            .get_mut()
            .add_region(self.config.super_region, self.config.region_size, |_| false);
        tracing::info!(
            replicas = self.config.replicas,
            region_size = self.config.region_size,
            "formatted a new pool"
        );
        Ok(())
    }

    /// Creates `region` on the `r` nodes with the most free bytes.
    async fn create_region_copies(&self, region: RegionId) -> Result<RegionRecord, UmoError> {
        let stats = join_all(self.nodes.iter().map(|n| n.call(Request::Stats))).await;
        let mut free: Vec<(u64, usize)> = stats
            .into_iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Ok(Response::Stats(s)) => Some((s.capacity.saturating_sub(s.used), i)),
                _ => None,
            })
            .filter(|(free, _)| *free >= self.config.region_size)
            .collect();
        free.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        if free.len() < self.config.replicas {
            return Err(UmoError::OutOfMemory(format!(
                "{} memory nodes have room for another {} byte region, {} needed",
                free.len(),
                self.config.region_size,
                self.config.replicas
            )));
        }
        let mut chosen: Vec<usize> = free
            .iter()
            .take(self.config.replicas)
            .map(|f| f.1)
            .collect();
        // Spread primaries: reads go to primaries, so the chosen node that is primary of
        // the fewest regions becomes this one's primary.
        let primaries = |n: usize| {
            self.regions
                .read()
                .iter()
                .flatten()
                .filter(|e| e.primary == n)
                .count()
        };
        if let Some(best) = (0..chosen.len()).min_by_key(|&k| (primaries(chosen[k]), k)) {
            chosen.swap(0, best);
        }
        for (k, &i) in chosen.iter().enumerate() {
            if let Err(e) = self.nodes[i]
                .create_region(region, self.config.region_size)
                .await
            {
                for &j in &chosen[..k] {
                    let _ = self.nodes[j].drop_region(region).await;
                }
                return Err(UmoError::node(self.nodes[i].node())(e));
            }
        }
        Ok(RegionRecord {
            primary: self.nodes[chosen[0]].node(),
            backups: chosen[1..].iter().map(|&i| self.nodes[i].node()).collect(),
        })
    }

    async fn record_region(&self, region: RegionId, rec: &RegionRecord) -> Result<(), UmoError> {
        let at = GlobalAddr::new(self.config.super_region, RegionRecord::offset(region));
        self.write_all(&[(at, &rec.encode()[..])]).await
    }

    /// Adds a region to the pool.
    async fn grow(&self) -> Result<(), UmoError> {
        let _guard = self.grow_lock.lock().await;
        if self.alloc.lock().stats().free_segments > 0 {
            return Ok(()); // another task grew the pool while we waited
        }
        if let Some(source) = &self.source {
            let (region, rec) = source.grant(None).await?;
            let entry = self.entry_for(region, &rec)?;
            self.record_region(region, &rec).await?;
            self.set_entry(&mut self.regions.write(), region, entry);
            self.alloc
                .lock()
                .add_region(region, self.config.region_size, |_| false);
            tracing::info!(region, primary = rec.primary, backups = ?rec.backups, "pool grew by a granted region");
            return Ok(());
        }
        let count = self.regions.read().iter().filter(|r| r.is_some()).count() as u32;
        if self.config.max_regions > 0 && count >= self.config.max_regions {
            return Err(UmoError::OutOfMemory(format!(
                "the pool reached its limit of {} regions",
                self.config.max_regions
            )));
        }
        let mut region = (self
            .regions
            .read()
            .iter()
            .rposition(|r| r.is_some())
            .unwrap_or(0)
            + 1) as u64;
        loop {
            if region > layout::MAX_REGIONS {
                return Err(UmoError::OutOfMemory("no free region id".into()));
            }
            match self.create_region_copies(region as RegionId).await {
                Ok(rec) => {
                    let entry = self.entry_for(region as RegionId, &rec)?;
                    self.record_region(region as RegionId, &rec).await?;
                    self.set_entry(&mut self.regions.write(), region as RegionId, entry);
                    self.alloc.lock().add_region(
                        region as RegionId,
                        self.config.region_size,
                        |_| false,
                    );
                    tracing::info!(region, primary = rec.primary, backups = ?rec.backups, "pool grew by a region");
                    return Ok(());
                }
                // Another client took this id: try the next one.
                Err(UmoError::Node {
                    source: dmc_verbs::VerbsError::RegionExists(_),
                    ..
                }) => region += 1,
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

    pub fn nodes(&self) -> &[Arc<dyn Transport>] {
        &self.nodes
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            regions: self.regions.read().iter().filter(|r| r.is_some()).count() as u32,
            region_size: self.config.region_size,
            alloc: self.alloc.lock().stats(),
        }
    }

    /// The largest single block; larger objects are chained.
    pub fn max_block(&self) -> u32 {
        self.alloc.lock().max_block()
    }

    fn entry(&self, region: RegionId) -> Result<RegionEntry, UmoError> {
        self.regions.read()[region as usize]
            .clone()
            .ok_or(UmoError::UnknownRegion(region))
    }

    fn primary(&self, region: RegionId) -> Result<usize, UmoError> {
        match self.primaries[region as usize].load(Ordering::Acquire) {
            0 => Err(UmoError::UnknownRegion(region)),
            n => Ok(n as usize - 1),
        }
    }

    /// The primary of `region`, learning the region from its superblock record if this
    /// client has not seen it (another client grew the pool by it).
    async fn discover(&self, region: RegionId) -> Result<usize, UmoError> {
        if let Ok(n) = self.primary(region) {
            return Ok(n);
        }
        if region == self.config.super_region || region as u64 > layout::MAX_REGIONS {
            return Err(UmoError::UnknownRegion(region));
        }
        let sb = &self.nodes[self.primary(self.config.super_region)?];
        let mut rec = [0u8; layout::REGION_ENTRY as usize];
        sb.read(
            self.config.super_region,
            RegionRecord::offset(region),
            &mut rec,
        )
        .await
        .map_err(UmoError::node(sb.node()))?;
        let rec = RegionRecord::decode(&rec).ok_or(UmoError::UnknownRegion(region))?;
        let entry = self.entry_for(region, &rec)?;
        let primary = entry.primary;
        self.set_entry(&mut self.regions.write(), region, entry);
        tracing::debug!(
            region,
            primary = rec.primary,
            "learned a region another client created"
        );
        Ok(primary)
    }

    /// The regions of `regions` this client has not seen yet: a lock-free load per
    /// region, and no allocation when every region is known.
    fn unknown(&self, regions: impl Iterator<Item = RegionId>) -> Vec<RegionId> {
        regions.filter(|r| self.primary(*r).is_err()).collect()
    }

    /// Learns every region of `unknown` (see [`unknown`](Self::unknown)).
    async fn discover_all(&self, unknown: Vec<RegionId>) -> Result<(), UmoError> {
        for region in unknown {
            self.discover(region).await?;
        }
        Ok(())
    }

    /// Records where a region's copies are.
    fn set_entry(&self, regions: &mut [Option<RegionEntry>], region: RegionId, entry: RegionEntry) {
        self.primaries[region as usize].store(entry.primary as u32 + 1, Ordering::Release);
        regions[region as usize] = Some(entry);
    }

    // ------------------------------------------------------------ allocation

    /// Allocates a block of at least `len` bytes, growing the pool if needed.
    pub async fn alloc(&self, len: u64, aligned: bool) -> Result<Block, UmoError> {
        if len > self.max_block() as u64 {
            return Err(UmoError::TooLarge(len));
        }
        let mut reclaiming_since: Option<Instant> = None;
        loop {
            let got = self.alloc.lock().alloc(len, aligned, Instant::now());
            match got {
                Ok((block, claim)) => {
                    if let Some(c) = claim {
                        let won = self.claim_segment(c).await;
                        let mut alloc = self.alloc.lock();
                        match won {
                            Ok(true) => alloc.confirm_claim(block),
                            // Another client claimed it first: forget it, take another.
                            Ok(false) => {
                                alloc.lost_claim(block);
                                continue;
                            }
                            Err(e) => {
                                alloc.lost_claim(block);
                                return Err(e);
                            }
                        }
                    }
                    let d = self
                        .usage_delta
                        .fetch_add(block.size() as i64, Ordering::Relaxed);
                    if d.abs() >= USAGE_FLUSH {
                        self.sync_usage().await;
                    }
                    return Ok(block);
                }
                // Another task of this client is claiming the class's next segment.
                Err(Need::Claiming) => tokio::time::sleep(Duration::from_micros(20)).await,
                // Its blocks in limbo come back within the grace period (unless they
                // land in a segment being emptied): the caller evicts and retries.
                Err(Need::Reclaiming) => {
                    let since = *reclaiming_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > self.config.grace {
                        return Err(UmoError::OutOfMemory(
                            "no free block of the class after a grace period".into(),
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(Need::Region) => {
                    let grown = self.grow().await;
                    let at_limit = matches!(grown, Err(UmoError::OutOfMemory(_)));
                    self.at_limit.store(at_limit, Ordering::Relaxed);
                    self.alloc.lock().set_scarce(at_limit);
                    grown?
                }
            }
        }
    }

    /// Records a segment claim in its region's segment table, if no other client (an
    /// agent sharing the pool) claimed the segment first.
    async fn claim_segment(&self, c: Claimed) -> Result<bool, UmoError> {
        let tx = Tx {
            shard: POOL_SHARD,
            epoch: 0,
            writes: vec![TxWrite {
                addr: GlobalAddr::new(c.region, c.entry_offset),
                expect: Some(0),
                new: c.entry,
            }],
        };
        loop {
            match self.commit(std::slice::from_ref(&tx)).await.remove(0) {
                TxOutcome::Committed => return Ok(true),
                TxOutcome::Conflict { .. } => return Ok(false),
                TxOutcome::Locked => tokio::time::sleep(Duration::from_micros(50)).await,
                TxOutcome::StaleEpoch { current } => {
                    return Err(UmoError::Config(format!(
                        "segment claims are fenced at pool epoch {current}"
                    )));
                }
                TxOutcome::Failed(e) => return Err(e),
            }
        }
    }

    /// Stops allocating in `region`: it is being returned to the memory nodes.
    pub fn retire_region(&self, region: RegionId) {
        self.alloc.lock().retire_region(region);
    }

    /// Forgets a region the cluster manager returned to the memory nodes.
    pub fn forget_region(&self, region: RegionId) {
        self.alloc.lock().retire_region(region);
        self.regions.write()[region as usize] = None;
        self.primaries[region as usize].store(0, Ordering::Release);
    }

    /// Bytes of this client's blocks per region (see `Allocator::used_by_region`).
    pub fn used_by_region(&self) -> Vec<(RegionId, u64)> {
        self.alloc.lock().used_by_region()
    }

    /// Segments this client can fill without a new region.
    pub fn spare_segments(&self) -> usize {
        self.alloc.lock().spare_segments()
    }

    /// Starts emptying the segment of this client with the fewest live blocks (its
    /// free blocks are held back from its class) and returns it (start, length):
    /// evicting the keys there frees a whole segment, for any class, when the pool
    /// cannot grow.
    pub fn drain_sparsest_segment(&self) -> Option<(GlobalAddr, u64)> {
        self.alloc.lock().drain_sparsest_segment(Instant::now())
    }

    /// Whether the last attempt to grow the pool was refused (maxmemory or full nodes).
    pub fn at_limit(&self) -> bool {
        self.at_limit.load(Ordering::Relaxed)
    }

    /// Frees a block after the grace period.
    pub fn free(&self, block: Block) {
        self.usage_delta
            .fetch_sub(block.size() as i64, Ordering::Relaxed);
        self.alloc.lock().free(block, Instant::now());
    }

    /// Adds this client's pending live-byte changes to the pool-wide counter and reads
    /// it back (the maintenance tick calls this; so does a large change).
    pub async fn sync_usage(&self) {
        let d = self.usage_delta.swap(0, Ordering::Relaxed);
        match self
            .faa(
                GlobalAddr::new(self.config.super_region, layout::SB_USED),
                d as u64,
            )
            .await
        {
            Ok(old) => self
                .usage_seen
                .store(old.wrapping_add(d as u64), Ordering::Relaxed),
            Err(e) => {
                self.usage_delta.fetch_add(d, Ordering::Relaxed);
                tracing::warn!(error = %e, "updating the pool's usage counter failed");
            }
        }
    }

    /// Bytes in live blocks of the whole pool (every client's), as of this client's
    /// last [`sync_usage`](Self::sync_usage) plus its own changes since.
    pub fn used_bytes(&self) -> u64 {
        let seen = self.usage_seen.load(Ordering::Relaxed) as i64;
        (seen + self.usage_delta.load(Ordering::Relaxed)).max(0) as u64
    }

    // ------------------------------------------------------------ verbs

    /// Reads from the primary copy right now, if its backend completes verbs inline;
    /// `None` means use [`read`](Self::read).
    pub fn read_now(&self, addr: GlobalAddr, buf: &mut [u8]) -> Option<Result<(), UmoError>> {
        // An unknown region is learned on the awaited path.
        let node = &self.nodes[self.primary(addr.region()).ok()?];
        let mut verbs = [Verb::Read {
            region: addr.region(),
            offset: addr.offset(),
            buf,
        }];
        Some(node.post_now(&mut verbs)?.map_err(|e| UmoError::Node {
            node: node.node(),
            source: e,
        }))
    }

    /// Reads a small inline object right now (see [`read_now`](Self::read_now)) and
    /// verifies db, key and checksum. `None`: not possible inline (a chained or large
    /// object, or a backend that must be awaited).
    pub fn read_object_now(
        &self,
        obj: ObjectRef,
        db: u8,
        key: &[u8],
    ) -> Option<Result<ReadObject, UmoError>> {
        let size = obj.block.size() as usize;
        if obj.chained || size > SMALL_OBJECT {
            return None;
        }
        let mut buf = [0u8; SMALL_OBJECT];
        let buf = &mut buf[..size];
        if let Err(e) = self.read_now(obj.block.addr, buf)? {
            return Some(Err(e));
        }
        Some(Ok(verify_small(buf, db, key)))
    }

    /// Fetch-and-add on the primary right now, if the backend completes verbs inline.
    pub fn faa_now(&self, addr: GlobalAddr, add: u64) -> Option<Result<u64, UmoError>> {
        let node = &self.nodes[self.primary(addr.region()).ok()?];
        let mut verbs = [Verb::Faa {
            region: addr.region(),
            offset: addr.offset(),
            add,
            old: 0,
        }];
        if let Err(e) = node.post_now(&mut verbs)? {
            return Some(Err(UmoError::Node {
                node: node.node(),
                source: e,
            }));
        }
        match verbs {
            [Verb::Faa { old, .. }] => Some(Ok(old)),
            _ => unreachable!("the batch holds the FAA it was built with"),
        }
    }

    /// Reads from the primary copy.
    pub async fn read(&self, addr: GlobalAddr, buf: &mut [u8]) -> Result<(), UmoError> {
        let node = &self.nodes[self.discover(addr.region()).await?];
        let mut verbs = [Verb::Read {
            region: addr.region(),
            offset: addr.offset(),
            buf,
        }];
        if let Some(r) = node.post_now(&mut verbs) {
            return r.map_err(|e| UmoError::Node {
                node: node.node(),
                source: e,
            });
        }
        node.post(&mut verbs).await.map_err(|e| UmoError::Node {
            node: node.node(),
            source: e,
        })
    }

    /// Reads several ranges from their primaries: one posted batch per node.
    pub async fn read_batch(&self, reads: &mut [(GlobalAddr, &mut [u8])]) -> Result<(), UmoError> {
        self.discover_all(self.unknown(reads.iter().map(|(a, _)| a.region())))
            .await?;
        // Common case: every range on one node (a key's two buckets share a subtable).
        if let [(first, _), rest @ ..] = &*reads {
            let n = self.primary(first.region())?;
            let same = rest.iter().all(|(a, _)| {
                a.region() == first.region() || self.primary(a.region()).ok() == Some(n)
            });
            if same {
                let node = &self.nodes[n];
                let mut verbs: Vec<Verb<'_>> = reads
                    .iter_mut()
                    .map(|(addr, buf)| Verb::Read {
                        region: addr.region(),
                        offset: addr.offset(),
                        buf,
                    })
                    .collect();
                if let Some(r) = node.post_now(&mut verbs) {
                    return r.map_err(|e| UmoError::Node {
                        node: node.node(),
                        source: e,
                    });
                }
                return node.post(&mut verbs).await.map_err(|e| UmoError::Node {
                    node: node.node(),
                    source: e,
                });
            }
        }
        let mut by_node: BTreeMap<usize, Vec<Verb<'_>>> = BTreeMap::new();
        for (addr, buf) in reads.iter_mut() {
            let n = self.primary(addr.region())?;
            by_node.entry(n).or_default().push(Verb::Read {
                region: addr.region(),
                offset: addr.offset(),
                buf,
            });
        }
        self.post_per_node(by_node).await
    }

    /// Reads from copy `copy` of the region (0 = primary, 1.. = backups).
    pub async fn read_copy(
        &self,
        addr: GlobalAddr,
        copy: usize,
        buf: &mut [u8],
    ) -> Result<(), UmoError> {
        self.discover(addr.region()).await?;
        let entry = self.entry(addr.region())?;
        let n = entry.copies().nth(copy).ok_or_else(|| {
            UmoError::Config(format!("region {} has no copy {copy}", addr.region()))
        })?;
        let node = &self.nodes[n];
        node.read(addr.region(), addr.offset(), buf)
            .await
            .map_err(|e| UmoError::Node {
                node: node.node(),
                source: e,
            })
    }

    /// Writes every range to every copy of its region: one posted batch per node.
    pub async fn write_all(&self, writes: &[(GlobalAddr, &[u8])]) -> Result<(), UmoError> {
        self.discover_all(self.unknown(writes.iter().map(|(a, _)| a.region())))
            .await?;
        let mut by_node: BTreeMap<usize, Vec<Verb<'_>>> = BTreeMap::new();
        {
            let regions = self.regions.read();
            for (addr, data) in writes {
                let entry = regions[addr.region() as usize]
                    .as_ref()
                    .ok_or(UmoError::UnknownRegion(addr.region()))?;
                for n in entry.copies() {
                    by_node.entry(n).or_default().push(Verb::Write {
                        region: addr.region(),
                        offset: addr.offset(),
                        data,
                    });
                }
            }
        }
        self.post_per_node(by_node).await
    }

    async fn post_per_node(&self, by_node: BTreeMap<usize, Vec<Verb<'_>>>) -> Result<(), UmoError> {
        // Backends with the memory at hand complete inline; the rest run concurrently.
        let mut waiting = Vec::new();
        for (n, mut verbs) in by_node {
            let node = &self.nodes[n];
            match node.post_now(&mut verbs) {
                Some(r) => r.map_err(|e| UmoError::Node {
                    node: node.node(),
                    source: e,
                })?,
                None => waiting.push((n, verbs)),
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        let results = join_all(waiting.iter_mut().map(|(n, verbs)| {
            let node = &self.nodes[*n];
            async move {
                node.post(verbs).await.map_err(|e| UmoError::Node {
                    node: node.node(),
                    source: e,
                })
            }
        }))
        .await;
        results.into_iter().collect()
    }

    /// Fetch-and-add on the primary copy (metadata counters; backups do not follow).
    pub async fn faa(&self, addr: GlobalAddr, add: u64) -> Result<u64, UmoError> {
        let node = &self.nodes[self.discover(addr.region()).await?];
        let mut verbs = [Verb::Faa {
            region: addr.region(),
            offset: addr.offset(),
            add,
            old: 0,
        }];
        match node.post_now(&mut verbs) {
            Some(r) => r.map_err(|e| UmoError::Node {
                node: node.node(),
                source: e,
            })?,
            None => node.post(&mut verbs).await.map_err(|e| UmoError::Node {
                node: node.node(),
                source: e,
            })?,
        }
        match verbs {
            [Verb::Faa { old, .. }] => Ok(old),
            _ => unreachable!("the batch holds the FAA it was built with"),
        }
    }

    // ------------------------------------------------------------ objects

    /// Writes `key` → `value` out of place to every copy and returns where it is. The
    /// object is invisible until a committed index update points at it.
    pub async fn write_object(
        &self,
        db: u8,
        key: &[u8],
        value: &[u8],
    ) -> Result<ObjectRef, UmoError> {
        let total = key.len() as u64 + value.len() as u64;
        if total > object::MAX_OBJECT + u16::MAX as u64 {
            return Err(UmoError::TooLarge(total));
        }
        let max = self.max_block() as usize;
        if let Some(len) = object::inline_len(key, value.len())
            && len <= max
        {
            let block = self.alloc(len as u64, false).await?;
            let mut buf = Vec::new();
            object::encode_inline(db, key, value, &mut buf);
            if let Err(e) = self.write_all(&[(block.addr, &buf)]).await {
                self.free(block);
                return Err(e);
            }
            return Ok(ObjectRef {
                block,
                chained: false,
            });
        }
        self.write_chained(db, key, value, max).await
    }

    async fn write_chained(
        &self,
        db: u8,
        key: &[u8],
        value: &[u8],
        chunk: usize,
    ) -> Result<ObjectRef, UmoError> {
        let total = key.len() + value.len();
        let n = total.div_ceil(chunk);
        let mut blocks: Vec<Block> = Vec::with_capacity(n + 1);
        let result = async {
            let mut buf = Vec::with_capacity(chunk);
            for i in 0..n {
                let (start, end) = (i * chunk, ((i + 1) * chunk).min(total));
                buf.clear();
                if start < key.len() {
                    buf.extend_from_slice(&key[start..end.min(key.len())]);
                }
                if end > key.len() {
                    buf.extend_from_slice(
                        &value[start.max(key.len()) - key.len()..end - key.len()],
                    );
                }
                let b = self.alloc(buf.len() as u64, false).await?;
                blocks.push(b);
                self.write_all(&[(b.addr, &buf)]).await?;
            }
            let refs: Vec<ChunkRef> = blocks
                .iter()
                .map(|b| ChunkRef {
                    addr: b.addr,
                    class: b.class,
                })
                .collect();
            let head = object::encode_chained_head(db, key, value, &refs);
            let hb = self.alloc(head.len() as u64, false).await?;
            blocks.push(hb);
            self.write_all(&[(hb.addr, &head)]).await?;
            Ok(ObjectRef {
                block: hb,
                chained: true,
            })
        }
        .await;
        if result.is_err() {
            for b in blocks {
                self.free(b);
            }
        }
        result
    }

    /// Reads the object at `obj` from the primary and returns its value if it holds
    /// `db`/`key` and its checksum is right.
    pub async fn read_object(
        &self,
        obj: ObjectRef,
        db: u8,
        key: &[u8],
    ) -> Result<ReadObject, UmoError> {
        let size = obj.block.size() as usize;
        if !obj.chained && size <= SMALL_OBJECT {
            // Small objects: read into the stack and copy out just the value.
            if size <= TINY_OBJECT {
                let mut buf = [0u8; TINY_OBJECT];
                return self.read_small(obj, db, key, &mut buf[..size]).await;
            }
            let mut buf = [0u8; SMALL_OBJECT];
            return self.read_small(obj, db, key, &mut buf[..size]).await;
        }
        let mut head = vec![0u8; size];
        self.read(obj.block.addr, &mut head).await?;
        self.finish_read(head, db, key).await
    }

    async fn read_small(
        &self,
        obj: ObjectRef,
        db: u8,
        key: &[u8],
        buf: &mut [u8],
    ) -> Result<ReadObject, UmoError> {
        self.read(obj.block.addr, buf).await?;
        Ok(verify_small(buf, db, key))
    }

    /// Reads whatever object is at `obj`, verifying only its checksum: the key, db and
    /// value, or `None` if the block holds no valid object (eviction uses this to learn
    /// which key it removes).
    pub async fn read_any(&self, obj: ObjectRef) -> Result<Option<(u8, Bytes, Bytes)>, UmoError> {
        let mut head = vec![0u8; obj.block.size() as usize];
        self.read(obj.block.addr, &mut head).await?;
        Ok(self.verify(head, None).await?.map(|(db, payload, klen)| {
            let key = payload.slice(..klen);
            (db, key, payload.slice(klen..))
        }))
    }

    /// Completes a verified read given the head block's bytes.
    pub async fn finish_read(
        &self,
        head: Vec<u8>,
        db: u8,
        key: &[u8],
    ) -> Result<ReadObject, UmoError> {
        Ok(match self.verify(head, Some((db, key))).await? {
            Some((_, payload, klen)) => ReadObject::Value(payload.slice(klen..)),
            None => ReadObject::Mismatch,
        })
    }

    /// Checks a head block (and a chained object's chunks) and, if `expect` is given,
    /// the db and key. Returns the db, the bytes holding key ‖ value, and the key length.
    async fn verify(
        &self,
        head: Vec<u8>,
        expect: Option<(u8, &[u8])>,
    ) -> Result<Option<(u8, Bytes, usize)>, UmoError> {
        match object::parse_head(&head) {
            Head::Inline { db, key: k, value } => {
                if expect.is_some_and(|(d, key)| d != db || head[k.clone()] != *key) {
                    return Ok(None);
                }
                Ok(Some((
                    db,
                    Bytes::from(head).slice(k.start..value.end),
                    k.len(),
                )))
            }
            Head::Chained {
                db,
                klen,
                vlen,
                chunks,
                crc,
                head_len,
            } => {
                if expect.is_some_and(|(d, key)| d != db || klen != key.len()) {
                    return Ok(None);
                }
                let mut payload = vec![0u8; klen + vlen];
                let mut reads = Vec::with_capacity(chunks.len());
                let mut rest = &mut payload[..];
                for c in &chunks {
                    let take = if (c.class as usize) < crate::classes::NUM_CLASSES {
                        (crate::classes::size(c.class) as usize).min(rest.len())
                    } else {
                        0
                    };
                    if take == 0 {
                        return Ok(None);
                    }
                    let (now, later) = rest.split_at_mut(take);
                    reads.push((c.addr, now));
                    rest = later;
                }
                if !rest.is_empty() {
                    return Ok(None);
                }
                if self.read_batch(&mut reads).await.is_err() {
                    // Freed-and-reused chunk refs may point anywhere: a failed read is
                    // a stale index entry, not a pool failure.
                    return Ok(None);
                }
                if !object::chained_crc_ok(&head, head_len, crc, &payload, klen)
                    || expect.is_some_and(|(_, key)| payload[..klen] != *key)
                {
                    return Ok(None);
                }
                Ok(Some((db, Bytes::from(payload), klen)))
            }
            Head::Invalid => Ok(None),
        }
    }

    /// Frees an object (and its chunks) after the grace period.
    pub async fn free_object(&self, obj: ObjectRef) {
        if obj.chained {
            let mut head = vec![0u8; obj.block.size() as usize];
            if self.read(obj.block.addr, &mut head).await.is_ok()
                && let Head::Chained { chunks, .. } = object::parse_head(&head)
            {
                for c in chunks {
                    self.free(Block {
                        addr: c.addr,
                        class: c.class,
                    });
                }
            }
        }
        self.free(obj.block);
    }

    // ------------------------------------------------------------ transactions

    /// The hash table's root pointer from the superblock.
    pub async fn root(&self) -> Result<u64, UmoError> {
        let mut w = [0u8; 8];
        self.read(
            GlobalAddr::new(self.config.super_region, layout::SB_ROOT),
            &mut w,
        )
        .await?;
        Ok(u64::from_le_bytes(w))
    }

    /// Sets the root pointer if it still holds `expect`.
    pub async fn set_root(&self, expect: u64, new: u64) -> Result<TxOutcome, UmoError> {
        let tx = Tx {
            shard: POOL_SHARD,
            epoch: 0,
            writes: vec![TxWrite {
                addr: GlobalAddr::new(self.config.super_region, layout::SB_ROOT),
                expect: Some(expect),
                new,
            }],
        };
        Ok(self.commit(std::slice::from_ref(&tx)).await.remove(0))
    }

    /// The fencing domain memory nodes keep `shard`'s epoch under: shards of pools
    /// with other superblock regions (other instances) are other domains. The pool's
    /// own transactions ([`POOL_SHARD`], epoch 0) are never fenced.
    fn fencing_domain(&self, shard: u32) -> u32 {
        if shard == POOL_SHARD {
            return shard;
        }
        (u32::from(self.config.super_region) << 16) | (shard & 0xffff)
    }

    /// Raises `shard`'s epoch to `epoch` on every memory node, so a client still
    /// writing under an older epoch (a previous owner) is refused from now on.
    pub async fn fence(&self, shard: u32, epoch: u64) -> Result<(), UmoError> {
        let shard = self.fencing_domain(shard);
        let calls = join_all(
            self.nodes
                .iter()
                .map(|n| n.call(Request::Fence { shard, epoch })),
        )
        .await;
        for (n, r) in self.nodes.iter().zip(calls) {
            match r {
                Ok(Response::Ok) => {}
                Ok(other) => {
                    return Err(UmoError::node(n.node())(dmc_verbs::transport::unexpected(
                        &other,
                    )));
                }
                Err(e) => return Err(UmoError::node(n.node())(e)),
            }
        }
        Ok(())
    }

    /// Commits transactions with OCC + 2PC: prepare (lock and validate under the shard
    /// epoch) on every copy, then commit on backups, then on primaries, so a reader of a
    /// primary never sees a word that a backup lacks. One RPC per node per phase.
    pub async fn commit(&self, txs: &[Tx]) -> Vec<TxOutcome> {
        let base = self
            .next_txid
            .fetch_add(txs.len() as u64, Ordering::Relaxed);
        let mut outcomes: Vec<Option<TxOutcome>> = vec![None; txs.len()];
        // A region this client has not seen fails only its own transaction (below).
        let unknown = self.unknown(
            txs.iter()
                .flat_map(|t| t.writes.iter().map(|w| w.addr.region())),
        );
        let _ = self.discover_all(unknown).await;
        // node -> prepares, and for each: (tx index, write indexes, node is a primary)
        let mut plan: BTreeMap<usize, NodePlan> = BTreeMap::new();
        {
            let regions = self.regions.read();
            'tx: for (t, tx) in txs.iter().enumerate() {
                let mut per_node: BTreeMap<usize, (Vec<WordWrite>, Vec<usize>, bool)> =
                    BTreeMap::new();
                for (w, write) in tx.writes.iter().enumerate() {
                    let Some(entry) = regions[write.addr.region() as usize].as_ref() else {
                        outcomes[t] = Some(TxOutcome::Failed(UmoError::UnknownRegion(
                            write.addr.region(),
                        )));
                        continue 'tx;
                    };
                    for n in entry.copies() {
                        let slot = per_node.entry(n).or_default();
                        slot.0.push(WordWrite {
                            region: write.addr.region(),
                            offset: write.addr.offset(),
                            expect: write.expect,
                            new: write.new,
                        });
                        slot.1.push(w);
                        slot.2 |= n == entry.primary;
                    }
                }
                for (n, (writes, idx, is_primary)) in per_node {
                    let p = plan.entry(n).or_default();
                    p.0.push(TxPrepare {
                        txid: base + t as u64,
                        shard: self.fencing_domain(tx.shard),
                        epoch: tx.epoch,
                        writes,
                    });
                    p.1.push((t, idx, is_primary));
                }
            }
        }

        // Every word on one node: prepare and commit in one round.
        if plan.len() == 1
            && let Some((n, (prepares, meta))) = plan.pop_first()
        {
            let node = &self.nodes[n];
            let result = node.call(Request::PrepareCommit(prepares)).await;
            let list = match result {
                Ok(Response::Votes(v)) if v.len() == meta.len() => Ok(v),
                Ok(other) => Err(dmc_verbs::transport::unexpected(&other)),
                Err(e) => Err(e),
            };
            for (k, (t, idx, _)) in meta.iter().enumerate() {
                let outcome = match &list {
                    Ok(v) => Self::vote_outcome(v[k].clone(), idx, node.node()),
                    // The reply is lost: the transaction may or may not have applied.
                    Err(e) => Some(TxOutcome::Failed(UmoError::Node {
                        node: node.node(),
                        source: e.clone(),
                    })),
                };
                outcomes[*t].get_or_insert(outcome.unwrap_or(TxOutcome::Committed));
            }
            return outcomes
                .into_iter()
                .map(|o| o.unwrap_or(TxOutcome::Committed))
                .collect();
        }

        // Phase 1: prepare everywhere.
        let votes = join_all(plan.iter_mut().map(|(n, (prepares, _))| {
            let node = &self.nodes[*n];
            let prepares = std::mem::take(prepares);
            async move { node.call(Request::Prepare(prepares)).await }
        }))
        .await;
        for ((n, (_, meta)), result) in plan.iter().zip(votes) {
            let node_id = self.nodes[*n].node();
            let list = match result {
                Ok(Response::Votes(v)) if v.len() == meta.len() => Ok(v),
                Ok(other) => Err(dmc_verbs::transport::unexpected(&other)),
                Err(e) => Err(e),
            };
            for (k, (t, idx, _)) in meta.iter().enumerate() {
                let vote = match &list {
                    Ok(v) => v[k].clone(),
                    Err(e) => TxVote::Failed(e.clone()),
                };
                match vote {
                    TxVote::Yes => {}
                    TxVote::Conflict { index, actual } => {
                        let w = idx.get(index as usize).copied().unwrap_or(0);
                        outcomes[*t].get_or_insert(TxOutcome::Conflict { index: w, actual });
                    }
                    TxVote::Locked { .. } => {
                        outcomes[*t].get_or_insert(TxOutcome::Locked);
                    }
                    TxVote::StaleEpoch { current } => {
                        // A stale epoch outranks any other reason: the caller must stop.
                        outcomes[*t] = Some(TxOutcome::StaleEpoch { current });
                    }
                    TxVote::Failed(e) => {
                        outcomes[*t].get_or_insert(TxOutcome::Failed(UmoError::Node {
                            node: node_id,
                            source: e,
                        }));
                    }
                }
            }
        }

        // Abort what some participant refused; commit the rest, primaries last.
        let mut aborts: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        let mut first: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        let mut last: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for (n, (_, meta)) in &plan {
            for (t, _, is_primary) in meta {
                let txid = base + *t as u64;
                if outcomes[*t].is_some() {
                    // Every participant, not only those that voted yes: a prepare whose
                    // answer was lost may still hold locks there (abort is idempotent).
                    aborts.entry(*n).or_default().push(txid);
                } else if *is_primary {
                    last.entry(*n).or_default().push(txid);
                } else {
                    first.entry(*n).or_default().push(txid);
                }
            }
        }
        let abort_calls = join_all(
            aborts
                .into_iter()
                .map(|(n, ids)| self.nodes[n].call(Request::Abort(ids))),
        );
        let failed_first = self.commit_phase(first).await;
        let failed_last = self.commit_phase(last).await;
        abort_calls.await;
        for (t, o) in outcomes.iter_mut().enumerate() {
            let txid = base + t as u64;
            if o.is_none() {
                *o = Some(match failed_first.get(&txid).or(failed_last.get(&txid)) {
                    Some(e) => TxOutcome::Failed(e.clone()),
                    None => TxOutcome::Committed,
                });
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or(TxOutcome::Committed))
            .collect()
    }

    /// What a one-round vote means for its transaction (`None`: committed).
    fn vote_outcome(vote: TxVote, idx: &[usize], node: dmc_verbs::NodeId) -> Option<TxOutcome> {
        match vote {
            TxVote::Yes => None,
            TxVote::Conflict { index, actual } => Some(TxOutcome::Conflict {
                index: idx.get(index as usize).copied().unwrap_or(0),
                actual,
            }),
            TxVote::Locked { .. } => Some(TxOutcome::Locked),
            TxVote::StaleEpoch { current } => Some(TxOutcome::StaleEpoch { current }),
            TxVote::Failed(e) => Some(TxOutcome::Failed(UmoError::Node { node, source: e })),
        }
    }

    async fn commit_phase(&self, calls: BTreeMap<usize, Vec<u64>>) -> HashMap<u64, UmoError> {
        let results = join_all(
            calls
                .iter()
                .map(|(n, ids)| self.nodes[*n].call(Request::Commit(ids.clone()))),
        )
        .await;
        let mut failed = HashMap::new();
        for ((n, ids), r) in calls.iter().zip(results) {
            let node = self.nodes[*n].node();
            match r {
                Ok(Response::Votes(votes)) if votes.len() == ids.len() => {
                    for (id, v) in ids.iter().zip(votes) {
                        if let TxVote::Failed(e) = v {
                            failed.insert(*id, UmoError::Node { node, source: e });
                        }
                    }
                }
                other => {
                    let e = match other {
                        Err(e) => e,
                        Ok(resp) => dmc_verbs::transport::unexpected(&resp),
                    };
                    for id in ids {
                        failed.insert(
                            *id,
                            UmoError::Node {
                                node,
                                source: e.clone(),
                            },
                        );
                    }
                }
            }
        }
        failed
    }
}
