//! Single-key commits cut off half-way (issue 15, item 1): the writer locked the
//! primary's slot word and maybe wrote the backups, then died or lost the nodes. The
//! next owner of the hash slot resolves the slot when it gains it
//! (`Dht::recover_locked`), and a writer whose own commit failed resolves it from its
//! maintenance (`Dht::recover_in_doubt`): the key is writable again, reads the rolled
//! forward value where a backup got it and the old one where none did, and the copies
//! agree. Before this a key cut off mid-write answered "contention" forever.
//!
//! Its own test binary: the fail point that cuts commits off is process-wide.
#![cfg(feature = "failpoints")]

mod common;

use common::{client, two_nodes};
use dmc_dht::owner::Lease;
use dmc_dht::{Dht, DhtError, SetOptions};

async fn set(d: &Dht, key: &str, value: &str) -> Result<(), DhtError> {
    d.set(0, key.as_bytes(), value.as_bytes(), SetOptions::default())
        .await
        .map(|_| ())
}

async fn get(d: &Dht, key: &str) -> Option<String> {
    d.get(0, key.as_bytes())
        .await
        .unwrap()
        .map(|e| String::from_utf8(e.value.to_vec()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_cut_off_half_way_are_resolved_by_the_next_owner_and_by_their_writer() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = two_nodes(&dirs).await;
    let a = client(&nodes, 1, 0..16384, 0).await;
    let b = client(&nodes, 2, 0..0, 0).await;
    for k in ["locked", "ahead", "own"] {
        set(&a, k, "v1").await.unwrap();
    }
    // Cut off after the lock: no backup has the new pair.
    fail::cfg("dht-one-sided-cut-off", "return(1)").unwrap();
    assert!(set(&a, "locked", "v2").await.is_err());
    // Cut off after the backups got the new pair.
    fail::cfg("dht-one-sided-cut-off", "return(2)").unwrap();
    assert!(set(&a, "ahead", "v2").await.is_err());
    fail::remove("dht-one-sided-cut-off");
    // Left as it is, the writer itself cannot write those keys.
    assert!(matches!(
        set(&a, "locked", "v3").await,
        Err(DhtError::Contention(_))
    ));

    // The shard moves to b (a released it, as a dead writer's lease would lapse); b
    // resolves what a left half-way before its first write.
    b.pool().fence(0, 2).await.unwrap();
    a.ownership().release(0..16384).await;
    let resolved = b.recover_locked(0..16384).await.unwrap();
    b.ownership()
        .assign(0..16384, Some(Lease { shard: 0, epoch: 2 }));
    assert_eq!(resolved, 2);
    assert_eq!(b.stats().recovered_commits, 2);
    assert_eq!(get(&b, "locked").await.as_deref(), Some("v1"), "undone");
    assert_eq!(
        get(&b, "ahead").await.as_deref(),
        Some("v2"),
        "rolled forward"
    );
    for k in ["locked", "ahead"] {
        set(&b, k, "v3").await.unwrap();
        assert_eq!(get(&b, k).await.as_deref(), Some("v3"));
        assert_eq!(get(&a, k).await.as_deref(), Some("v3"));
    }

    // The writer's own failed commit: resolved by its maintenance step.
    fail::cfg("dht-one-sided-cut-off", "return(2)").unwrap();
    assert!(set(&b, "own", "v2").await.is_err());
    fail::remove("dht-one-sided-cut-off");
    b.recover_in_doubt().await;
    assert_eq!(get(&b, "own").await.as_deref(), Some("v2"));
    set(&b, "own", "v3").await.unwrap();
    assert_eq!(get(&a, "own").await.as_deref(), Some("v3"));
    // Nothing locked is left anywhere.
    assert_eq!(b.recover_locked(0..16384).await.unwrap(), 0);
}
