//! Pool client tests on the embedded (`local`) pool and on two in-process memory-node
//! servers reached over `shm` with `r = 2`.

use std::sync::Arc;
use std::time::Duration;

mod support;

use dmc_umo::{GlobalAddr, Pool, ReadObject, Tx, TxOutcome, TxWrite, ValueKind};
use dmc_verbs::Transport;
use support::{Nodes, connect, region_copies, small, start_nodes};

#[tokio::test]
async fn objects_roundtrip_and_grow_the_pool() {
    let pool = Pool::embedded(64 << 20, small(2)).await.unwrap();
    let mut refs = Vec::new();
    for i in 0..2000u32 {
        let key = format!("key:{i:08}");
        let value = vec![(i % 251) as u8; (i % 300) as usize];
        refs.push((
            key.clone(),
            value.clone(),
            pool.write_object(0, key.as_bytes(), ValueKind::String, &value)
                .await
                .unwrap(),
        ));
    }
    for (key, value, obj) in &refs {
        assert_eq!(
            pool.read_object(*obj, 0, key.as_bytes()).await.unwrap(),
            ReadObject::Value(value.clone().into(), ValueKind::String)
        );
        assert_eq!(
            pool.read_object(*obj, 1, key.as_bytes()).await.unwrap(),
            ReadObject::Mismatch,
            "db is checked"
        );
        assert_eq!(
            pool.read_object(*obj, 0, b"other").await.unwrap(),
            ReadObject::Mismatch,
            "key is checked"
        );
    }
    assert!(pool.stats().regions >= 1);
}

#[tokio::test]
async fn large_values_chain_blocks() {
    let pool = Pool::embedded(64 << 20, small(2)).await.unwrap();
    assert_eq!(pool.max_block(), 235_000);
    let value: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let obj = pool
        .write_object(0, b"big", ValueKind::String, &value)
        .await
        .unwrap();
    assert!(obj.chained);
    assert_eq!(
        pool.read_object(obj, 0, b"big").await.unwrap(),
        ReadObject::Value(value.into(), ValueKind::String)
    );
    let long_key = vec![b'k'; 70_000];
    let obj = pool
        .write_object(0, &long_key, ValueKind::String, b"v")
        .await
        .unwrap();
    assert!(obj.chained, "keys beyond 16 bits of length chain");
    assert_eq!(
        pool.read_object(obj, 0, &long_key).await.unwrap(),
        ReadObject::Value("v".into(), ValueKind::String)
    );
}

#[tokio::test]
async fn commits_validate_and_fence() {
    let pool = Pool::embedded(64 << 20, small(2)).await.unwrap();
    let word = pool.alloc(8, true).await.unwrap().addr;
    let tx = |epoch, expect, new| Tx {
        shard: 3,
        epoch,
        writes: vec![TxWrite {
            addr: word,
            expect,
            new,
            in_word_lock: false,
        }],
    };
    assert_eq!(
        pool.commit(&[tx(1, Some(0), 5)]).await,
        vec![TxOutcome::Committed]
    );
    assert_eq!(
        pool.commit(&[tx(1, Some(0), 6)]).await,
        vec![TxOutcome::Conflict {
            index: 0,
            actual: 5
        }]
    );
    assert_eq!(
        pool.commit(&[tx(2, Some(5), 7)]).await,
        vec![TxOutcome::Committed]
    );
    // Epoch 2 was seen: epoch 1 is now stale, on every copy, and changes nothing.
    assert_eq!(
        pool.commit(&[tx(1, None, 9)]).await,
        vec![TxOutcome::StaleEpoch { current: 2 }]
    );
    for copy in 0..2 {
        let mut w = [0u8; 8];
        pool.read_copy(word, copy, &mut w).await.unwrap();
        assert_eq!(u64::from_le_bytes(w), 7);
    }
    // A batch: independent transactions succeed or fail on their own.
    let other = pool.alloc(8, true).await.unwrap().addr;
    let out = pool
        .commit(&[
            tx(2, Some(7), 8),
            Tx {
                shard: 3,
                epoch: 2,
                writes: vec![TxWrite {
                    addr: other,
                    expect: Some(1),
                    new: 2,
                    in_word_lock: false,
                }],
            },
        ])
        .await;
    assert_eq!(
        out,
        vec![
            TxOutcome::Committed,
            TxOutcome::Conflict {
                index: 0,
                actual: 0
            }
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shm_r2_writes_reach_both_copies_and_the_pool_reopens() {
    let nodes = start_nodes(2, 64 << 20).await;
    let mut objs = Vec::new();
    {
        let pool = Pool::open(small(2), connect(&nodes).await).await.unwrap();
        for i in 0..500u32 {
            let key = format!("k{i}");
            let obj = pool
                .write_object(
                    0,
                    key.as_bytes(),
                    ValueKind::String,
                    format!("v{i}").as_bytes(),
                )
                .await
                .unwrap();
            objs.push((key, obj));
        }
        // Every object reads back identically from the backup copy alone.
        for (key, obj) in &objs {
            let mut a = vec![0u8; obj.block.size() as usize];
            let mut b = a.clone();
            pool.read_copy(obj.block.addr, 0, &mut a).await.unwrap();
            pool.read_copy(obj.block.addr, 1, &mut b).await.unwrap();
            assert_eq!(a, b, "{key}: primary and backup differ");
        }
        assert_eq!(pool.set_root(0, 42).await.unwrap(), TxOutcome::Committed);
    }
    // A new client (a restarted agent) finds the same pool.
    let pool = Pool::open(small(2), connect(&nodes).await).await.unwrap();
    assert_eq!(pool.root().await.unwrap(), 42);
    for (key, obj) in &objs {
        assert!(matches!(
            pool.read_object(*obj, 0, key.as_bytes()).await.unwrap(),
            ReadObject::Value(..)
        ));
    }
    // New allocations do not land on segments the first client claimed.
    let fresh = pool
        .write_object(0, b"new", ValueKind::String, b"value")
        .await
        .unwrap();
    assert!(objs.iter().all(|(_, o)| o.block.addr != fresh.block.addr));
    let _ = GlobalAddr::NULL;
}

#[tokio::test]
async fn pool_refuses_to_grow_past_its_limit() {
    let mut cfg = small(1);
    cfg.max_regions = 1;
    let pool = Pool::embedded(64 << 20, cfg).await.unwrap();
    let mut err = None;
    for i in 0..10_000u32 {
        if let Err(e) = pool
            .write_object(
                0,
                format!("{i}").as_bytes(),
                ValueKind::String,
                &[0u8; 1000],
            )
            .await
        {
            err = Some(e);
            break;
        }
    }
    assert!(
        matches!(err, Some(dmc_umo::UmoError::OutOfMemory(_))),
        "{err:?}"
    );
}

/// Two clients open the same pool at once (two agents of one instance): each reads
/// objects in regions the other grew the pool by, and no block is handed to both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_share_regions_and_never_share_a_block() {
    let nodes = start_nodes(2, 128 << 20).await;
    let first = Pool::open(small(2), connect(&nodes).await).await.unwrap();
    let mut cfg = small(2);
    cfg.client_id = 2;
    let second = Pool::open(cfg, connect(&nodes).await).await.unwrap();
    let write = |pool: Arc<Pool>, tag: &'static str| async move {
        let mut out = Vec::new();
        for i in 0..3000u32 {
            let key = format!("{tag}:{i}");
            let value = vec![i as u8; 200 + (i % 700) as usize];
            let obj = pool
                .write_object(0, key.as_bytes(), ValueKind::String, &value)
                .await
                .unwrap();
            out.push((key, value, obj));
        }
        out
    };
    let (a, b) = tokio::join!(
        tokio::spawn(write(first.clone(), "a")),
        tokio::spawn(write(second.clone(), "b"))
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(first.stats().regions > 1, "the writes grew the pool");
    let mut addrs = std::collections::HashSet::new();
    for (_, _, obj) in a.iter().chain(&b) {
        assert!(
            addrs.insert(obj.block.addr),
            "{:?} handed out twice",
            obj.block
        );
    }
    // Each client reads the other's objects, learning the regions it has not seen.
    for (pool, objs) in [(&first, &b), (&second, &a)] {
        for (key, value, obj) in objs {
            assert_eq!(
                pool.read_object(*obj, 0, key.as_bytes()).await.unwrap(),
                ReadObject::Value(value.clone().into(), ValueKind::String)
            );
        }
    }
}

/// A transport that refuses slot-pair writes (16 bytes) while `fail` is set, as a
/// backup that stopped answering would.
struct FailingPairs {
    inner: Arc<dyn Transport>,
    fail: Arc<std::sync::atomic::AtomicBool>,
    /// Refuse the next publishing batch (metadata write then CAS) once, as a primary
    /// whose reply was lost.
    fail_publish: Arc<std::sync::atomic::AtomicBool>,
    /// Batches still let through before every later one fails, as a writer cut off
    /// from the nodes mid-commit (shared by all nodes' wrappers; negative: no limit).
    budget: Arc<std::sync::atomic::AtomicI64>,
    /// Commit RPCs still let through before every later one fails, as a coordinator
    /// that dies between a transaction's phases (negative: no limit).
    commits: Arc<std::sync::atomic::AtomicI64>,
}

/// The switches of [`FailingPairs`] wrappers, shared by every node's wrapper.
#[derive(Clone)]
struct Knobs {
    fail: Arc<std::sync::atomic::AtomicBool>,
    fail_publish: Arc<std::sync::atomic::AtomicBool>,
    budget: Arc<std::sync::atomic::AtomicI64>,
    commits: Arc<std::sync::atomic::AtomicI64>,
}

impl Knobs {
    /// Everything lets through.
    fn new() -> Knobs {
        Knobs {
            fail: Arc::new(false.into()),
            fail_publish: Arc::new(false.into()),
            budget: Arc::new((-1).into()),
            commits: Arc::new((-1).into()),
        }
    }

    /// A pool on `nodes`, every node's transport wrapped with these switches.
    async fn pool(&self, nodes: &Nodes) -> Arc<Pool> {
        let ts: Vec<Arc<dyn Transport>> = connect(nodes)
            .await
            .into_iter()
            .map(|inner| {
                Arc::new(FailingPairs {
                    inner,
                    fail: self.fail.clone(),
                    fail_publish: self.fail_publish.clone(),
                    budget: self.budget.clone(),
                    commits: self.commits.clone(),
                }) as Arc<dyn Transport>
            })
            .collect();
        Pool::open(small(2), ts).await.unwrap()
    }
}

/// A slot's word and metadata word on copy `copy`.
async fn read_pair(pool: &Pool, slot: GlobalAddr, copy: usize) -> (u64, u64) {
    let mut b = [0u8; 16];
    pool.read_copy(slot, copy, &mut b).await.unwrap();
    (
        u64::from_le_bytes(b[..8].try_into().unwrap()),
        u64::from_le_bytes(b[8..].try_into().unwrap()),
    )
}

impl FailingPairs {
    fn refuses(&self, verbs: &[dmc_verbs::Verb<'_>]) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        if self.budget.load(SeqCst) >= 0 && self.budget.fetch_sub(1, SeqCst) <= 0 {
            self.budget.store(0, SeqCst);
            return true;
        }
        let publish = matches!(
            verbs,
            [dmc_verbs::Verb::Write { .. }, dmc_verbs::Verb::Cas { .. }]
        );
        if publish && self.fail_publish.swap(false, SeqCst) {
            return true;
        }
        self.fail.load(SeqCst)
            && verbs
                .iter()
                .any(|v| matches!(v, dmc_verbs::Verb::Write { data, .. } if data.len() == 16))
    }
}

impl Transport for FailingPairs {
    fn node(&self) -> dmc_verbs::NodeId {
        self.inner.node()
    }
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn post<'a, 'b: 'a>(
        &'a self,
        verbs: &'a mut [dmc_verbs::Verb<'b>],
    ) -> futures::future::BoxFuture<'a, Result<(), dmc_verbs::VerbsError>> {
        if self.refuses(verbs) {
            return Box::pin(std::future::ready(Err(dmc_verbs::VerbsError::Closed)));
        }
        self.inner.post(verbs)
    }
    fn post_now(
        &self,
        verbs: &mut [dmc_verbs::Verb<'_>],
    ) -> Option<Result<(), dmc_verbs::VerbsError>> {
        if self.refuses(verbs) {
            return Some(Err(dmc_verbs::VerbsError::Closed));
        }
        self.inner.post_now(verbs)
    }
    fn completes_inline(&self) -> bool {
        self.inner.completes_inline()
    }
    fn call(
        &self,
        req: dmc_verbs::wire::Request,
    ) -> futures::future::BoxFuture<'_, Result<dmc_verbs::wire::Response, dmc_verbs::VerbsError>>
    {
        use std::sync::atomic::Ordering::SeqCst;
        if matches!(req, dmc_verbs::wire::Request::Commit(_))
            && self.commits.load(SeqCst) >= 0
            && self.commits.fetch_sub(1, SeqCst) <= 0
        {
            self.commits.store(0, SeqCst);
            return Box::pin(std::future::ready(Err(dmc_verbs::VerbsError::Closed)));
        }
        self.inner.call(req)
    }
}

/// A one-sided slot commit whose backup write fails leaves no lock and no divergent
/// copy behind where the nodes answer: the primary keeps the old word, unlocked, and a
/// later commit of the slot goes through; a lost answer to the last step is retried
/// (before the fix that left the slot locked for good).
#[tokio::test]
async fn a_failed_backup_write_unlocks_the_slot_and_restores_the_old_pair() {
    use dmc_umo::SlotWrite;
    let nodes = start_nodes(2, 64 << 20).await;
    // Only backups receive whole pairs (the primary gets its metadata and then its
    // word), so failing pairs on every node fails exactly the backup's write.
    let knobs = Knobs::new();
    let (fail, fail_publish) = (knobs.fail.clone(), knobs.fail_publish.clone());
    let pool = knobs.pool(&nodes).await;
    let block = pool.alloc(64, true).await.unwrap();
    let slot = block.addr;
    let first = SlotWrite {
        addr: slot,
        old: 0,
        old_meta: 0,
        new: 0x40,
        meta: 7,
    };
    assert_eq!(pool.commit_slot(first).await, TxOutcome::Committed);
    let read_pair = |copy: usize| read_pair(&pool, slot, copy);
    // Whichever copy is the backup, the pair reached both.
    assert_eq!(read_pair(0).await, (0x40, 7));
    assert_eq!(read_pair(1).await, (0x40, 7));
    fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let second = SlotWrite {
        addr: slot,
        old: 0x40,
        old_meta: 7,
        new: 0x80,
        meta: 9,
    };
    let failed = pool.commit_slot(second).await;
    fail.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(matches!(failed, TxOutcome::Failed(_)), "{failed:?}");
    // The primary is unlocked and both copies hold the old pair.
    assert_eq!(read_pair(0).await, (0x40, 7));
    assert_eq!(read_pair(1).await, (0x40, 7));
    let third = SlotWrite {
        addr: slot,
        old: 0x40,
        old_meta: 7,
        new: 0xc0,
        meta: 11,
    };
    assert_eq!(pool.commit_slot(third).await, TxOutcome::Committed);
    assert_eq!(read_pair(0).await, (0xc0, 11));
    assert_eq!(read_pair(1).await, (0xc0, 11));
    // A lost answer to the last step is retried, which finishes the write instead of
    // leaving the slot locked.
    fail_publish.store(true, std::sync::atomic::Ordering::SeqCst);
    let fourth = SlotWrite {
        addr: slot,
        old: 0xc0,
        old_meta: 11,
        new: 0x100,
        meta: 13,
    };
    assert_eq!(pool.commit_slot(fourth).await, TxOutcome::Committed);
    assert_eq!(read_pair(0).await, (0x100, 13));
    assert_eq!(read_pair(1).await, (0x100, 13));
}

/// A single-key commit cut off mid-way (every verb fails from some point, as when the
/// writer dies or loses the nodes) leaves the primary locked; `roll_forward_slot`
/// resolves it: unlocked to the old pair when no backup got the new one, rolled
/// forward to the new pair when a backup did, the copies equal either way, and the
/// slot writable again (before issue 15 such a slot stayed locked for good).
#[tokio::test]
async fn a_commit_cut_off_mid_way_is_rolled_forward_or_undone() {
    use dmc_umo::{SlotRecovery, SlotWrite};
    use std::sync::atomic::Ordering::SeqCst;
    let nodes = start_nodes(2, 64 << 20).await;
    let knobs = Knobs::new();
    let budget = knobs.budget.clone();
    let pool = knobs.pool(&nodes).await;
    let slot = pool.alloc(64, true).await.unwrap().addr;
    let read_pair = |copy: usize| read_pair(&pool, slot, copy);
    let write = |old: (u64, u64), new: (u64, u64)| SlotWrite {
        addr: slot,
        old: old.0,
        old_meta: old.1,
        new: new.0,
        meta: new.1,
    };
    assert_eq!(
        pool.roll_forward_slot(slot).await.unwrap(),
        SlotRecovery::Agreed
    );
    assert_eq!(
        pool.commit_slot(write((0, 0), (0x40, 7))).await,
        TxOutcome::Committed
    );
    // Cut off after the lock (one batch): no backup has the new pair.
    budget.store(1, SeqCst);
    let cut = pool.commit_slot(write((0x40, 7), (0x80, 9))).await;
    budget.store(-1, SeqCst);
    assert!(matches!(cut, TxOutcome::Failed(_)), "{cut:?}");
    assert_eq!(read_pair(0).await, (0x41, 7), "the primary is left locked");
    assert_eq!(
        pool.roll_forward_slot(slot).await.unwrap(),
        SlotRecovery::Unlocked { word: 0x40 }
    );
    assert_eq!(read_pair(0).await, (0x40, 7));
    assert_eq!(read_pair(1).await, (0x40, 7));
    // Cut off after the lock and the backup's pair (two batches): rolled forward.
    budget.store(2, SeqCst);
    let cut = pool.commit_slot(write((0x40, 7), (0xc0, 11))).await;
    budget.store(-1, SeqCst);
    assert!(matches!(cut, TxOutcome::Failed(_)), "{cut:?}");
    assert_eq!(read_pair(0).await, (0x41, 7), "the primary is left locked");
    assert_eq!(read_pair(1).await, (0xc0, 11), "the backup is ahead");
    assert_eq!(
        pool.roll_forward_slot(slot).await.unwrap(),
        SlotRecovery::RolledForward {
            word: 0xc0,
            meta: 11
        }
    );
    assert_eq!(read_pair(0).await, (0xc0, 11));
    assert_eq!(read_pair(1).await, (0xc0, 11));
    // The slot is writable again.
    assert_eq!(
        pool.commit_slot(write((0xc0, 11), (0x100, 13))).await,
        TxOutcome::Committed
    );
    assert_eq!(read_pair(1).await, (0x100, 13));
}

/// A two-phase commit whose coordinator stopped after committing the backups: the
/// primary's node aborts its part when the coordinator's session ends, leaving the
/// primary's slot word behind the backups'. `roll_forward_slot` (what the shard's next
/// owner runs) brings the primary forward, since the backups commit only after every
/// copy voted yes.
#[tokio::test]
async fn a_two_phase_commit_that_reached_only_the_backups_is_rolled_forward() {
    use dmc_umo::SlotRecovery;
    use std::sync::atomic::Ordering::SeqCst;
    let nodes = start_nodes(2, 64 << 20).await;
    let knobs = Knobs::new();
    let commits = knobs.commits.clone();
    let coordinator = knobs.pool(&nodes).await;
    let slot = coordinator.alloc(64, true).await.unwrap().addr;
    let tx = |old: u64, new: u64, meta: u64| Tx {
        shard: 3,
        epoch: 1,
        writes: vec![
            TxWrite {
                addr: slot,
                expect: Some(old),
                new,
                in_word_lock: true,
            },
            TxWrite {
                addr: slot.offset_by(8),
                expect: None,
                new: meta,
                in_word_lock: false,
            },
        ],
    };
    assert_eq!(
        coordinator.commit(&[tx(0, 0x40, 7)]).await,
        vec![TxOutcome::Committed]
    );
    // The backups' commit goes through, the primary's (the second) does not.
    commits.store(1, SeqCst);
    let out = coordinator.commit(&[tx(0x40, 0x80, 9)]).await;
    assert!(matches!(out[0], TxOutcome::Failed(_)), "{out:?}");
    // The coordinator dies: its sessions end and the primary's node aborts its part.
    drop(coordinator);
    let pool = Pool::open(small(2), connect(&nodes).await).await.unwrap();
    let read_word = |copy: usize| {
        let pool = &pool;
        async move {
            let mut b = [0u8; 8];
            pool.read_copy(slot, copy, &mut b).await.unwrap();
            u64::from_le_bytes(b)
        }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while read_word(0).await != 0x40 {
        assert!(
            std::time::Instant::now() < deadline,
            "the primary's prepared part was never aborted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(read_word(1).await, 0x80, "the backup committed");
    assert_eq!(
        pool.roll_forward_slot(slot).await.unwrap(),
        SlotRecovery::RolledForward {
            word: 0x80,
            meta: 9
        }
    );
    assert_eq!((read_word(0).await, read_word(1).await), (0x80, 0x80));
    assert_eq!(
        pool.roll_forward_slot(slot).await.unwrap(),
        SlotRecovery::Agreed
    );
}

/// A write that waits on a frozen region longer than the pool's bound fails with
/// nothing written, so it never holds up the map change that thaws the region.
#[tokio::test]
async fn a_write_to_a_region_frozen_too_long_fails_cleanly() {
    use dmc_umo::{Placement, RegionRecord, UmoError};
    let nodes = start_nodes(2, 64 << 20).await;
    let pool = Pool::open(small(2), connect(&nodes).await).await.unwrap();
    let first = pool
        .write_object(0, b"first", ValueKind::String, b"v")
        .await
        .unwrap();
    let region = first.block.addr.region();
    pool.place_regions(&[Placement {
        region,
        record: RegionRecord {
            primary: 1,
            backups: vec![2],
        },
        filling: vec![],
        frozen: true,
    }])
    .await
    .unwrap();
    let word = first.block.addr;
    let err = pool
        .write_all(&[(word, &b"xxxxxxxx"[..])])
        .await
        .unwrap_err();
    assert!(matches!(err, UmoError::Frozen(r) if r == region), "{err}");
}

/// A node that dies: every verb and RPC to it fails as a closed connection once
/// `dead` is set, or only its commit RPCs with `dead_on_commit` (it died between the
/// phases).
struct DyingNode {
    inner: Arc<dyn Transport>,
    dead: Arc<std::sync::atomic::AtomicBool>,
    dead_on_commit: Arc<std::sync::atomic::AtomicBool>,
}

impl Transport for DyingNode {
    fn node(&self) -> dmc_verbs::NodeId {
        self.inner.node()
    }
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn post<'a, 'b: 'a>(
        &'a self,
        verbs: &'a mut [dmc_verbs::Verb<'b>],
    ) -> futures::future::BoxFuture<'a, Result<(), dmc_verbs::VerbsError>> {
        if self.dead.load(std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(dmc_verbs::VerbsError::Closed)));
        }
        self.inner.post(verbs)
    }
    fn post_now(
        &self,
        verbs: &mut [dmc_verbs::Verb<'_>],
    ) -> Option<Result<(), dmc_verbs::VerbsError>> {
        if self.dead.load(std::sync::atomic::Ordering::SeqCst) {
            return Some(Err(dmc_verbs::VerbsError::Closed));
        }
        self.inner.post_now(verbs)
    }
    fn completes_inline(&self) -> bool {
        self.inner.completes_inline()
    }
    fn call(
        &self,
        req: dmc_verbs::wire::Request,
    ) -> futures::future::BoxFuture<'_, Result<dmc_verbs::wire::Response, dmc_verbs::VerbsError>>
    {
        use std::sync::atomic::Ordering::SeqCst;
        let commit = matches!(req, dmc_verbs::wire::Request::Commit(_));
        if self.dead.load(SeqCst) || (commit && self.dead_on_commit.load(SeqCst)) {
            return Box::pin(std::future::ready(Err(dmc_verbs::VerbsError::Closed)));
        }
        self.inner.call(req)
    }
}

/// Two-phase commits ride out a memory node's failure (issue 15, item 2): a backup
/// that is dead at the prepare fails the transaction, which is aborted everywhere and,
/// once the map takes the node out, prepared again on the copies left; a backup that
/// dies between the phases leaves the transaction committed on every other copy, which
/// counts as committed once the node is out. Before, both answered `Failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_phase_commits_wait_out_a_failed_node_and_go_through() {
    use dmc_umo::{Placement, RegionRecord};
    use std::sync::atomic::Ordering::SeqCst;
    let nodes = start_nodes(3, 64 << 20).await;
    let switches: Vec<_> = (0..3)
        .map(|_| {
            (
                Arc::new(std::sync::atomic::AtomicBool::new(false)),
                Arc::new(std::sync::atomic::AtomicBool::new(false)),
            )
        })
        .collect();
    let ts: Vec<Arc<dyn Transport>> = connect(&nodes)
        .await
        .into_iter()
        .zip(&switches)
        .map(|(inner, (dead, on_commit))| {
            Arc::new(DyingNode {
                inner,
                dead: dead.clone(),
                dead_on_commit: on_commit.clone(),
            }) as Arc<dyn Transport>
        })
        .collect();
    let pool = Pool::open(small(2), ts).await.unwrap();
    pool.set_failover_wait(Duration::from_secs(5));
    let word = pool.alloc(8, true).await.unwrap().addr;
    let region = word.region();
    let transports = connect(&nodes).await;
    let holders: Vec<u32> = region_copies(&transports, region, small(2).region_size)
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    // Which holder is the primary: the one a read of the word goes to (both hold 0).
    let record = RegionRecord {
        primary: holders[0],
        backups: vec![holders[1]],
    };
    pool.place_regions(&[Placement {
        region,
        record: record.clone(),
        filling: vec![],
        frozen: false,
    }])
    .await
    .unwrap();
    let backup = holders[1];
    let tx = |expect: u64, new: u64| Tx {
        shard: 5,
        epoch: 1,
        writes: vec![TxWrite {
            addr: word,
            expect: Some(expect),
            new,
            in_word_lock: false,
        }],
    };
    let primary = holders[0];
    let fail_over = move |pool: Arc<Pool>| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        pool.place_regions(&[Placement {
            region,
            record: RegionRecord {
                primary,
                backups: vec![],
            },
            filling: vec![],
            frozen: false,
        }])
        .await
        .unwrap();
    };

    // Dead at the prepare.
    switches[backup as usize - 1].0.store(true, SeqCst);
    let failover = tokio::spawn(fail_over(pool.clone()));
    assert_eq!(pool.commit(&[tx(0, 8)]).await, vec![TxOutcome::Committed]);
    failover.await.unwrap();
    let mut b = [0u8; 8];
    pool.read(word, &mut b).await.unwrap();
    assert_eq!(u64::from_le_bytes(b), 8);

    // Dead between the phases: the backup (committed first) fails, the primary commits.
    // (The backup is back first, brought up to date by hand, as a fill would.)
    switches[backup as usize - 1].0.store(false, SeqCst);
    transports[backup as usize - 1]
        .write(region, word.offset(), &8u64.to_le_bytes())
        .await
        .unwrap();
    pool.place_regions(&[Placement {
        region,
        record,
        filling: vec![],
        frozen: false,
    }])
    .await
    .unwrap();
    switches[backup as usize - 1].1.store(true, SeqCst);
    let failover = tokio::spawn(fail_over(pool.clone()));
    assert_eq!(pool.commit(&[tx(8, 16)]).await, vec![TxOutcome::Committed]);
    failover.await.unwrap();
    pool.read(word, &mut b).await.unwrap();
    assert_eq!(u64::from_le_bytes(b), 16);
}

/// A client whose lease ran out writes nothing, counters included (a paused agent that
/// wakes up after the manager moved copies without it added to a copy it no longer
/// knew, which left the copies different); a renewed lease writes again.
#[tokio::test]
async fn a_client_whose_lease_lapsed_writes_nothing() {
    use dmc_umo::UmoError;
    let pool = Pool::embedded(64 << 20, small(2)).await.unwrap();
    let word = pool.alloc(8, true).await.unwrap().addr;
    assert_eq!(pool.faa(word, 1).await.unwrap(), 0, "no lease: no deadline");
    pool.renew_write_lease(std::time::Instant::now());
    assert!(matches!(
        pool.faa(word, 1).await,
        Err(UmoError::LeaseLapsed)
    ));
    assert!(matches!(
        pool.faa_now(word, 1),
        Some(Err(UmoError::LeaseLapsed)) | None
    ));
    assert!(matches!(
        pool.write_all(&[(word, &[0u8; 8][..])]).await,
        Err(UmoError::LeaseLapsed)
    ));
    let tx = Tx {
        shard: 1,
        epoch: 1,
        writes: vec![TxWrite {
            addr: word,
            expect: None,
            new: 5,
            in_word_lock: false,
        }],
    };
    assert!(matches!(
        pool.commit(std::slice::from_ref(&tx)).await[0],
        TxOutcome::Failed(UmoError::LeaseLapsed)
    ));
    pool.renew_write_lease(std::time::Instant::now() + Duration::from_secs(60));
    assert_eq!(pool.faa(word, 1).await.unwrap(), 1);
    assert_eq!(pool.commit(&[tx]).await, vec![TxOutcome::Committed]);
}

/// Regression: the pool's usage counter was added to on every copy, one after the
/// other, so a client killed between them left the copies different for good (the
/// e2e `an_agent_killed_mid_commit…` check of identical copies failed at offset 48).
/// Now the primary's value is written to the backups at every sync.
#[tokio::test]
async fn a_usage_counter_that_diverged_on_a_backup_converges() {
    let nodes = start_nodes(2, 64 << 20).await;
    let pool = Pool::open(small(2), connect(&nodes).await).await.unwrap();
    pool.write_object(0, b"k", ValueKind::String, b"v")
        .await
        .unwrap();
    pool.sync_usage().await;
    let at = GlobalAddr::new(pool.config().super_region, dmc_umo::layout::SB_USED);
    let word = |copy: usize| {
        let pool = &pool;
        async move {
            let mut b = [0u8; 8];
            pool.read_copy(at, copy, &mut b).await.unwrap();
            u64::from_le_bytes(b)
        }
    };
    // A client died after adding to one copy only: every copy adds 100 but the first.
    for t in connect(&nodes).await.iter().skip(1) {
        let mut verbs = [dmc_verbs::Verb::Faa {
            region: at.region(),
            offset: at.offset(),
            add: 100,
            old: 0,
        }];
        t.post(&mut verbs).await.unwrap();
    }
    let (primary, backup) = (word(0).await, word(1).await);
    assert_ne!(primary, backup, "the copies were made to differ");
    // The next change of usage by any client brings the backup back.
    pool.write_object(0, b"k2", ValueKind::String, b"v")
        .await
        .unwrap();
    pool.sync_usage().await;
    assert_eq!(
        word(0).await,
        word(1).await,
        "the backup follows the primary"
    );
}
