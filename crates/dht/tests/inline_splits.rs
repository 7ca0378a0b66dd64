//! Inline writes (`set_now`) racing splits of their slot's subtables. A split copies a
//! subtable's slots into new ones while the slot's rebuild gate is closed, so no
//! inline write changes a subtable being copied; a write the gate turns away goes to
//! the awaited path, which waits for the split. With a gate that lets writes in, the
//! split's validated commit notices each write and fails, and under a steady stream of
//! them the insert that needed the split gives up (`Contention`): this test then fails.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::Backend;
use dmc_dht::{Dht, SetOptions};

/// Keys written over and over inline while the others are inserted.
const OVERWRITTEN: usize = 64;
/// Keys inserted into the same hash slot, enough for many splits.
const INSERTED: usize = 12_000;

fn overwritten(k: usize) -> Vec<u8> {
    format!("{{split}}o{k}").into_bytes()
}

/// One SET, inline when the table takes it so, else awaited; whether it went inline.
async fn set(dht: &Dht, key: &[u8], value: &[u8]) -> bool {
    let opts = SetOptions::default();
    match dht.set_now(0, key, value, opts) {
        Some(done) => {
            done.expect("inline set");
            true
        }
        None => {
            dht.set(0, key, value, opts).await.expect("awaited set");
            false
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_writes_racing_splits_lose_nothing() {
    for backend in [Backend::Local, Backend::Shm] {
        let h = common::open_default(backend).await;
        // The slot's partition exists before the race (creating it awaits).
        for k in 0..OVERWRITTEN {
            set(&h.dht, &overwritten(k), b"0").await;
        }
        let splits_before = h.dht.stats().splits;
        let inserting = Arc::new(AtomicBool::new(true));

        let overwriter = {
            let (dht, inserting) = (h.dht.clone(), inserting.clone());
            tokio::spawn(async move {
                let (mut round, mut inline) = (0u64, 0u64);
                while inserting.load(Ordering::Acquire) {
                    round += 1;
                    let value = round.to_string();
                    for k in 0..OVERWRITTEN {
                        inline += u64::from(set(&dht, &overwritten(k), value.as_bytes()).await);
                    }
                    tokio::task::yield_now().await;
                }
                (round, inline)
            })
        };
        let inserter = {
            let (dht, inserting) = (h.dht.clone(), inserting.clone());
            tokio::spawn(async move {
                for i in 0..INSERTED {
                    let key = format!("{{split}}n{i}");
                    dht.set(0, key.as_bytes(), key.as_bytes(), SetOptions::default())
                        .await
                        .expect("insert");
                }
                inserting.store(false, Ordering::Release);
            })
        };
        inserter.await.expect("inserter");
        let (rounds, inline) = overwriter.await.expect("overwriter");

        let splits = h.dht.stats().splits - splits_before;
        assert!(splits > 0, "{backend:?}: the inserts split the slot");
        assert!(inline > 0, "{backend:?}: some overwrites went inline");
        let last = rounds.to_string();
        for k in 0..OVERWRITTEN {
            let got = h.dht.get(0, &overwritten(k)).await.expect("get");
            assert_eq!(
                got.map(|e| e.value.to_vec()).as_deref(),
                Some(last.as_bytes()),
                "{backend:?}: key {k} after {rounds} rounds and {splits} splits"
            );
        }
        for i in (0..INSERTED).step_by(97) {
            let key = format!("{{split}}n{i}");
            assert!(
                h.dht.get(0, key.as_bytes()).await.expect("get").is_some(),
                "{backend:?}: inserted {key}"
            );
        }
        assert_eq!(
            h.dht.key_count_db(0),
            (OVERWRITTEN + INSERTED) as i64,
            "{backend:?}"
        );
    }
}
