//! Readers racing writers and frees never return another key's bytes or a torn value.
//!
//! Blocks are reused with no grace period at all here, the harshest setting: every
//! free is immediately available to the next write, so a reader holding a stale
//! pointer regularly lands on reused memory. Values carry their key and a version and
//! are self-describing, so any foreign or torn bytes are caught.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::Backend;
use dmc_dht::SetOptions;

const KEYS: u32 = 64;

fn value_for(key: u32, version: u64) -> Vec<u8> {
    // key, version, then a length and a fill derived from both.
    let len = 16 + ((key as u64 * 7 + version * 13) % 600) as usize;
    let mut v = Vec::with_capacity(len + 12);
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend((0..len).map(|i| (key as u64 ^ version ^ i as u64) as u8));
    v
}

fn check(key: u32, v: &[u8]) {
    assert!(v.len() >= 12, "short value for key {key}");
    let k = u32::from_le_bytes(v[..4].try_into().unwrap());
    let version = u64::from_le_bytes(v[4..12].try_into().unwrap());
    assert_eq!(k, key, "read another key's value");
    assert_eq!(
        v,
        &value_for(key, version)[..],
        "torn value for key {key} version {version}"
    );
}

async fn race(backend: Backend) {
    let h = common::open_default(backend).await;
    let dht = h.dht.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    // Writers go on until the readers have read enough alongside them (however the
    // two cores are shared: a fixed number of writes once ended before the readers
    // got going, on a loaded CI machine).
    for w in 0..2u64 {
        let (dht, reads) = (dht.clone(), reads.clone());
        tasks.push(tokio::spawn(async move {
            for version in 0u64.. {
                if version >= 3000 && reads.load(Ordering::Relaxed) > 1000 {
                    break;
                }
                // The local backend completes inline: let the readers in.
                if version % 16 == 0 {
                    tokio::task::yield_now().await;
                }
                let key = ((version * 7 + w * 13) % KEYS as u64) as u32;
                let name = format!("race:{key}");
                if version % 5 == 4 {
                    dht.delete(0, name.as_bytes()).await.unwrap();
                } else {
                    dht.set(
                        0,
                        name.as_bytes(),
                        &value_for(key, version * 2 + w),
                        SetOptions::default(),
                    )
                    .await
                    .unwrap();
                }
            }
        }));
    }
    for r in 0..3u32 {
        let (dht, stop, reads) = (dht.clone(), stop.clone(), reads.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = r;
            while !stop.load(Ordering::Relaxed) {
                let key = i % KEYS;
                if let Some(e) = dht.get(0, format!("race:{key}").as_bytes()).await.unwrap() {
                    check(key, &e.value);
                }
                reads.fetch_add(1, Ordering::Relaxed);
                i = i.wrapping_mul(31).wrapping_add(17);
                tokio::task::yield_now().await;
            }
        }));
    }
    for t in tasks.drain(..2) {
        t.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        reads.load(Ordering::Relaxed) > 1000,
        "readers ran alongside the writers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_readers_never_see_foreign_or_torn_values() {
    race(Backend::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shm_readers_never_see_foreign_or_torn_values() {
    race(Backend::Shm).await;
}
