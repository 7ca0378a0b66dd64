//! The takeover's metadata repair (`Dht::recover_locked`, `table/meta_repair.rs`) races
//! readers and a fenced previous owner: any agent's hit writes a key's metadata word on
//! every copy (a backup may take it before the primary), and a prepared two-phase
//! commit may still land, backups first. A repair that read the copies and then wrote
//! the primary's word as read to a differing backup undid a hit that landed in
//! between, on the backup only and for good (a CI run's `manager_restart.rs` waited
//! 30 s for identical copies: a backup's clock byte behind). Fail point
//! `dht-meta-repair-gap` holds the repair between its first reads and its writes.
//!
//! Its own test binary: fail points are process-wide (the tests here take turns).
#![cfg(feature = "failpoints")]

mod common;

use std::sync::{Arc, Barrier};

use common::{client, two_nodes};
use dmc_dht::owner::Lease;
use dmc_dht::{Dht, SetOptions};
use dmc_umo::GlobalAddr;

/// The fail point is process-wide: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Two agents on two nodes (`r = 2`): `a` wrote key `k` and owns every slot; `b` will
/// take them over. Returns them and the address of `k`'s slot.
async fn key_and_heir(
    dirs: &[tempfile::TempDir],
) -> (
    Arc<Dht>,
    Arc<Dht>,
    GlobalAddr,
    Vec<dmc_verbs::server::LoopbackNode>,
) {
    let nodes = two_nodes(dirs).await;
    let a = client(&nodes, 1, 0..16384, 0).await;
    let b = client(&nodes, 2, 0..0, 0).await;
    a.set(0, b"k", b"v", SetOptions::default()).await.unwrap();
    let meta = a.get(0, b"k").await.unwrap().expect("k").slot.meta_addr();
    (a, b, meta, nodes)
}

async fn word(d: &Dht, addr: GlobalAddr, copy: usize) -> u64 {
    let mut buf = [0u8; 8];
    d.pool().read_copy(addr, copy, &mut buf).await.unwrap();
    u64::from_le_bytes(buf)
}

async fn write(d: &Dht, addr: GlobalAddr, copy: usize, value: u64) {
    d.pool()
        .write_copy(addr, copy, &value.to_le_bytes())
        .await
        .unwrap();
}

/// `b` takes every slot over from `a`; `during` runs while the repair is held between
/// its first reads and its writes.
async fn take_over(a: &Dht, b: &Arc<Dht>, during: impl AsyncFnOnce()) {
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
    during().await;
    tokio::task::block_in_place(|| go.wait());
    recovering.await.unwrap();
    fail::remove("dht-meta-repair-gap");
    b.ownership()
        .assign(0..16384, Some(Lease { shard: 0, epoch: 2 }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hit_between_the_repairs_reads_and_its_write_is_kept() {
    let _one = SERIAL.lock().await;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let (a, b, meta, _nodes) = key_and_heir(&dirs).await;
    // A writer's add reached the primary only: the repair has something to do.
    let added = word(&a, meta, 0).await.wrapping_add(1 << 56);
    write(&a, meta, 0, added).await;
    // B's hit lands meanwhile: its new clock reaches both copies.
    let hit = added ^ (0xffff << 40);
    take_over(&a, &b, async || {
        write(&b, meta, 0, hit).await;
        write(&b, meta, 1, hit).await;
    })
    .await;
    assert_eq!(word(&a, meta, 0).await, hit);
    assert_eq!(
        word(&a, meta, 1).await,
        hit,
        "the repair undid the hit on the backup"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hit_that_reached_the_backup_first_is_kept() {
    let _one = SERIAL.lock().await;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let (a, b, meta, _nodes) = key_and_heir(&dirs).await;
    // A hit's clock write (posted to both copies at once) reached the backup first.
    let before = word(&a, meta, 0).await;
    let clock = ((before >> 40) as u16).wrapping_add(3);
    let hit = (before & !(0xffff << 40)) | ((clock as u64) << 40);
    write(&a, meta, 1, hit).await;
    take_over(&a, &b, async || {}).await;
    // ... and reaches the primary after the repair.
    write(&a, meta, 0, hit).await;
    assert_eq!(word(&a, meta, 0).await, hit);
    assert_eq!(
        word(&a, meta, 1).await,
        hit,
        "the repair set the backup's clock back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_landing_during_the_repair_is_left_to_finish() {
    let _one = SERIAL.lock().await;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let (a, b, meta, _nodes) = key_and_heir(&dirs).await;
    let slot = GlobalAddr::new(meta.region(), meta.offset() - 8);
    let added = word(&a, meta, 0).await.wrapping_add(1 << 56);
    write(&a, meta, 0, added).await;
    // The fenced owner's prepared two-phase commit lands on the backup (slot word and
    // metadata, a new expiry) during the repair, and on the primary after it.
    let new_word = (word(&a, slot, 0).await ^ 0x100) & !1;
    let new_meta = added ^ 0xfff;
    take_over(&a, &b, async || {
        write(&a, slot, 1, new_word).await;
        write(&a, meta, 1, new_meta).await;
    })
    .await;
    write(&a, slot, 0, new_word).await;
    write(&a, meta, 0, new_meta).await;
    assert_eq!(
        word(&a, meta, 1).await,
        new_meta,
        "the repair undid the commit's metadata"
    );
}
