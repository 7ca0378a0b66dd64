//! The node core's commit protocol, fencing and region tests.

use super::*;
use crate::wire::WordWrite;

fn heap_node() -> Arc<NodeCore> {
    NodeCore::open(NodeConfig {
        id: 1,
        capacity: 1 << 20,
        storage: Storage::Heap,
        secret: None,
    })
    .unwrap()
}

fn tx(txid: u64, epoch: u64, expect: Option<u64>, new: u64) -> TxPrepare {
    TxPrepare {
        txid,
        shard: 7,
        epoch,
        writes: vec![WordWrite {
            region: 1,
            offset: 8,
            expect,
            new,
            in_word_lock: false,
        }],
    }
}

#[test]
fn prepare_commit_and_conflicts() {
    let n = heap_node();
    n.create_region(1, 4096).unwrap();
    assert_eq!(n.prepare(1, &[tx(1, 1, Some(0), 5)]), vec![TxVote::Yes]);
    // A second transaction on the locked word is refused, not queued.
    assert_eq!(
        n.prepare(2, &[tx(1, 1, Some(0), 6)]),
        vec![TxVote::Locked { index: 0 }]
    );
    assert_eq!(n.commit(1, &[1]), vec![TxVote::Yes]);
    assert_eq!(n.region(1).unwrap().load(8).unwrap(), 5);
    assert_eq!(
        n.prepare(2, &[tx(2, 1, Some(0), 6)]),
        vec![TxVote::Conflict {
            index: 0,
            actual: 5
        }]
    );
    assert_eq!(
        n.commit(2, &[2]),
        vec![TxVote::Failed(VerbsError::UnknownTx(2))]
    );
}

#[test]
fn one_round_commits_apply_yes_votes_and_hold_no_locks() {
    let n = heap_node();
    n.create_region(1, 4096).unwrap();
    // Two transactions on one word in one batch: the first applies (and releases
    // its lock at once), so the second sees the new value and conflicts.
    assert_eq!(
        n.prepare_commit(1, &[tx(1, 1, Some(0), 5), tx(2, 1, Some(0), 6)]),
        vec![
            TxVote::Yes,
            TxVote::Conflict {
                index: 0,
                actual: 5
            }
        ]
    );
    assert_eq!(n.region(1).unwrap().load(8).unwrap(), 5);
    // No lock is left behind: a later transaction on the word proceeds.
    assert_eq!(
        n.prepare_commit(2, &[tx(3, 1, Some(5), 7)]),
        vec![TxVote::Yes]
    );
    assert_eq!(n.region(1).unwrap().load(8).unwrap(), 7);
    // A word locked by a two-phase transaction refuses a one-round one.
    assert_eq!(n.prepare(3, &[tx(4, 1, Some(7), 8)]), vec![TxVote::Yes]);
    assert_eq!(
        n.prepare_commit(4, &[tx(5, 1, Some(7), 9)]),
        vec![TxVote::Locked { index: 0 }]
    );
    n.fence(7, 3);
    assert_eq!(
        n.prepare_commit(5, &[tx(6, 1, None, 9)]),
        vec![TxVote::StaleEpoch { current: 3 }]
    );
}

#[test]
fn a_one_round_commit_publishes_its_plain_words_with_its_locked_word_or_nothing() {
    let n = heap_node();
    n.create_region(1, 4096).unwrap();
    let words = |txid: u64, expect: u64, new: u64| TxPrepare {
        txid,
        shard: 7,
        epoch: 1,
        writes: vec![
            WordWrite {
                region: 1,
                offset: 16,
                expect: None,
                new: new + 1,
                in_word_lock: false,
            },
            WordWrite {
                region: 1,
                offset: 8,
                expect: Some(expect),
                new,
                in_word_lock: true,
            },
        ],
    };
    let mem = n.region(1).unwrap();
    assert_eq!(n.prepare_commit(1, &[words(1, 0, 4)]), vec![TxVote::Yes]);
    // Applied and unlocked: the slot word holds the new value, its lock bit clear.
    assert_eq!((mem.load(8).unwrap(), mem.load(16).unwrap()), (4, 5));
    // A one-sided writer holds the word in place: refused, and the plain word untouched.
    mem.store(8, 4 | WORD_LOCK).unwrap();
    assert_eq!(
        n.prepare_commit(1, &[words(2, 4, 10)]),
        vec![TxVote::Locked { index: 1 }]
    );
    assert_eq!(
        (mem.load(8).unwrap(), mem.load(16).unwrap()),
        (4 | WORD_LOCK, 5)
    );
    let stats = n.stats();
    assert_eq!((stats.prepared, stats.committed), (1, 1));
}

#[test]
fn stale_epoch_changes_nothing() {
    let n = heap_node();
    n.create_region(1, 4096).unwrap();
    n.fence(7, 5);
    assert_eq!(
        n.prepare(1, &[tx(1, 4, None, 9)]),
        vec![TxVote::StaleEpoch { current: 5 }]
    );
    assert_eq!(
        n.commit(1, &[1]),
        vec![TxVote::Failed(VerbsError::UnknownTx(1))]
    );
    assert_eq!(n.region(1).unwrap().load(8).unwrap(), 0);
}

#[test]
fn a_transaction_prepared_before_a_fence_still_commits_and_blocks_the_successor() {
    let n = heap_node();
    n.create_region(1, 4096).unwrap();
    assert_eq!(n.prepare(1, &[tx(1, 3, None, 9)]), vec![TxVote::Yes]);
    n.fence(7, 4);
    // The old owner starts nothing new...
    assert_eq!(
        n.prepare(1, &[tx(2, 3, None, 5)]),
        vec![TxVote::StaleEpoch { current: 4 }]
    );
    // ...and the successor waits for the word the old owner holds.
    assert_eq!(
        n.prepare(2, &[tx(1, 4, Some(0), 1)]),
        vec![TxVote::Locked { index: 0 }]
    );
    // What it prepared before the fence commits on every copy alike.
    assert_eq!(n.commit(1, &[1]), vec![TxVote::Yes]);
    assert_eq!(n.region(1).unwrap().load(8).unwrap(), 9);
    assert_eq!(n.prepare(2, &[tx(1, 4, Some(9), 1)]), vec![TxVote::Yes]);
}

/// A node whose fenced transactions count as hanging after `grace`.
fn node_with_grace(grace: std::time::Duration) -> Arc<NodeCore> {
    let mut n = heap_node();
    Arc::get_mut(&mut n).unwrap().fenced_grace = grace;
    n.create_region(1, 4096).unwrap();
    n
}

#[test]
fn a_fence_drops_older_transactions_left_hanging() {
    let n = node_with_grace(std::time::Duration::ZERO);
    assert_eq!(n.prepare(1, &[tx(1, 3, None, 9)]), vec![TxVote::Yes]);
    n.fence(7, 4);
    assert_eq!(
        n.commit(1, &[1]),
        vec![TxVote::Failed(VerbsError::UnknownTx(1))]
    );
    assert_eq!(n.region(1).unwrap().load(8).unwrap(), 0);
    // The lock went with it.
    assert_eq!(n.prepare(2, &[tx(1, 4, Some(0), 1)]), vec![TxVote::Yes]);
}

#[test]
fn a_lock_of_a_fenced_transaction_left_hanging_is_released_by_the_successor() {
    let n = node_with_grace(std::time::Duration::from_millis(50));
    assert_eq!(n.prepare(1, &[tx(1, 3, None, 9)]), vec![TxVote::Yes]);
    n.fence(7, 4);
    assert_eq!(
        n.prepare(2, &[tx(1, 4, Some(0), 1)]),
        vec![TxVote::Locked { index: 0 }],
        "within the grace the old owner may still commit"
    );
    std::thread::sleep(std::time::Duration::from_millis(60));
    assert_eq!(n.prepare(2, &[tx(1, 4, Some(0), 1)]), vec![TxVote::Yes]);
    assert_eq!(
        n.commit(1, &[1]),
        vec![TxVote::Failed(VerbsError::UnknownTx(1))]
    );
}

#[test]
fn ended_session_releases_locks() {
    let n = heap_node();
    n.create_region(1, 4096).unwrap();
    assert_eq!(n.prepare(1, &[tx(1, 1, None, 9)]), vec![TxVote::Yes]);
    n.end_session(1);
    assert_eq!(n.prepare(2, &[tx(1, 1, Some(0), 1)]), vec![TxVote::Yes]);
}

#[test]
fn capacity_and_region_errors() {
    let n = heap_node();
    assert_eq!(
        n.create_region(1, 2 << 20),
        Err(VerbsError::CapacityExceeded {
            need: 2 << 20,
            free: 1 << 20
        })
    );
    assert_eq!(n.create_region(1, 12), Err(VerbsError::BadRegionSize(12)));
    n.create_region(1, 4096).unwrap();
    assert_eq!(n.create_region(1, 4096), Err(VerbsError::RegionExists(1)));
    assert!(matches!(
        n.handle(1, Request::DropRegion { region: 9 }),
        Response::Error(VerbsError::NoSuchRegion(9))
    ));
}

#[test]
fn dir_storage_reloads_regions() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = NodeConfig {
        id: 1,
        capacity: 1 << 20,
        storage: Storage::Dir(dir.path().to_path_buf()),
        secret: None,
    };
    {
        let n = NodeCore::open(cfg.clone()).unwrap();
        n.create_region(3, 4096).unwrap();
        n.region(3).unwrap().store(16, 77).unwrap();
    }
    let n = NodeCore::open(cfg).unwrap();
    assert_eq!(n.region(3).unwrap().load(16).unwrap(), 77);
}

fn locked_in_word(txid: u64, expect: u64, new: u64) -> TxPrepare {
    let mut t = tx(txid, 1, Some(expect), new);
    t.writes[0].in_word_lock = true;
    t
}

#[test]
fn in_word_locks_are_seen_by_one_sided_writers_and_undone_on_abort() {
    let n = heap_node();
    n.create_region(1, 4096).unwrap();
    let mem = n.region(1).unwrap();
    mem.store(8, 0x40).unwrap();
    // The prepare sets the word's lock bit: a one-sided CAS from the unlocked value
    // fails, and sees the lock.
    assert_eq!(
        n.prepare(1, &[locked_in_word(1, 0x40, 0x80)]),
        vec![TxVote::Yes]
    );
    assert_eq!(mem.load(8).unwrap(), 0x40 | WORD_LOCK);
    assert_eq!(mem.cas(8, 0x40, 0x99).unwrap(), 0x40 | WORD_LOCK);
    // Abort clears the bit and leaves the value.
    n.abort(1, &[1]);
    assert_eq!(mem.load(8).unwrap(), 0x40);
    // Commit stores the new value, unlocked.
    assert_eq!(
        n.prepare(1, &[locked_in_word(2, 0x40, 0x80)]),
        vec![TxVote::Yes]
    );
    assert_eq!(n.commit(1, &[2]), vec![TxVote::Yes]);
    assert_eq!(mem.load(8).unwrap(), 0x80);
    // A word a one-sided writer locked refuses a prepare, whether it expects the
    // locked or the unlocked value.
    mem.store(8, 0x80 | WORD_LOCK).unwrap();
    assert_eq!(
        n.prepare(1, &[locked_in_word(3, 0x80 | WORD_LOCK, 0xc0)]),
        vec![TxVote::Locked { index: 0 }]
    );
    assert_eq!(
        n.prepare(1, &[locked_in_word(4, 0x80, 0xc0)]),
        vec![TxVote::Locked { index: 0 }]
    );
    // A coordinator that goes away leaves no lock bit behind.
    mem.store(8, 0x80).unwrap();
    assert_eq!(
        n.prepare(7, &[locked_in_word(5, 0x80, 0xc0)]),
        vec![TxVote::Yes]
    );
    n.end_session(7);
    assert_eq!(mem.load(8).unwrap(), 0x80);
}

/// The word `tx` writes, as a node holds it.
fn word(n: &NodeCore) -> u64 {
    n.region(1).unwrap().load(8).unwrap()
}

fn two_heap_nodes() -> [Arc<NodeCore>; 2] {
    let nodes = [heap_node(), heap_node()];
    for n in &nodes {
        n.create_region(1, 4096).unwrap();
    }
    nodes
}

/// Transactions as (client, txid).
type Txs = Vec<(u64, u64)>;

/// Settles shard 7 over `nodes` as `dmc_umo::Pool::settle` does; returns what it
/// committed and aborted.
fn settle(nodes: &[Arc<NodeCore>]) -> (Txs, Txs) {
    let mut gone: Vec<(u64, u64)> = nodes.iter().flat_map(|n| n.settle(7)).collect();
    gone.sort_unstable();
    gone.dedup();
    let committed: Vec<(u64, u64)> = nodes
        .iter()
        .flat_map(|n| n.committed_among(&gone))
        .collect();
    let abort: Vec<(u64, u64)> = gone
        .iter()
        .filter(|id| !committed.contains(id))
        .copied()
        .collect();
    for n in nodes {
        n.resolve(&committed, &abort);
    }
    (committed, abort)
}

#[test]
fn a_coordinator_killed_after_committing_on_one_node_is_committed_on_all() {
    let [a, b] = two_heap_nodes();
    for n in [&a, &b] {
        n.bind_client(1, 42);
        assert_eq!(n.prepare(1, &[tx(5, 1, Some(0), 9)]), vec![TxVote::Yes]);
    }
    assert_eq!(a.commit(1, &[5]), vec![TxVote::Yes]);
    // The coordinator dies: both sessions end.
    a.end_session(1);
    b.end_session(1);
    assert_eq!((word(&a), word(&b)), (9, 0));
    // B keeps the transaction prepared, its word held, until it is settled.
    assert_eq!(
        b.prepare(2, &[tx(1, 1, Some(0), 3)]),
        vec![TxVote::Locked { index: 0 }]
    );
    assert_eq!(settle(&[a.clone(), b.clone()]), (vec![(42, 5)], vec![]));
    assert_eq!((word(&a), word(&b)), (9, 9), "committed everywhere");
    assert_eq!(b.prepare(2, &[tx(1, 1, Some(9), 3)]), vec![TxVote::Yes]);
}

#[test]
fn a_coordinator_killed_before_any_commit_is_undone_on_all() {
    let [a, b] = two_heap_nodes();
    for n in [&a, &b] {
        n.bind_client(1, 42);
        assert_eq!(n.prepare(1, &[tx(5, 1, Some(0), 9)]), vec![TxVote::Yes]);
        n.end_session(1);
    }
    assert_eq!(settle(&[a.clone(), b.clone()]), (vec![], vec![(42, 5)]));
    assert_eq!((word(&a), word(&b)), (0, 0));
    for n in [&a, &b] {
        assert_eq!(n.prepare(2, &[tx(1, 1, Some(0), 3)]), vec![TxVote::Yes]);
    }
}

#[test]
fn a_fenced_coordinator_cannot_commit_what_a_settlement_froze() {
    let [a, b] = two_heap_nodes();
    for n in [&a, &b] {
        n.bind_client(1, 42);
        assert_eq!(n.prepare(1, &[tx(5, 1, Some(0), 9)]), vec![TxVote::Yes]);
        n.fence(7, 2);
    }
    // The old coordinator is alive but lost the shard: a fence alone keeps a named
    // coordinator's transaction (no grace drop); the settlement freezes it.
    assert_eq!(a.settle(7), vec![(42, 5)]);
    assert_eq!(
        a.commit(1, &[5]),
        vec![TxVote::Failed(VerbsError::UnknownTx(5))]
    );
    // B was not frozen yet: the old coordinator commits there, so the settlement
    // commits on A too.
    assert_eq!(b.commit(1, &[5]), vec![TxVote::Yes]);
    assert_eq!(settle(&[a.clone(), b.clone()]), (vec![(42, 5)], vec![]));
    assert_eq!((word(&a), word(&b)), (9, 9));
}

#[test]
fn a_live_coordinators_transactions_are_not_settled() {
    let [a, _] = two_heap_nodes();
    a.bind_client(1, 42);
    assert_eq!(a.prepare(1, &[tx(5, 1, Some(0), 9)]), vec![TxVote::Yes]);
    assert_eq!(
        a.settle(7),
        vec![],
        "its session lives and its epoch is current"
    );
    assert_eq!(a.commit(1, &[5]), vec![TxVote::Yes]);
    assert_eq!(word(&a), 9);
}
