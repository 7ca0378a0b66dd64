//! A writer that adds to a key's metadata word at the primary and stops before copying
//! the sum to the backups leaves the copies different; nothing but another hit of that
//! key would bring them together (an e2e test saw a backup differ for 30 s after an
//! agent was killed). The next owner of the hash slot sets the backups' word to the
//! primary's when it takes the shard over (`Dht::recover_locked`).

mod common;

use common::{client, two_nodes};
use dmc_dht::SetOptions;
use dmc_dht::owner::Lease;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_word_a_writer_left_different_on_a_backup_is_repaired_at_takeover() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = two_nodes(&dirs).await;
    let a = client(&nodes, 1, 0..16384, 0).await;
    let b = client(&nodes, 2, 0..0, 0).await;
    a.set(0, b"k", b"v", SetOptions::default()).await.unwrap();
    let e = a.get(0, b"k").await.unwrap().expect("k");
    let meta = e.slot.meta_addr();
    let word = |copy: usize| {
        let pool = a.pool();
        async move {
            let mut buf = [0u8; 8];
            pool.read_copy(meta, copy, &mut buf).await.unwrap();
            u64::from_le_bytes(buf)
        }
    };
    assert_eq!(word(0).await, word(1).await);
    // The writer's add reached the primary only.
    let primary = word(0).await.wrapping_add(1 << 56);
    a.pool()
        .write_copy(meta, 0, &primary.to_le_bytes())
        .await
        .unwrap();
    assert_ne!(word(0).await, word(1).await);

    b.pool().fence(0, 2).await.unwrap();
    a.ownership().release(0..16384).await;
    b.recover_locked(0..16384).await.unwrap();
    b.ownership()
        .assign(0..16384, Some(Lease { shard: 0, epoch: 2 }));
    assert_eq!(word(1).await, primary);
    assert_eq!(b.stats().repaired_meta, 1);
    assert_eq!(b.recover_locked(0..16384).await.unwrap(), 0);
    assert_eq!(b.stats().repaired_meta, 1, "nothing left to repair");
}
