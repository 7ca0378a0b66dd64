//! The memory-node core: the regions a node holds and the commit RPCs it serves.
//!
//! A [`NodeCore`] is transport-free: the `memory-node` binary wraps it in the RPC server
//! ([`crate::server`]), and the `local` backend calls it in-process. It owns
//!
//! * the regions, as heap memory or as files under a directory that `shm` clients map;
//! * the commit protocol: `Prepare` locks and validates a transaction's words under its
//!   shard epoch, `Commit` applies and unlocks, `Abort` unlocks. A word marked
//!   `in_word_lock` also carries the lock in place (its lowest bit, [`WORD_LOCK`], set
//!   by a compare-and-swap at prepare), so writers that bypass this table with
//!   one-sided verbs (single-key writes) see it and wait. A shard's epoch only
//!   rises (on `Fence` or on a prepare carrying a newer epoch), and a prepare with an
//!   older epoch is refused, so a coordinator that lost its shard cannot start a change.
//!   A transaction it prepared before the fence holds its locks (the successor's writes
//!   to those words wait) and may still commit: dropping it would leave copies on which
//!   the coordinator had committed already differing from copies where it was dropped.
//!   A coordinator that names itself (an agent's client id in `Hello`) may have
//!   committed a transaction on other nodes before it died: its prepared transactions
//!   stay (locked) when its session ends or its epoch is fenced, until the shard's
//!   owner settles them (`settle.rs`: commit what any node committed, undo the rest).
//!   An anonymous coordinator's are dropped: when its session ends, or once its epoch
//!   is fenced and they were prepared longer than [`FENCED_TX_GRACE`] ago.
//!
//! It never interprets the bytes it stores: there is no caching logic here.

use hashbrown::HashMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::error::VerbsError;
use crate::memory::RegionMemory;
use crate::revoke::ClientFences;
use crate::transport::{Verb, execute};
use crate::wire::{NodeStats, Request, Response, TxPrepare, TxVote, VerbOut, WireVerb};
use crate::{NodeId, RegionId};

/// Where a node keeps its regions.
#[derive(Debug, Clone)]
pub enum Storage {
    /// Process memory (the in-process `local` pool). Regions cannot be shared.
    Heap,
    /// One file per region under this directory, mapped `MAP_SHARED` (use a tmpfs such
    /// as `/dev/shm` for memory speed). Files survive a node restart and are reloaded.
    Dir(PathBuf),
}

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub id: NodeId,
    pub capacity: u64,
    pub storage: Storage,
    /// The cluster secret peers must present; `None` accepts any peer.
    pub secret: Option<Bytes>,
}

struct HeldRegion {
    mem: Arc<RegionMemory>,
    path: Option<PathBuf>,
}

/// How long a transaction prepared under a since-fenced epoch keeps its locks before
/// the node drops it (a live coordinator commits within a round trip).
pub const FENCED_TX_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The lock bit of a word locked in place ([`WordWrite::in_word_lock`]): its lowest.
pub const WORD_LOCK: u64 = 1;

/// One word a prepared transaction changes. `M` reaches the word's region: an owned
/// reference while the transaction waits for its commit, a borrow of the node's region
/// snapshot when it is applied under the same hold of the lock table.
struct WordChange<M> {
    mem: M,
    offset: u64,
    new: u64,
    /// The unlocked value, when the word itself carries this transaction's lock (its
    /// [`WORD_LOCK`] bit was set by the prepare): restored on abort.
    in_word: Option<u64>,
}

type PendingWrite = WordChange<Arc<RegionMemory>>;

struct PendingTx {
    /// The coordinator's client id (0: anonymous).
    client: u64,
    shard: u32,
    epoch: u64,
    prepared_at: Instant,
    writes: Vec<PendingWrite>,
}

/// A session is one connection (or one in-process coordinator); transaction ids are
/// scoped to it, and its prepared transactions are aborted when it ends.
type TxKey = (u64, u64);

#[derive(Default)]
struct TxState {
    epochs: HashMap<u32, u64>,
    locks: HashMap<(RegionId, u64), TxKey>,
    pending: HashMap<TxKey, PendingTx>,
    /// The client id each session's `Hello` named.
    session_clients: HashMap<u64, u64>,
    /// Sessions that ended leaving prepared transactions of a named coordinator.
    ended: hashbrown::HashSet<u64>,
    /// Prepared transactions frozen by a settlement: their coordinator's commit is
    /// refused; the settlement applies or undoes them.
    frozen: hashbrown::HashSet<TxKey>,
    /// The transactions each named coordinator committed here lately, newest last.
    committed: HashMap<u64, std::collections::VecDeque<u64>>,
}

#[derive(Default)]
struct Counters {
    prepared: AtomicU64,
    committed: AtomicU64,
    aborted: AtomicU64,
    conflicts: AtomicU64,
    stale: AtomicU64,
    rpc_errors: AtomicU64,
}

pub struct NodeCore {
    config: NodeConfig,
    /// Held regions, indexed by region id.
    regions: RwLock<Vec<Option<HeldRegion>>>,
    /// The same regions' memory, as a lock-free snapshot for the one-sided hot path
    /// (read on every verb from every core); replaced whole when a region comes or goes.
    mems: ArcSwap<Vec<Option<Arc<RegionMemory>>>>,
    tx: Mutex<TxState>,
    counters: Counters,
    next_session: AtomicU64,
    started: Instant,
    /// [`FENCED_TX_GRACE`] (shorter in tests).
    fenced_grace: std::time::Duration,
    /// Revoked clients and the fences of live connections (`revoke.rs`).
    clients: ClientFences,
}

fn put(regions: &mut Vec<Option<HeldRegion>>, region: RegionId, held: HeldRegion) {
    if regions.len() <= region as usize {
        regions.resize_with(region as usize + 1, || None);
    }
    regions[region as usize] = Some(held);
}

fn region_file(dir: &Path, region: RegionId) -> PathBuf {
    dir.join(format!("region-{region:05}.mem"))
}

fn parse_region_file(name: &str) -> Option<RegionId> {
    name.strip_prefix("region-")?
        .strip_suffix(".mem")?
        .parse()
        .ok()
}

impl NodeCore {
    /// Creates a node; with [`Storage::Dir`] it creates the directory and reloads the
    /// region files already in it.
    pub fn open(config: NodeConfig) -> Result<Arc<Self>, VerbsError> {
        let core = NodeCore {
            config,
            regions: RwLock::new(Vec::new()),
            mems: ArcSwap::from_pointee(Vec::new()),
            tx: Mutex::new(TxState::default()),
            counters: Counters::default(),
            next_session: AtomicU64::new(1),
            started: Instant::now(),
            fenced_grace: FENCED_TX_GRACE,
            clients: ClientFences::default(),
        };
        if let Storage::Dir(dir) = &core.config.storage {
            // Only this user reads the pool: the directory 0700, region files 0600.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| VerbsError::io("creating region directory", e))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| VerbsError::io("restricting region directory", e))?;
            let entries = std::fs::read_dir(dir)
                .map_err(|e| VerbsError::io("listing region directory", e))?;
            let mut regions = core.regions.write();
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(region) = name.to_str().and_then(parse_region_file) else {
                    continue;
                };
                let path = entry.path();
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(|e| VerbsError::io("opening region file", e))?;
                let mem = RegionMemory::map_file(region, &file)?;
                tracing::info!(region, size = mem.len(), path = %path.display(), "reloaded region");
                put(
                    &mut regions,
                    region,
                    HeldRegion {
                        mem: Arc::new(mem),
                        path: Some(path),
                    },
                );
            }
            core.publish(&regions);
        }
        Ok(Arc::new(core))
    }

    pub fn id(&self) -> NodeId {
        self.config.id
    }

    pub fn secret(&self) -> Option<&Bytes> {
        self.config.secret.as_ref()
    }

    /// Revoked clients and the fences of the connections of named clients.
    pub fn clients(&self) -> &ClientFences {
        &self.clients
    }

    /// A fresh session id for a new connection or in-process coordinator.
    pub fn new_session(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// The session's coordinator is gone: its prepared transactions are aborted if it
    /// was anonymous, else kept for the shard's owner to settle (it may have committed
    /// them on other nodes).
    pub fn end_session(&self, session: u64) {
        let mut tx = self.tx.lock();
        tx.session_clients.remove(&session);
        let keys: Vec<(TxKey, u64)> = tx
            .pending
            .iter()
            .filter(|(k, _)| k.0 == session)
            .map(|(k, p)| (*k, p.client))
            .collect();
        for (key, client) in keys {
            if client != 0 {
                tx.ended.insert(session);
                continue;
            }
            Self::drop_tx(&mut tx, key);
            self.counters.aborted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records the client id a session's `Hello` named (its prepared transactions are
    /// then settled, not dropped, should it end mid-commit).
    pub fn bind_client(&self, session: u64, client: u64) {
        if client != 0 {
            self.tx.lock().session_clients.insert(session, client);
        }
    }

    fn used(regions: &[Option<HeldRegion>]) -> u64 {
        regions.iter().flatten().map(|r| r.mem.len()).sum()
    }

    pub fn region(&self, region: RegionId) -> Result<Arc<RegionMemory>, VerbsError> {
        match self.mems.load().get(region as usize) {
            Some(Some(mem)) => Ok(mem.clone()),
            _ => Err(VerbsError::NoSuchRegion(region)),
        }
    }

    /// Runs `f` with a lookup of every region, from one snapshot taken without a lock
    /// or a reference count (a post of several verbs pays for the snapshot once).
    pub fn with_regions<T>(
        &self,
        f: impl for<'m> FnOnce(&'m dyn Fn(RegionId) -> Option<&'m RegionMemory>) -> T,
    ) -> T {
        let mems = self.mems.load();
        f(&|region| mems.get(region as usize).and_then(|m| m.as_deref()))
    }

    /// Runs `f` on the region without taking a lock or a reference count (the
    /// one-sided path).
    pub fn with_region<T>(
        &self,
        region: RegionId,
        f: impl FnOnce(&RegionMemory) -> Result<T, VerbsError>,
    ) -> Result<T, VerbsError> {
        match self.mems.load().get(region as usize) {
            Some(Some(mem)) => f(mem),
            _ => Err(VerbsError::NoSuchRegion(region)),
        }
    }

    /// Refreshes the lock-free snapshot after `regions` changed (the caller holds its
    /// write lock, so snapshots are published in order).
    fn publish(&self, regions: &[Option<HeldRegion>]) {
        self.mems.store(Arc::new(
            regions
                .iter()
                .map(|r| r.as_ref().map(|h| h.mem.clone()))
                .collect(),
        ));
    }

    pub fn create_region(&self, region: RegionId, size: u64) -> Result<PathBuf, VerbsError> {
        if size == 0 || !size.is_multiple_of(8) {
            return Err(VerbsError::BadRegionSize(size));
        }
        let mut regions = self.regions.write();
        if matches!(regions.get(region as usize), Some(Some(_))) {
            return Err(VerbsError::RegionExists(region));
        }
        let used = Self::used(&regions);
        let free = self.config.capacity.saturating_sub(used);
        if size > free {
            return Err(VerbsError::CapacityExceeded { need: size, free });
        }
        let (mem, path) = match &self.config.storage {
            Storage::Heap => (RegionMemory::heap(region, size)?, None),
            Storage::Dir(dir) => {
                let path = region_file(dir, region);
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(|e| VerbsError::io("creating region file", e))?;
                file.set_len(size)
                    .map_err(|e| VerbsError::io("sizing region file", e))?;
                (RegionMemory::map_file(region, &file)?, Some(path))
            }
        };
        tracing::debug!(region, size, "created region");
        let shown = path.clone().unwrap_or_default();
        put(
            &mut regions,
            region,
            HeldRegion {
                mem: Arc::new(mem),
                path,
            },
        );
        self.publish(&regions);
        Ok(shown)
    }

    pub fn drop_region(&self, region: RegionId) -> Result<(), VerbsError> {
        let held = {
            let mut regions = self.regions.write();
            let held = regions
                .get_mut(region as usize)
                .and_then(Option::take)
                .ok_or(VerbsError::NoSuchRegion(region))?;
            self.publish(&regions);
            held
        };
        if let Some(path) = held.path {
            std::fs::remove_file(&path).map_err(|e| VerbsError::io("removing region file", e))?;
        }
        Ok(())
    }

    pub fn stats(&self) -> NodeStats {
        let regions = self.regions.read();
        NodeStats {
            node: self.config.id,
            capacity: self.config.capacity,
            used: Self::used(&regions),
            regions: regions.iter().flatten().count() as u32,
            prepared: self.counters.prepared.load(Ordering::Relaxed),
            committed: self.counters.committed.load(Ordering::Relaxed),
            aborted: self.counters.aborted.load(Ordering::Relaxed),
            conflicts: self.counters.conflicts.load(Ordering::Relaxed),
            stale_epoch_rejects: self.counters.stale.load(Ordering::Relaxed),
            rpc_errors: self.counters.rpc_errors.load(Ordering::Relaxed),
            uptime_ms: self.started.elapsed().as_millis() as u64,
        }
    }

    /// The current epoch of a shard on this node (0 if never seen).
    pub fn epoch(&self, shard: u32) -> u64 {
        self.tx.lock().epochs.get(&shard).copied().unwrap_or(0)
    }

    /// Takes transaction `key` out of the lock table. Its in-word locks stay set: the
    /// caller applies the transaction ([`apply`](Self::apply)) or undoes it
    /// ([`unlock_words`](Self::unlock_words)).
    fn release(tx: &mut TxState, key: TxKey) -> Option<PendingTx> {
        let pending = tx.pending.remove(&key)?;
        for w in &pending.writes {
            let word = (w.mem.region(), w.offset);
            if tx.locks.get(&word) == Some(&key) {
                tx.locks.remove(&word);
            }
        }
        Some(pending)
    }

    /// Releases and undoes transaction `key`: its in-word locks are cleared.
    fn drop_tx(tx: &mut TxState, key: TxKey) -> bool {
        match Self::release(tx, key) {
            Some(p) => {
                Self::unlock_words(&p.writes);
                true
            }
            None => false,
        }
    }

    /// Clears the in-word locks `writes` set (a word another writer changed since is
    /// left alone: the lock was not ours any more).
    fn unlock_words<M: std::ops::Deref<Target = RegionMemory>>(writes: &[WordChange<M>]) {
        for w in writes {
            if let Some(old) = w.in_word {
                // Bounds and alignment were checked by the prepare.
                let _ = w.mem.cas(w.offset, old | WORD_LOCK, old);
            }
        }
    }

    /// Applies a released transaction: the plain words first, then the words that
    /// carry its lock, so storing those (which unlocks them) publishes the rest.
    fn apply<M: std::ops::Deref<Target = RegionMemory>>(writes: &[WordChange<M>]) {
        for last in [false, true] {
            for w in writes.iter().filter(|w| w.in_word.is_some() == last) {
                // Bounds and alignment were checked by the prepare.
                let _ = w.mem.store(w.offset, w.new);
            }
        }
    }

    /// Prepares `p` and registers it (its words in the lock table) until its commit or
    /// abort.
    fn prepare_one(&self, tx: &mut TxState, session: u64, p: &TxPrepare) -> TxVote {
        let writes = match self.lock_words(tx, session, p, |region| self.region(region)) {
            Ok(writes) => writes,
            Err(vote) => return vote,
        };
        let key = (session, p.txid);
        for w in &p.writes {
            tx.locks.insert((w.region, w.offset), key);
        }
        let client = tx.session_clients.get(&session).copied().unwrap_or(0);
        tx.pending.insert(
            key,
            PendingTx {
                client,
                shard: p.shard,
                epoch: p.epoch,
                prepared_at: Instant::now(),
                writes,
            },
        );
        self.counters.prepared.fetch_add(1, Ordering::Relaxed);
        TxVote::Yes
    }

    /// The prepare's checks of `p`: its epoch, that no other transaction holds its
    /// words, that each word holds what `p` expects; then its in-word locks, set. `Err`:
    /// the vote refusing it, with nothing left locked. `region` reaches a region's
    /// memory.
    fn lock_words<M: std::ops::Deref<Target = RegionMemory>>(
        &self,
        tx: &mut TxState,
        session: u64,
        p: &TxPrepare,
        region: impl Fn(RegionId) -> Result<M, VerbsError>,
    ) -> Result<Vec<WordChange<M>>, TxVote> {
        let current = tx.epochs.get(&p.shard).copied().unwrap_or(0);
        if p.epoch < current {
            self.counters.stale.fetch_add(1, Ordering::Relaxed);
            return Err(TxVote::StaleEpoch { current });
        }
        if p.epoch > current {
            // A newer owner is here: older epochs' transactions left hanging go.
            tx.epochs.insert(p.shard, p.epoch);
            self.drop_hanging(tx, p.shard);
        }
        let key = (session, p.txid);
        if tx.pending.contains_key(&key) {
            return Err(TxVote::Failed(VerbsError::Malformed(format!(
                "transaction {} is already prepared",
                p.txid
            ))));
        }
        let mut writes = Vec::with_capacity(p.writes.len());
        for (i, w) in p.writes.iter().enumerate() {
            let mem = region(w.region).map_err(TxVote::Failed)?;
            if let Some(holder) = tx.locks.get(&(w.region, w.offset)).copied() {
                // A lock of a fenced epoch's transaction left hanging is released.
                let hanging = tx
                    .pending
                    .get(&holder)
                    .is_some_and(|h| self.hanging(&tx.epochs, h));
                if !hanging {
                    self.counters.conflicts.fetch_add(1, Ordering::Relaxed);
                    return Err(TxVote::Locked { index: i as u32 });
                }
                Self::drop_tx(tx, holder);
                self.counters.aborted.fetch_add(1, Ordering::Relaxed);
            }
            // Loaded after any hanging holder was dropped (which may have unlocked it).
            let actual = mem.load(w.offset).map_err(TxVote::Failed)?;
            if w.in_word_lock && actual & WORD_LOCK != 0 {
                // Held in place by a one-sided writer (or retired by a split): wait,
                // do not re-read as if the value had changed.
                self.counters.conflicts.fetch_add(1, Ordering::Relaxed);
                return Err(TxVote::Locked { index: i as u32 });
            }
            if let Some(expect) = w.expect
                && expect != actual
            {
                self.counters.conflicts.fetch_add(1, Ordering::Relaxed);
                return Err(TxVote::Conflict {
                    index: i as u32,
                    actual,
                });
            }
            let in_word = match (w.in_word_lock, w.expect) {
                (false, _) => None,
                // A word locked in place by a writer outside this table (a one-sided
                // single-key write) or retired for good.
                (true, Some(e)) if e & WORD_LOCK != 0 => {
                    self.counters.conflicts.fetch_add(1, Ordering::Relaxed);
                    return Err(TxVote::Locked { index: i as u32 });
                }
                (true, Some(e)) => Some(e),
                (true, None) => {
                    return Err(TxVote::Failed(VerbsError::Malformed(
                        "a word locked in place needs an expected value".into(),
                    )));
                }
            };
            writes.push(WordChange {
                mem,
                offset: w.offset,
                new: w.new,
                in_word,
            });
        }
        // Set the in-word locks: a one-sided writer may change a word between the
        // check above and here, so each is a compare-and-swap, undone on failure.
        for (i, w) in writes.iter().enumerate() {
            let Some(old) = w.in_word else { continue };
            match w.mem.cas(w.offset, old, old | WORD_LOCK) {
                Ok(seen) if seen == old => {}
                seen => {
                    Self::unlock_words(&writes[..i]);
                    self.counters.conflicts.fetch_add(1, Ordering::Relaxed);
                    return Err(match seen {
                        Ok(actual) if actual & WORD_LOCK != 0 => TxVote::Locked { index: i as u32 },
                        Ok(actual) => TxVote::Conflict {
                            index: i as u32,
                            actual,
                        },
                        Err(e) => TxVote::Failed(e),
                    });
                }
            }
        }
        Ok(writes)
    }

    /// Prepare phase for a batch of transactions; one vote each.
    pub fn prepare(&self, session: u64, txs: &[TxPrepare]) -> Vec<TxVote> {
        let mut tx = self.tx.lock();
        txs.iter()
            .map(|p| self.prepare_one(&mut tx, session, p))
            .collect()
    }

    /// Prepares each transaction and applies the ones that vote `Yes` at once, under
    /// one hold of the lock table: two-phase commit collapsed into one round for
    /// transactions that touch only this node. One vote each (`Yes`: applied).
    /// A transaction prepared and applied under one hold is never entered in the lock
    /// table (no other transaction could see it there), and its words are reached
    /// through one snapshot of the regions.
    pub fn prepare_commit(&self, session: u64, txs: &[TxPrepare]) -> Vec<TxVote> {
        let mut tx = self.tx.lock();
        let mems = self.mems.load();
        txs.iter()
            .map(|p| {
                let region = |region: RegionId| {
                    mems.get(region as usize)
                        .and_then(Option::as_deref)
                        .ok_or(VerbsError::NoSuchRegion(region))
                };
                match self.lock_words(&mut tx, session, p, region) {
                    Ok(writes) => {
                        Self::apply(&writes);
                        self.counters.prepared.fetch_add(1, Ordering::Relaxed);
                        self.counters.committed.fetch_add(1, Ordering::Relaxed);
                        TxVote::Yes
                    }
                    Err(vote) => vote,
                }
            })
            .collect()
    }

    /// Applies and unlocks prepared transactions: one vote each, `Yes` when applied and
    /// `Failed(UnknownTx)` for ids never prepared or dropped by a fence.
    pub fn commit(&self, session: u64, txids: &[u64]) -> Vec<TxVote> {
        let mut tx = self.tx.lock();
        txids
            .iter()
            .map(|&id| {
                if tx.frozen.contains(&(session, id)) {
                    // A settlement decides this one now.
                    return TxVote::Failed(VerbsError::UnknownTx(id));
                }
                match Self::release(&mut tx, (session, id)) {
                    Some(p) => {
                        Self::apply(&p.writes);
                        Self::log_commit(&mut tx, p.client, id);
                        self.counters.committed.fetch_add(1, Ordering::Relaxed);
                        TxVote::Yes
                    }
                    None => TxVote::Failed(VerbsError::UnknownTx(id)),
                }
            })
            .collect()
    }

    pub fn abort(&self, session: u64, txids: &[u64]) {
        let mut tx = self.tx.lock();
        for &id in txids {
            if !tx.frozen.contains(&(session, id)) && Self::drop_tx(&mut tx, (session, id)) {
                self.counters.aborted.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Raises a shard's epoch: prepares of older epochs are refused from now on, and
    /// their transactions prepared more than [`FENCED_TX_GRACE`] ago are dropped.
    pub fn fence(&self, shard: u32, epoch: u64) {
        let mut tx = self.tx.lock();
        let current = tx.epochs.entry(shard).or_insert(0);
        *current = (*current).max(epoch);
        self.drop_hanging(&mut tx, shard);
    }

    /// Whether `p` was prepared under an epoch since fenced, longer ago than the grace
    /// a live coordinator needs to commit it.
    fn hanging(&self, epochs: &HashMap<u32, u64>, p: &PendingTx) -> bool {
        // A named coordinator's are settled by the shard's owner instead.
        p.client == 0
            && p.epoch < epochs.get(&p.shard).copied().unwrap_or(0)
            && p.prepared_at.elapsed() >= self.fenced_grace
    }

    /// Drops `shard`'s transactions left hanging.
    fn drop_hanging(&self, tx: &mut TxState, shard: u32) {
        let victims: Vec<TxKey> = tx
            .pending
            .iter()
            .filter(|(_, p)| p.shard == shard && self.hanging(&tx.epochs, p))
            .map(|(k, _)| *k)
            .collect();
        for key in victims {
            Self::drop_tx(tx, key);
            self.counters.aborted.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn run_verbs(&self, verbs: Vec<WireVerb>) -> Result<Vec<VerbOut>, VerbsError> {
        let mut outs = Vec::with_capacity(verbs.len());
        for v in verbs {
            match v {
                WireVerb::Read {
                    region,
                    offset,
                    len,
                } => {
                    let mut buf = vec![0u8; len as usize];
                    execute(
                        &*self.region(region)?,
                        &mut Verb::Read {
                            region,
                            offset,
                            buf: &mut buf,
                        },
                    )?;
                    outs.push(VerbOut::Data(Bytes::from(buf)));
                }
                WireVerb::Write {
                    region,
                    offset,
                    data,
                } => {
                    self.region(region)?.write(offset, &data)?;
                    outs.push(VerbOut::Done);
                }
                WireVerb::Cas {
                    region,
                    offset,
                    expected,
                    new,
                } => outs.push(VerbOut::Word(
                    self.region(region)?.cas(offset, expected, new)?,
                )),
                WireVerb::Faa {
                    region,
                    offset,
                    add,
                } => outs.push(VerbOut::Word(self.region(region)?.faa(offset, add)?)),
            }
        }
        Ok(outs)
    }

    /// Serves one request for `session`. `Hello` and `CopyRegion` belong to the
    /// connection layer and are refused here.
    pub fn handle(&self, session: u64, req: Request) -> Response {
        let result = match req {
            Request::Ping => Ok(Response::Pong {
                node: self.config.id,
                uptime_ms: self.started.elapsed().as_millis() as u64,
            }),
            Request::Stats => Ok(Response::Stats(self.stats())),
            Request::CreateRegion { region, size } => {
                self.create_region(region, size)
                    .map(|path| Response::Region {
                        region,
                        size,
                        path: path.display().to_string(),
                    })
            }
            Request::DropRegion { region } => self.drop_region(region).map(|_| Response::Ok),
            Request::OpenRegion { region } => {
                let regions = self.regions.read();
                match regions.get(region as usize).and_then(Option::as_ref) {
                    None => Err(VerbsError::NoSuchRegion(region)),
                    Some(HeldRegion { path: None, .. }) => Err(VerbsError::Remote(
                        "this node keeps regions in process memory; use the tcp backend".into(),
                    )),
                    Some(HeldRegion {
                        mem,
                        path: Some(path),
                    }) => Ok(Response::Region {
                        region,
                        size: mem.len(),
                        path: path.display().to_string(),
                    }),
                }
            }
            Request::ListRegions => {
                let list: Vec<(RegionId, u64)> = self
                    .regions
                    .read()
                    .iter()
                    .enumerate()
                    .filter_map(|(r, h)| h.as_ref().map(|h| (r as RegionId, h.mem.len())))
                    .collect();
                Ok(Response::Regions(list))
            }
            Request::Verbs(verbs) => self.run_verbs(verbs).map(Response::Verbs),
            Request::Prepare(txs) => Ok(Response::Votes(self.prepare(session, &txs))),
            Request::Commit(ids) => Ok(Response::Votes(self.commit(session, &ids))),
            Request::PrepareCommit(txs) => Ok(Response::Votes(self.prepare_commit(session, &txs))),
            Request::Abort(ids) => {
                self.abort(session, &ids);
                Ok(Response::Ok)
            }
            Request::Fence { shard, epoch } => {
                self.fence(shard, epoch);
                Ok(Response::Ok)
            }
            Request::Revoke { client } => {
                self.clients.revoke(client);
                Ok(Response::Ok)
            }
            Request::Settle { shard } => Ok(Response::Txs(self.settle(shard))),
            Request::Committed(ids) => Ok(Response::Txs(self.committed_among(&ids))),
            Request::Resolve { commit, abort } => {
                self.resolve(&commit, &abort);
                Ok(Response::Ok)
            }
            Request::RdmaConnect { .. } | Request::RdmaRegion { .. } => Err(VerbsError::Remote(
                "this memory node serves no RDMA device; use the shm or tcp backend".into(),
            )),
            Request::Hello { .. } | Request::CopyRegion { .. } => Err(VerbsError::Malformed(
                "request is handled by the connection layer".into(),
            )),
        };
        result.unwrap_or_else(|e| {
            self.counters.rpc_errors.fetch_add(1, Ordering::Relaxed);
            Response::Error(e)
        })
    }

    /// Counts an error answered by the connection layer.
    pub fn count_error(&self) {
        self.counters.rpc_errors.fetch_add(1, Ordering::Relaxed);
    }
}

mod settle;
#[cfg(test)]
mod tests;
