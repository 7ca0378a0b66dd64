//! Transactions whose coordinator was cut off mid-commit (issue 17: all or nothing
//! across memory nodes). The coordinator committed a transaction on one memory node
//! and not on the other (fail point `umo-commit-one-node`), or on none: the other
//! node keeps it prepared, its words locked, until the shard's next owner — or the
//! coordinator itself, from its maintenance — settles it: committed everywhere when
//! any node committed it, undone everywhere otherwise. Before this the node whose
//! session ended dropped it, and the transaction stayed applied on one node only.
//!
//! Its own test binary: the fail point is process-wide.
#![cfg(feature = "failpoints")]

mod common;

use common::{client, two_nodes};
use dmc_dht::owner::Lease;
use dmc_dht::{Dht, SetOptions};
use dmc_umo::{GlobalAddr, Settled};

const KEYS: usize = 20;

/// The fail points are process-wide: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn key(i: usize) -> String {
    format!("k{i}")
}

async fn get(d: &Dht, key: &str) -> Option<String> {
    d.get(0, key.as_bytes())
        .await
        .unwrap()
        .map(|e| String::from_utf8(e.value.to_vec()).unwrap())
}

/// Every key's value as `d` reads it.
async fn values(d: &Dht) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for i in 0..KEYS {
        out.push(get(d, &key(i)).await);
    }
    out
}

/// Sets every key to `value` in one staged transaction of `d`, cut off as the fail
/// point `mode` says; returns whether the commit reported success.
async fn cut_off_transaction(d: &Dht, value: &str, mode: &str) -> bool {
    let ((), staged) = d
        .stage(async {
            for i in 0..KEYS {
                d.set(
                    0,
                    key(i).as_bytes(),
                    value.as_bytes(),
                    SetOptions::default(),
                )
                .await
                .unwrap();
            }
        })
        .await;
    fail::cfg("umo-commit-one-node", &format!("return({mode})")).unwrap();
    let committed = d.commit_staged(staged).await.is_ok();
    fail::remove("umo-commit-one-node");
    committed
}

/// Asserts that every key's slot word is the same, and unlocked, on both copies of its
/// region (a transaction left prepared on one node holds its words locked and old).
async fn copies_agree(d: &Dht) {
    for i in 0..KEYS {
        let (entry, _) = d.peek(0, key(i).as_bytes()).await.unwrap().unwrap();
        let meta = entry.slot.meta_addr();
        let word = GlobalAddr::new(meta.region(), meta.offset() - 8);
        let mut words = [0u64; 2];
        for (copy, w) in words.iter_mut().enumerate() {
            let mut buf = [0u8; 8];
            d.pool().read_copy(word, copy, &mut buf).await.unwrap();
            *w = u64::from_le_bytes(buf);
        }
        assert_eq!(words[0], words[1], "{}: the copies differ", key(i));
        assert_eq!(words[0] & dmc_umo::WORD_LOCK, 0, "{}: left locked", key(i));
    }
}

fn all(value: &str) -> Vec<Option<String>> {
    vec![Some(value.to_string()); KEYS]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_owner_commits_everywhere_what_one_node_committed_and_undoes_what_none_did() {
    let _serial = SERIAL.lock().await;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = two_nodes(&dirs).await;
    let a = client(&nodes, 1, 0..16384, 0).await;
    let b = client(&nodes, 2, 0..0, 0).await;
    // The keys' partitions exist: the commit cut off is the transaction's own.
    for i in 0..KEYS {
        a.set(0, key(i).as_bytes(), b"v0", SetOptions::default())
            .await
            .unwrap();
    }
    let ((), staged) = a
        .stage(async {
            for i in 0..KEYS {
                a.set(0, key(i).as_bytes(), b"v1", SetOptions::default())
                    .await
                    .unwrap();
            }
        })
        .await;
    a.commit_staged(staged).await.unwrap();
    assert_eq!(values(&b).await, all("v1"));

    // Committed on one node only (every region has a copy on each node).
    assert!(!cut_off_transaction(&a, "v2", "stop").await);
    // The shard moves to b, which settles before its first write.
    b.pool().fence(0, 2).await.unwrap();
    a.ownership().release(0..16384).await;
    let settled = b.settle_shard(0).await.unwrap();
    assert_eq!(
        settled,
        Settled {
            committed: 1,
            aborted: 0
        }
    );
    b.ownership()
        .assign(0..16384, Some(Lease { shard: 0, epoch: 2 }));
    assert_eq!(values(&b).await, all("v2"), "committed on every node");
    assert_eq!(values(&a).await, all("v2"));
    copies_agree(&b).await;

    // Cut off before any node committed: undone everywhere.
    assert!(!cut_off_transaction(&b, "v3", "none").await);
    a.pool().fence(0, 3).await.unwrap();
    b.ownership().release(0..16384).await;
    let settled = a.settle_shard(0).await.unwrap();
    assert_eq!(
        settled,
        Settled {
            committed: 0,
            aborted: 1
        }
    );
    a.ownership()
        .assign(0..16384, Some(Lease { shard: 0, epoch: 3 }));
    assert_eq!(values(&a).await, all("v2"), "undone on every node");
    copies_agree(&a).await;

    // Nothing is left locked: the keys take writes again.
    for i in 0..KEYS {
        a.set(0, key(i).as_bytes(), b"v4", SetOptions::default())
            .await
            .unwrap();
    }
    assert_eq!(values(&b).await, all("v4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_whose_connection_broke_mid_commit_settles_it_from_its_maintenance() {
    let _serial = SERIAL.lock().await;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = two_nodes(&dirs).await;
    let a = client(&nodes, 1, 0..16384, 0).await;
    let b = client(&nodes, 2, 0..0, 0).await;
    // The keys' partitions exist: the commit cut off is the transaction's own.
    for i in 0..KEYS {
        a.set(0, key(i).as_bytes(), b"v0", SetOptions::default())
            .await
            .unwrap();
    }
    let ((), staged) = a
        .stage(async {
            for i in 0..KEYS {
                a.set(0, key(i).as_bytes(), b"v1", SetOptions::default())
                    .await
                    .unwrap();
            }
        })
        .await;
    // Node 2 closes the connection a commit arrives on: node 1 commits, node 2 keeps
    // the transaction prepared for an ended session.
    fail::cfg("node-drop-commit", "return(2)").unwrap();
    assert!(a.commit_staged(staged).await.is_err());
    fail::remove("node-drop-commit");
    // Its maintenance settles it: committed on node 2 too.
    a.recover_in_doubt().await;
    assert_eq!(values(&b).await, all("v1"));
    assert_eq!(values(&a).await, all("v1"));
    copies_agree(&a).await;
    for i in 0..KEYS {
        a.set(0, key(i).as_bytes(), b"v2", SetOptions::default())
            .await
            .unwrap();
    }
    assert_eq!(values(&b).await, all("v2"));
}
