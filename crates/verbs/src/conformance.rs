//! The conformance suite every backend must pass.
//!
//! Each check creates its own region on the node behind the transport, exercises one
//! contract of [`Transport`], and panics with a message naming the contract when the
//! backend breaks it. Backends run the whole suite with [`run_all`] from their tests
//! (`tests/conformance.rs` in this crate for `local`, `shm` and `tcp`; the two-process
//! race lives in the workspace's end-to-end tests).

use std::sync::Arc;

use crate::RegionId;
use crate::error::VerbsError;
use crate::transport::{Transport, Verb};
use crate::wire::{Request, Response, TxPrepare, TxVote, WordWrite};

const SIZE: u64 = 64 << 10;

async fn fresh(t: &dyn Transport, region: RegionId) {
    let _ = t.drop_region(region).await;
    t.create_region(region, SIZE)
        .await
        .expect("create_region on a fresh id succeeds");
}

/// READ returns what WRITE stored, at any offset and length, and fresh regions are zero.
pub async fn read_write(t: &dyn Transport, region: RegionId) {
    fresh(t, region).await;
    let mut zero = vec![1u8; 100];
    t.read(region, 1000, &mut zero).await.unwrap();
    assert!(zero.iter().all(|b| *b == 0), "a new region reads as zeros");
    let data: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    t.write(region, 3, &data).await.unwrap();
    let mut back = vec![0u8; 5000];
    t.read(region, 3, &mut back).await.unwrap();
    assert_eq!(back, data, "READ returns the bytes WRITE stored");
    t.write(region, SIZE - 4, b"tail").await.unwrap();
    let mut tail = [0u8; 4];
    t.read(region, SIZE - 4, &mut tail).await.unwrap();
    assert_eq!(&tail, b"tail", "the last bytes of a region are addressable");
}

/// CAS swaps only on a match and always returns the previous value; FAA wraps.
pub async fn atomics(t: &dyn Transport, region: RegionId) {
    fresh(t, region).await;
    assert_eq!(t.cas(region, 64, 0, 10).await.unwrap(), 0);
    assert_eq!(
        t.cas(region, 64, 0, 11).await.unwrap(),
        10,
        "failed CAS returns the word"
    );
    assert_eq!(t.cas(region, 64, 10, 12).await.unwrap(), 10);
    assert_eq!(t.faa(region, 64, 5).await.unwrap(), 12);
    assert_eq!(t.faa(region, 64, u64::MAX).await.unwrap(), 17, "FAA wraps");
    assert_eq!(t.cas(region, 64, 16, 0).await.unwrap(), 16);
    let mut word = [0u8; 8];
    t.read(region, 64, &mut word).await.unwrap();
    assert_eq!(
        u64::from_le_bytes(word),
        0,
        "atomics and READ see the same word"
    );
}

/// A posted batch runs every verb, in order, before it completes.
pub async fn batches(t: &dyn Transport, region: RegionId) {
    fresh(t, region).await;
    let mut a = [0u8; 5];
    let mut b = [0u8; 8];
    let mut verbs = [
        Verb::Write {
            region,
            offset: 0,
            data: b"hello",
        },
        Verb::Faa {
            region,
            offset: 8,
            add: 3,
            old: 99,
        },
        Verb::Cas {
            region,
            offset: 8,
            expected: 3,
            new: 7,
            old: 99,
        },
        Verb::Read {
            region,
            offset: 0,
            buf: &mut a,
        },
        Verb::Read {
            region,
            offset: 8,
            buf: &mut b,
        },
    ];
    t.post(&mut verbs).await.unwrap();
    let olds: Vec<u64> = verbs
        .iter()
        .filter_map(|v| match v {
            Verb::Faa { old, .. } | Verb::Cas { old, .. } => Some(*old),
            _ => None,
        })
        .collect();
    assert_eq!(
        olds,
        vec![0, 3],
        "atomics in a batch see earlier verbs of the batch"
    );
    assert_eq!(&a, b"hello");
    assert_eq!(u64::from_le_bytes(b), 7);
}

/// Bad verbs fail with a typed error and leave the connection usable.
pub async fn errors(t: &dyn Transport, region: RegionId) {
    fresh(t, region).await;
    let mut buf = [0u8; 16];
    assert!(matches!(
        t.read(region, SIZE - 8, &mut buf).await,
        Err(VerbsError::OutOfBounds { .. }) | Err(VerbsError::Remote(_))
    ));
    assert!(t.read(region, u64::MAX - 3, &mut buf).await.is_err());
    assert!(
        t.cas(region, 4, 0, 1).await.is_err(),
        "misaligned CAS fails"
    );
    assert!(matches!(
        t.read(region.wrapping_add(1000), 0, &mut buf).await,
        Err(VerbsError::NoSuchRegion(_))
    ));
    assert!(matches!(
        t.create_region(region, SIZE).await,
        Err(VerbsError::RegionExists(_))
    ));
    // Still serving.
    t.write(region, 0, b"ok").await.unwrap();
    // A prefetch is a hint: out of bounds, past the address space or of a region that
    // does not exist, it does nothing (no fault, no error), and the bytes stay as they
    // were.
    t.prefetch(region, 0, 64);
    t.prefetch(region, SIZE - 8, 4096);
    t.prefetch(region, u64::MAX - 3, usize::MAX);
    t.prefetch(region.wrapping_add(1000), 0, 64);
    // So is a batch of them, good and bad mixed.
    t.prefetch_many(&[
        (region, 0, 64),
        (region, u64::MAX - 3, usize::MAX),
        (region.wrapping_add(1000), 0, 64),
        (region, SIZE - 8, 4096),
    ]);
    t.read(region, 0, &mut buf[..2]).await.unwrap();
    assert_eq!(&buf[..2], b"ok");
}

/// Many tasks add to one word with FAA and race CAS loops on another: no update is lost.
pub async fn concurrent_atomics(
    t: Arc<dyn Transport>,
    region: RegionId,
    tasks: u64,
    per_task: u64,
) {
    fresh(&*t, region).await;
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let t = t.clone();
        handles.push(tokio::spawn(async move {
            for _ in 0..per_task {
                t.faa(region, 0, 1).await.unwrap();
                let mut seen = 0;
                loop {
                    let old = t.cas(region, 8, seen, seen + 1).await.unwrap();
                    if old == seen {
                        break;
                    }
                    seen = old;
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let mut words = [0u8; 16];
    t.read(region, 0, &mut words).await.unwrap();
    let faa = u64::from_le_bytes(words[..8].try_into().unwrap());
    let cas = u64::from_le_bytes(words[8..].try_into().unwrap());
    assert_eq!(faa, tasks * per_task, "FAA total is exact");
    assert_eq!(cas, tasks * per_task, "CAS-loop total is exact");
}

/// Prepare/commit/abort through the RPC channel, with epoch fencing.
pub async fn transactions(t: &dyn Transport, region: RegionId) {
    fresh(t, region).await;
    let tx = |txid, epoch, expect, new| TxPrepare {
        txid,
        shard: 11,
        epoch,
        writes: vec![WordWrite {
            region,
            offset: 128,
            expect,
            new,
            in_word_lock: false,
        }],
    };
    let votes = |r: Response| match r {
        Response::Votes(v) => v,
        other => panic!("prepare answers with votes, got {other:?}"),
    };
    let v = votes(
        t.call(Request::Prepare(vec![tx(1, 3, Some(0), 42)]))
            .await
            .unwrap(),
    );
    assert_eq!(v, vec![TxVote::Yes]);
    let v = votes(t.call(Request::Commit(vec![1])).await.unwrap());
    assert_eq!(
        v,
        vec![TxVote::Yes],
        "commit answers with one vote per transaction"
    );
    let mut w = [0u8; 8];
    t.read(region, 128, &mut w).await.unwrap();
    assert_eq!(u64::from_le_bytes(w), 42, "commit applies the write");

    let v = votes(
        t.call(Request::Prepare(vec![tx(2, 3, Some(0), 43)]))
            .await
            .unwrap(),
    );
    assert!(
        matches!(v[0], TxVote::Conflict { actual: 42, .. }),
        "validation sees the word"
    );

    t.call(Request::Fence {
        shard: 11,
        epoch: 9,
    })
    .await
    .unwrap();
    let v = votes(
        t.call(Request::Prepare(vec![tx(3, 8, None, 7)]))
            .await
            .unwrap(),
    );
    assert_eq!(
        v,
        vec![TxVote::StaleEpoch { current: 9 }],
        "stale epochs are refused"
    );
    let v = votes(t.call(Request::Commit(vec![3])).await.unwrap());
    assert_eq!(
        v,
        vec![TxVote::Failed(VerbsError::UnknownTx(3))],
        "a refused prepare cannot commit"
    );
    t.read(region, 128, &mut w).await.unwrap();
    assert_eq!(u64::from_le_bytes(w), 42, "a fenced commit changes nothing");

    let v = votes(
        t.call(Request::Prepare(vec![tx(4, 9, Some(42), 44)]))
            .await
            .unwrap(),
    );
    assert_eq!(v, vec![TxVote::Yes]);
    t.call(Request::Abort(vec![4])).await.unwrap();
    t.read(region, 128, &mut w).await.unwrap();
    assert_eq!(u64::from_le_bytes(w), 42, "abort changes nothing");
}

/// Runs the whole suite, using regions `base..base+6`.
pub async fn run_all(t: Arc<dyn Transport>, base: RegionId) {
    read_write(&*t, base).await;
    atomics(&*t, base + 1).await;
    batches(&*t, base + 2).await;
    errors(&*t, base + 3).await;
    concurrent_atomics(t.clone(), base + 4, 8, 500).await;
    transactions(&*t, base + 5).await;
}
