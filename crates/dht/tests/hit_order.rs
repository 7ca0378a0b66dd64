//! Hit metadata reaches every copy of a key's metadata word in the order it was sent.
//! A batch of hits adds its LFU counts at the primary and writes the sums to the
//! backups (`faa_fields_many`). Two batches of one client in flight at once wrote a
//! backup in either order: the older sum landing last left the backup's LFU byte
//! behind the primary's until the key's next counted hit, which may never come (a CI
//! run of `node_failover.rs` waited 30 s for identical copies). Fail point
//! `umo-counter-sums-gap` holds a batch between its primary additions and its backup
//! sums.
//!
//! Its own test binary: fail points are process-wide.
#![cfg(feature = "failpoints")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use common::{instance_client_with, two_nodes};
use dmc_dht::{Clock, Dht, DhtConfig, SetOptions, SystemClock};
use dmc_umo::GlobalAddr;

async fn word(d: &Dht, addr: GlobalAddr, copy: usize) -> u64 {
    let mut buf = [0u8; 8];
    d.pool().read_copy(addr, copy, &mut buf).await.unwrap();
    u64::from_le_bytes(buf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hit_batch_sent_while_another_is_in_flight_lands_after_it() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = two_nodes(&dirs).await;
    // Every hit is a full batch, sent by the request that made it.
    let config = DhtConfig {
        hit_batch: 1,
        ..DhtConfig::default()
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let a = instance_client_with(&nodes, 1, 0..16384, 0, (1, 1), config, clock).await;
    a.set(0, b"k", b"v", SetOptions::default()).await.unwrap();
    // A reference to report hits with, as the agent's local cache does: each adds to
    // the LFU count of the new key it saw (a new key's count always grows).
    let slot = a.get(0, b"k").await.unwrap().expect("k").slot;
    let meta = slot.meta_addr();
    let (reached, go) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    {
        let (reached, go, first) = (reached.clone(), go.clone(), AtomicBool::new(true));
        fail::cfg_callback("umo-counter-sums-gap", move || {
            if first.swap(false, Ordering::Relaxed) {
                reached.wait();
                go.wait();
            }
        })
        .unwrap();
    }
    // The first batch adds at the primary and is held before its backup's sum.
    let first = tokio::spawn({
        let a = a.clone();
        async move { assert!(a.record_hit(slot).await) }
    });
    tokio::task::block_in_place(|| reached.wait());
    // A second batch, sent while the first is held.
    assert!(a.record_hit(slot).await);
    tokio::task::block_in_place(|| go.wait());
    first.await.unwrap();
    fail::remove("umo-counter-sums-gap");
    // Whatever was held back goes with the next flush.
    a.flush_hits().await;
    let (primary, backup) = (word(&a, meta, 0).await, word(&a, meta, 1).await);
    // The read's hit, then the two reported.
    assert_eq!(
        primary >> 56,
        dmc_dht::policy::LFU_INIT as u64 + 3,
        "{primary:#x}"
    );
    assert_eq!(
        backup, primary,
        "the backup is behind: {backup:#x} against {primary:#x}"
    );
}
