//! The takeover's metadata repair (`Dht::recover_locked`) races readers: any agent's
//! hit writes a key's metadata word on every copy, the primary first. A repair that
//! read the copies, then wrote the primary's value as read to a differing backup,
//! undid a hit that landed in between, on the backup only and for good (a CI run's
//! `manager_restart.rs` waited 30 s for identical copies: a backup's clock byte
//! behind). Fail point `dht-meta-repair-gap` holds the repair between its reads and
//! its write while the test lands such a hit.
//!
//! Its own test binary: fail points are process-wide.
#![cfg(feature = "failpoints")]

mod common;

use std::sync::{Arc, Barrier};

use common::{client, two_nodes};
use dmc_dht::SetOptions;
use dmc_dht::owner::Lease;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hit_between_the_repairs_reads_and_its_write_is_kept() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = two_nodes(&dirs).await;
    let a = client(&nodes, 1, 0..16384, 0).await;
    let b = client(&nodes, 2, 0..0, 0).await;
    a.set(0, b"k", b"v", SetOptions::default()).await.unwrap();
    let meta = a.get(0, b"k").await.unwrap().expect("k").slot.meta_addr();
    let pool = a.pool();
    let word = |copy: usize| {
        let pool = pool.clone();
        async move {
            let mut buf = [0u8; 8];
            pool.read_copy(meta, copy, &mut buf).await.unwrap();
            u64::from_le_bytes(buf)
        }
    };
    // A writer's add reached the primary only: the repair has something to do.
    let added = word(0).await.wrapping_add(1 << 56);
    pool.write_copy(meta, 0, &added.to_le_bytes())
        .await
        .unwrap();

    let reached = Arc::new(Barrier::new(2));
    let go = Arc::new(Barrier::new(2));
    {
        let (reached, go) = (reached.clone(), go.clone());
        fail::cfg_callback("dht-meta-repair-gap", move || {
            reached.wait();
            go.wait();
        })
        .unwrap();
    }
    b.pool().fence(0, 2).await.unwrap();
    a.ownership().release(0..16384).await;
    let recovering = tokio::spawn({
        let b = b.clone();
        async move { b.recover_locked(0..16384).await.unwrap() }
    });
    tokio::task::block_in_place(|| reached.wait());
    // B's hit lands now: its new clock bytes reach the primary, then the backup.
    let hit = added ^ (0xffff << 40);
    for copy in 0..2 {
        b.pool()
            .write_copy(meta, copy, &hit.to_le_bytes())
            .await
            .unwrap();
    }
    tokio::task::block_in_place(|| go.wait());
    recovering.await.unwrap();
    fail::remove("dht-meta-repair-gap");
    b.ownership()
        .assign(0..16384, Some(Lease { shard: 0, epoch: 2 }));
    assert_eq!(word(0).await, hit);
    assert_eq!(word(1).await, hit, "the repair undid the hit on the backup");
}
