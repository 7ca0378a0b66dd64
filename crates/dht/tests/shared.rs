//! Two clients (two agents) share one pool over `shm` memory nodes with `r = 2`, each
//! owning half of the hash slots, writing concurrently: every key reads back from both,
//! and no write fails. (This caught a client handing out further blocks of a segment
//! whose claim was still in flight and then lost to the other client.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{client, instance_client, two_nodes};
use dmc_dht::hash::key_slot;
use dmc_dht::owner::Lease;
use dmc_dht::{Dht, SetOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_owners_write_one_pool_concurrently() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = two_nodes(&dirs).await;
    let a = client(&nodes, 1, 0..8192, 0).await;
    let b = client(&nodes, 2, 8192..16384, 1).await;
    let keys: Vec<String> = (0..20_000).map(|i| format!("key:{i:012}")).collect();
    let mut tasks = Vec::new();
    for (w, chunk) in keys.chunks(keys.len() / 16).enumerate() {
        let (a, b) = (a.clone(), b.clone());
        let chunk: Vec<String> = chunk.to_vec();
        tasks.push(tokio::spawn(async move {
            for k in &chunk {
                let owner = if key_slot(k.as_bytes()) < 8192 {
                    &a
                } else {
                    &b
                };
                owner
                    .set(
                        0,
                        k.as_bytes(),
                        format!("v-{k}-{w}").as_bytes(),
                        SetOptions::default(),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("set {k}: {e}"));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for (i, k) in keys.iter().enumerate() {
        let w = i / (keys.len() / 16);
        let want = format!("v-{k}-{w}");
        for c in [&a, &b] {
            let got = c.get(0, k.as_bytes()).await.unwrap();
            assert_eq!(
                got.map(|e| e.value),
                Some(want.clone().into()),
                "{k} from client"
            );
        }
    }
}

/// Two cache instances on the same memory nodes, each with its own superblock region:
/// the same key holds a different value in each, each grows by regions of its own, and
/// one's shard epochs do not fence the other's writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_the_nodes_but_not_their_keys() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = two_nodes(&dirs).await;
    let a = instance_client(&nodes, 1, 0..16384, 0, 1, 5).await;
    let b = instance_client(&nodes, 2, 0..16384, 0, 9, 1).await;
    // Instance a's shard 0 at epoch 5 on every node; b writes its shard 0 at epoch 1.
    a.pool().fence(0, 5).await.unwrap();
    let value = |who: &str, i: usize| format!("{who}-{i}-{}", "x".repeat(900));
    // About 20 MB each: more than one 16 MB region.
    for i in 0..20_000 {
        let k = format!("key:{i}");
        for (who, c) in [("a", &a), ("b", &b)] {
            c.set(
                0,
                k.as_bytes(),
                value(who, i).as_bytes(),
                SetOptions::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{who}: set {k}: {e}"));
        }
    }
    for i in (0..20_000).step_by(7) {
        let k = format!("key:{i}");
        for (who, c) in [("a", &a), ("b", &b)] {
            let got = c.get(0, k.as_bytes()).await.unwrap().map(|e| e.value);
            assert_eq!(got, Some(value(who, i).into()), "{k} in instance {who}");
        }
    }
    let regions = |c: &Arc<Dht>| -> Vec<u16> {
        c.pool()
            .used_by_region()
            .into_iter()
            .filter(|(_, used)| *used > 0)
            .map(|(r, _)| r)
            .collect()
    };
    let (ra, rb) = (regions(&a), regions(&b));
    assert!(ra.len() > 1 && rb.len() > 1, "each grew: {ra:?} {rb:?}");
    assert!(ra.contains(&1) && rb.contains(&9), "{ra:?} {rb:?}");
    assert!(
        ra.iter().all(|r| !rb.contains(r)),
        "no region is shared: {ra:?} {rb:?}"
    );
}

/// Fences racing a writer's commits (what a rescale does to the agent losing slots):
/// every write either applies or is refused as no longer owned, never lost in between
/// (a commit of a transaction prepared before the fence used to find it dropped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_racing_commits_leave_no_write_in_doubt() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = two_nodes(&dirs).await;
    let a = client(&nodes, 1, 0..16384, 0).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..8 {
        let (a, stop) = (a.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let (mut ok, mut refused) = (0u64, 0u64);
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let k = format!("w{w}:{}", i % 500);
                match a
                    .set(0, k.as_bytes(), b"value", SetOptions::default())
                    .await
                {
                    Ok(_) => ok += 1,
                    Err(dmc_dht::DhtError::NotOwner(_)) => refused += 1,
                    Err(e) => panic!("set {k}: {e}"),
                }
            }
            (ok, refused)
        }));
    }
    // Fence the shard again and again, re-owning it under each new epoch, as a
    // rescale back and forth would.
    for epoch in 2..200u64 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        a.pool().fence(0, epoch).await.unwrap();
        a.ownership()
            .assign(0..16384, Some(Lease { shard: 0, epoch }));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut refused) = (0, 0);
    for w in writers {
        let (o, r) = w.await.unwrap();
        ok += o;
        refused += r;
    }
    assert!(ok > 0, "no write applied ({refused} refused)");
    eprintln!("{ok} writes applied, {refused} refused as fenced");
}

/// A shard changes owner in the middle of one-sided single-key writes (issue 14): the
/// old owner gives the slots up with [`Ownership::release`], which waits for its writes
/// in flight, and only then does the new owner fence and write. No acknowledged write
/// is lost, and no write of the old owner lands after the new owner's first.
/// The fail point stretches every write's window between its lease check and its
/// commit, so the handoff lands inside writes in flight (built with the `failpoints`
/// feature, as `cargo test --workspace` builds it).
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_change_mid_one_sided_writes_loses_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    const KEYS: u64 = 64;
    const WRITERS: u64 = 4;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = two_nodes(&dirs).await;
    let a = client(&nodes, 1, 0..16384, 0).await;
    let b = client(&nodes, 2, 0..0, 0).await;
    let stop = Arc::new(AtomicBool::new(false));
    // Each old-owner writer owns the keys `k ≡ w (mod WRITERS)`, so per key its
    // acknowledged versions are ordered; it returns the last acknowledged version of
    // each key and when its last acknowledgement came.
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (a, stop) = (a.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut last = std::collections::HashMap::new();
            let mut last_ack = None;
            let mut version = 0u64;
            while !stop.load(Ordering::Relaxed) {
                version += 1;
                let k = w + WRITERS * (version % (KEYS / WRITERS));
                let value = format!("A:{version}");
                match a
                    .set(
                        0,
                        format!("k{k}").as_bytes(),
                        value.as_bytes(),
                        SetOptions::default(),
                    )
                    .await
                {
                    Ok(_) => {
                        last.insert(k, value);
                        last_ack = Some(Instant::now());
                    }
                    Err(dmc_dht::DhtError::NotOwner(_)) => break,
                    Err(e) => panic!("old owner's set of k{k}: {e}"),
                }
            }
            (last, last_ack)
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    fail::cfg("dht-one-sided-commit", "return(20)").unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The handoff, while the writers are in full flight (the fence is for two-phase
    // commits; one-sided writes are kept apart by the release alone).
    b.pool().fence(0, 2).await.unwrap();
    a.ownership().release(0..16384).await;
    b.ownership()
        .assign(0..16384, Some(Lease { shard: 0, epoch: 2 }));
    fail::remove("dht-one-sided-commit");
    let new_owner_first_write = Instant::now();
    // The new owner writes the even keys.
    for k in (0..KEYS).step_by(2) {
        b.set(0, format!("k{k}").as_bytes(), b"B", SetOptions::default())
            .await
            .unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let mut acked = std::collections::HashMap::new();
    for w in writers {
        let (last, last_ack) = w.await.unwrap();
        if let Some(t) = last_ack {
            assert!(
                t <= new_owner_first_write,
                "the old owner acknowledged a write after the new owner's first"
            );
        }
        acked.extend(last);
    }
    assert!(
        !acked.is_empty(),
        "the old owner wrote nothing before the handoff"
    );
    for k in 0..KEYS {
        let want = if k % 2 == 0 {
            Some("B".to_string())
        } else {
            acked.get(&k).cloned()
        };
        for (who, c) in [("old owner", &a), ("new owner", &b)] {
            let got = c
                .get(0, format!("k{k}").as_bytes())
                .await
                .unwrap()
                .map(|e| String::from_utf8(e.value.to_vec()).unwrap());
            assert_eq!(got, want, "k{k} as the {who} reads it");
        }
    }
}

/// The group committer never waits behind one slow batch (issue 14, item 3): a batch
/// held at the fail point does not stop a later batch of another shard from
/// committing, and itself commits once released.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_commit_batch_holds_up_only_its_own_transactions() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = two_nodes(&dirs).await;
    let a = client(&nodes, 1, 0..8192, 0).await;
    a.ownership()
        .assign(8192..16384, Some(Lease { shard: 1, epoch: 1 }));
    // Keys by hash tag: `{x}` keys all in one hash slot, chosen in each shard's half.
    let tag_in = |half: std::ops::Range<u16>| {
        (0..10_000u32)
            .map(|i| format!("{{t{i}}}"))
            .find(|t| half.contains(&key_slot(t.as_bytes())))
            .unwrap()
    };
    let (slow, fast) = (tag_in(0..8192), tag_in(8192..16384));
    // Both hash slots get their table before the hold, so only the MSETs commit below.
    for t in [&slow, &fast] {
        a.set(
            0,
            format!("{t}:init").as_bytes(),
            b"x",
            SetOptions::default(),
        )
        .await
        .unwrap();
    }
    fail::cfg("dht-commit-batch-hold", "return(0)").unwrap();
    let held = {
        let (a, slow) = (a.clone(), slow.clone());
        tokio::spawn(async move {
            let (k1, k2) = (format!("{slow}:1"), format!("{slow}:2"));
            a.set_many(0, &[(k1.as_bytes(), b"v"), (k2.as_bytes(), b"v")], false)
                .await
        })
    };
    // Wait until the slow MSET's batch is in flight (and held) on its own.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while a.stats().commit_batches_in_flight == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the batch never started"
        );
        tokio::task::yield_now().await;
    }
    // The other shard's MSET commits while the first is held (a committer that
    // waited behind the held batch would never answer: bounded, not timed).
    let (k1, k2) = (format!("{fast}:1"), format!("{fast}:2"));
    let pairs: [(&[u8], &[u8]); 2] = [(k1.as_bytes(), b"v"), (k2.as_bytes(), b"v")];
    let fast_mset = a.set_many(0, &pairs, false);
    let done = tokio::time::timeout(Duration::from_secs(30), fast_mset)
        .await
        .expect("the second batch waited behind the held one");
    assert!(done.unwrap());
    assert!(!held.is_finished(), "the held batch was not held");
    fail::remove("dht-commit-batch-hold");
    assert!(held.await.unwrap().unwrap());
    for k in [format!("{slow}:1"), format!("{fast}:2")] {
        assert!(a.get(0, k.as_bytes()).await.unwrap().is_some(), "{k}");
    }
}
