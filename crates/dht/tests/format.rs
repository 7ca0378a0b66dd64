//! The table's format version: a table of the previous version is upgraded when this
//! build opens it (so builds that cannot read slot groups or history words refuse it
//! from then on), and a table newer than this build is refused.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Backend;
use dmc_dht::{Dht, DhtConfig, Ownership, SystemClock, layout};
use dmc_umo::GlobalAddr;

async fn version_word(dht: &Dht) -> (GlobalAddr, u64) {
    let root = GlobalAddr::from_bits(dht.pool().root().await.unwrap());
    let mut word = [0u8; 8];
    dht.pool().read(root.offset_by(8), &mut word).await.unwrap();
    (root.offset_by(8), u64::from_le_bytes(word))
}

async fn set_version(dht: &Dht, version: u32) {
    let (at, word) = version_word(dht).await;
    let new = (word & !0xffff_ffff) | u64::from(version);
    dht.pool()
        .write_all(&[(at, &new.to_le_bytes())])
        .await
        .unwrap();
}

async fn reopen(dht: &Dht) -> Result<Arc<Dht>, dmc_dht::DhtError> {
    Dht::open(
        dht.pool().clone(),
        DhtConfig::default(),
        Arc::new(SystemClock),
        Ownership::all(0, 1),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_table_is_upgraded_and_a_newer_one_refused() {
    let h = common::open(
        Backend::Local,
        DhtConfig::default(),
        Arc::new(SystemClock),
        Duration::ZERO,
    )
    .await;
    let dht = h.dht.clone();
    assert_eq!(version_word(&dht).await.1 as u32, layout::VERSION);
    set_version(&dht, layout::OLDEST_VERSION).await;
    reopen(&dht).await.unwrap();
    let (_, word) = version_word(&dht).await;
    assert_eq!(word as u32, layout::VERSION, "upgraded on open");
    assert_eq!((word >> 32) as u32, 4, "buckets per subtable kept");
    set_version(&dht, layout::VERSION + 1).await;
    let refused = reopen(&dht).await.err().expect("a newer table is refused");
    assert!(refused.to_string().contains("table version"), "{refused}");
}
