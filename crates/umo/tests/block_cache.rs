//! The per-thread block caches in front of the allocator: threads that allocate inline
//! at the same time never get the same block, and what the caches hold is given back
//! (statistics count only blocks handed out).

use std::collections::HashSet;
use std::sync::Arc;

mod support;

use dmc_umo::Pool;
use support::small;

#[test]
fn threads_allocating_inline_never_share_a_block_and_caches_give_back() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pool = Arc::new(rt.block_on(Pool::embedded(64 << 20, small(1))).unwrap());
    // The first block claims a segment, which only the awaited path does.
    assert!(pool.alloc_now(100, false).is_none());
    let first = rt.block_on(pool.alloc(100, false)).unwrap();

    const PER_THREAD: usize = 500;
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                (0..PER_THREAD)
                    .map(|_| {
                        pool.alloc_now(100, false)
                            .expect("the segment has room")
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut blocks: Vec<_> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    blocks.push(first);
    let distinct: HashSet<_> = blocks.iter().map(|b| b.addr).collect();
    assert_eq!(distinct.len(), blocks.len(), "a block was handed out twice");

    // The threads' caches still hold a few blocks each: statistics give them back.
    let stats = pool.stats().alloc;
    assert_eq!(stats.live_blocks, blocks.len() as u64);
    assert_eq!(
        stats.allocated,
        blocks.iter().map(|b| b.size() as u64).sum::<u64>()
    );

    // Freed (into this thread's shard), then flushed: all in limbo.
    for b in blocks {
        pool.free(b);
    }
    pool.flush_block_caches();
    let stats = pool.stats().alloc;
    assert_eq!(stats.live(), 0);
    assert_eq!(stats.limbo_blocks, 2 * PER_THREAD as u64 + 1);
}
