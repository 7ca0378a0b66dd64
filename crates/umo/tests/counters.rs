//! Batched advisory counters (the hash table's hit metadata): a batch of additions
//! costs at most two posts per memory node (the FAAs on the primaries, the sums written
//! to the backups), not two per counter, and every copy ends with the same sums.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dmc_umo::object::ValueKind;
use dmc_umo::{GlobalAddr, Pool, PoolConfig};
use dmc_verbs::wire::{Request, Response};
use dmc_verbs::{
    LocalTransport, NodeConfig, NodeCore, NodeId, RegionId, Storage, Transport, Verb, VerbsError,
};
use futures::future::BoxFuture;

/// An in-process node that counts the posts it is given.
struct Counting {
    inner: LocalTransport,
    posts: Arc<AtomicU64>,
}

impl Transport for Counting {
    fn node(&self) -> NodeId {
        self.inner.node()
    }

    fn backend(&self) -> &'static str {
        "counting"
    }

    fn post<'a, 'b: 'a>(
        &'a self,
        verbs: &'a mut [Verb<'b>],
    ) -> BoxFuture<'a, Result<(), VerbsError>> {
        self.posts.fetch_add(1, Ordering::Relaxed);
        self.inner.post(verbs)
    }

    fn completes_inline(&self) -> bool {
        self.inner.completes_inline()
    }

    fn post_now(&self, verbs: &mut [Verb<'_>]) -> Option<Result<(), VerbsError>> {
        self.posts.fetch_add(1, Ordering::Relaxed);
        self.inner.post_now(verbs)
    }

    fn call(&self, req: Request) -> BoxFuture<'_, Result<Response, VerbsError>> {
        self.inner.call(req)
    }

    fn forget_region(&self, region: RegionId) {
        self.inner.forget_region(region)
    }
}

/// A pool of two in-process nodes (`r = 2`) whose posts are counted in `posts`.
async fn counted_pool(posts: &Arc<AtomicU64>) -> Arc<Pool> {
    let nodes: Vec<Arc<dyn Transport>> = (1..=2)
        .map(|id| {
            let core = NodeCore::open(NodeConfig {
                id,
                capacity: 64 << 20,
                storage: Storage::Heap,
                secret: None,
            })
            .expect("a node");
            Arc::new(Counting {
                inner: LocalTransport::new(core),
                posts: posts.clone(),
            }) as Arc<dyn Transport>
        })
        .collect();
    let config = PoolConfig {
        replicas: 2,
        region_size: 4 << 20,
        segment_size: 1 << 20,
        ..PoolConfig::default()
    };
    Pool::open(config, nodes).await.expect("a pool")
}

/// A counted pool and a word inside an object written to it.
async fn pool_and_word() -> (Arc<Pool>, GlobalAddr) {
    let pool = counted_pool(&Arc::new(AtomicU64::new(0))).await;
    let obj = pool
        .write_object(0, b"k", ValueKind::String, &[0u8; 64])
        .await
        .expect("written");
    let word = obj.block.addr.offset_by(32);
    (pool, word)
}

async fn word_of(pool: &Pool, addr: GlobalAddr, copy: usize) -> u64 {
    let mut b = [0u8; 8];
    pool.read_copy(addr, copy, &mut b).await.expect("read");
    u64::from_le_bytes(b)
}

/// A single-key commit writes a slot's metadata word to the backups before the
/// primary. A hit's LFU addition on the primary in between wrote the primary's whole
/// old word to the backup, undoing the commit's other fields there (its expiry) for
/// good once the commit reached the primary.
#[tokio::test]
async fn an_addition_to_a_field_writes_a_backup_only_the_bytes_it_changes() {
    let (pool, word) = pool_and_word().await;
    let top = |w: u64| w >> 56;
    let low = |w: u64| w & ((1 << 56) - 1);
    // The commit's new word reaches the backup; its primary still holds the old one.
    let committed = 0x0011_2233_4455_6677u64;
    pool.write_copy(word, 1, &committed.to_le_bytes())
        .await
        .expect("written");
    pool.faa_field_now(word, 1 << 56)
        .expect("inline")
        .expect("added");
    pool.faa_fields_many(&[(word, 1 << 56)])
        .await
        .expect("added");
    let (primary, backup) = (word_of(&pool, word, 0).await, word_of(&pool, word, 1).await);
    assert_eq!(low(backup), low(committed), "the backup's other fields");
    assert_eq!(top(backup), top(primary), "the counter byte");
    assert_eq!(top(primary), 2);
}

/// A whole-word counter (the pool's usage) is written whole to its backups: a backup
/// that missed a sum is brought level by the next addition, whatever its low bits.
#[tokio::test]
async fn a_whole_word_counter_brings_a_backup_that_missed_a_sum_level() {
    let (pool, word) = pool_and_word().await;
    for (missed, add) in [(100u64, 1u64 << 8), (7, 1 << 16)] {
        for inline in [false, true] {
            let behind = word_of(&pool, word, 0).await.wrapping_sub(missed);
            pool.write_copy(word, 1, &behind.to_le_bytes())
                .await
                .expect("written");
            if inline {
                pool.faa_now(word, add).expect("inline").expect("added");
            } else {
                pool.faa_mirrored(word, add).await.expect("added");
            }
            assert_eq!(
                word_of(&pool, word, 1).await,
                word_of(&pool, word, 0).await,
                "an addition of {add:#x}, inline {inline}"
            );
        }
    }
}

#[tokio::test]
async fn a_batch_of_counters_costs_two_posts_per_node() {
    let posts = Arc::new(AtomicU64::new(0));
    let pool = counted_pool(&posts).await;
    // Words inside 40 objects, spread over regions as the allocator places them.
    let mut words: Vec<GlobalAddr> = Vec::new();
    for i in 0..40u32 {
        let obj = pool
            .write_object(0, format!("k{i}").as_bytes(), ValueKind::String, &[0u8; 64])
            .await
            .expect("written");
        words.push(obj.block.addr.offset_by(32));
    }
    let mut before = Vec::new();
    for w in &words {
        before.push(word_of(&pool, *w, 0).await);
    }
    let adds: Vec<(GlobalAddr, u64)> = words
        .iter()
        .enumerate()
        .map(|(i, w)| (*w, i as u64 + 1))
        .collect();
    let start = posts.load(Ordering::Relaxed);
    pool.faa_fields_many(&adds).await.expect("added");
    pool.faa_fields_many(&adds).await.expect("added");
    let used = posts.load(Ordering::Relaxed) - start;
    assert!(used <= 8, "two batches of 40 counters took {used} posts");
    for (i, w) in words.iter().enumerate() {
        for copy in 0..2 {
            assert_eq!(
                word_of(&pool, *w, copy).await,
                before[i].wrapping_add(2 * (i as u64 + 1)),
                "counter {i} on copy {copy}"
            );
        }
    }
}
