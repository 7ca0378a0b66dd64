//! SWAPDB as a table operation: two logical databases trade their keys in one
//! transaction on the root, every client of the pool sees it after reloading the map,
//! and nothing outside the swapped pair changes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Backend;
use dmc_dht::{Dht, DhtConfig, Ownership, SetOptions, SystemClock};

#[tokio::test]
async fn swapped_databases_trade_keys_for_every_client() {
    let h = common::open(
        Backend::Local,
        DhtConfig::default(),
        Arc::new(SystemClock),
        Duration::from_millis(50),
    )
    .await;
    let dht = &h.dht;
    for (db, key) in [(0u8, "zero"), (1, "one"), (2, "two")] {
        dht.set(db, key.as_bytes(), b"v", SetOptions::default())
            .await
            .unwrap();
    }
    let has = |dht: Arc<Dht>, logical: u8, key: &'static str| async move {
        dht.get(dht.physical_db(logical), key.as_bytes())
            .await
            .unwrap()
            .is_some()
    };
    dht.swap_dbs(0, 1).await.unwrap();
    assert!(has(dht.clone(), 0, "one").await && has(dht.clone(), 1, "zero").await);
    assert!(!has(dht.clone(), 0, "zero").await);
    assert!(
        has(dht.clone(), 2, "two").await,
        "other databases are untouched"
    );
    // A second client of the same pool reads the map from the table root.
    let other = Dht::open(
        dht.pool().clone(),
        DhtConfig::default(),
        Arc::new(SystemClock),
        Ownership::all(0, 1),
    )
    .await
    .unwrap();
    assert_eq!((other.physical_db(0), other.physical_db(1)), (1, 0));
    // Swapping back, and chains of swaps, compose.
    dht.swap_dbs(1, 2).await.unwrap();
    dht.swap_dbs(0, 1).await.unwrap();
    assert!(has(dht.clone(), 0, "two").await);
    assert!(has(dht.clone(), 1, "one").await);
    assert!(has(dht.clone(), 2, "zero").await);
    assert!(dht.swap_dbs(0, 40).await.is_err(), "beyond the map");
}
