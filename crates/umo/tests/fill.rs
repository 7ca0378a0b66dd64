//! Filling a region copy (issue 15, item 2) as the pool client sees it: writes that race
//! the copier are logged and copied again, and a copy created anew on a node that held
//! the region before is the one writes reach.

mod support;

use std::sync::Arc;

use dmc_umo::{ObjectRef, Pool, ReadObject, ValueKind};
use dmc_verbs::Transport;
use support::{Nodes, connect, region_copies, small, start_nodes};

/// What each test starts from: `n` nodes, a transport to each (the manager's view), a
/// pool with `r = 2` over them holding one object, and the region size.
struct Start {
    _nodes: Nodes,
    transports: Vec<Arc<dyn Transport>>,
    pool: Arc<Pool>,
    first: ObjectRef,
    size: u64,
}

async fn start(n: u32) -> Start {
    let nodes = start_nodes(n, 64 << 20).await;
    let transports = connect(&nodes).await;
    let config = small(2);
    let size = config.region_size;
    let pool = Pool::open(config, connect(&nodes).await).await.unwrap();
    // The client maps the region's copies by writing it.
    let first = pool
        .write_object(0, b"first", ValueKind::String, b"v")
        .await
        .unwrap();
    Start {
        _nodes: nodes,
        transports,
        pool,
        first,
        size,
    }
}

/// Filling a new copy while writes race the copier (issue 15, item 2): a chunk the
/// copier read before a write and wrote after it holds the older bytes, and only the
/// agents' log of chunks written during the fill, copied again while the region is
/// frozen, makes the copy identical to the primary. The race is forced: every chunk
/// is read first, the writes land, then the stale chunks are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_filled_while_writes_race_the_copier_ends_identical() {
    use dmc_umo::{FILL_CHUNK, Placement, RegionRecord};
    let Start {
        _nodes,
        transports,
        pool,
        first,
        size,
    } = start(3).await;
    let region = first.block.addr.region();
    let holders: Vec<u32> = region_copies(&transports, region, size)
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(holders.len(), 2);
    let target = (1..=3u32).find(|n| !holders.contains(n)).unwrap();
    let target_t = &transports[target as usize - 1];
    target_t.create_region(region, size).await.unwrap();
    let record = RegionRecord {
        primary: holders[0],
        backups: vec![holders[1]],
    };
    let placement = |filling: Vec<u32>, frozen: bool, backups: Vec<u32>| Placement {
        region,
        record: RegionRecord {
            backups,
            ..record.clone()
        },
        filling,
        frozen,
    };
    pool.place_regions(&[placement(vec![target], false, record.backups.clone())])
        .await
        .unwrap();

    // The copier reads everything, then the writes land (on all three copies), then
    // the copier writes what it read.
    let primary_t = &transports[holders[0] as usize - 1];
    let mut snapshot = vec![0u8; size as usize];
    primary_t.read(region, 0, &mut snapshot).await.unwrap();
    let mut objs = Vec::new();
    for i in 0..300u32 {
        let key = format!("k{i}");
        let obj = pool
            .write_object(0, key.as_bytes(), ValueKind::String, &[i as u8; 100])
            .await
            .unwrap();
        if obj.block.addr.region() == region {
            objs.push((key, obj));
        }
    }
    assert!(!objs.is_empty());
    target_t.write(region, 0, &snapshot).await.unwrap();
    let copies = region_copies(&transports, region, size).await;
    assert_ne!(
        copies[0].1, copies[2].1,
        "the forced race left the copy stale"
    );

    // Freeze: the log names every chunk written since the fill began.
    pool.place_regions(&[placement(vec![target], true, record.backups.clone())])
        .await
        .unwrap();
    assert!(pool.is_frozen(region));
    let dirty = pool.take_dirty();
    let chunks: Vec<u32> = dirty
        .iter()
        .filter(|d| d.region == region)
        .flat_map(|d| d.chunks.clone())
        .collect();
    assert!(!chunks.is_empty());
    // Writes wait while frozen; reads do not.
    let waiting = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.write_object(0, b"late", ValueKind::String, b"v").await })
    };
    assert!(matches!(
        pool.read_object(first, 0, b"first").await.unwrap(),
        ReadObject::Value(..)
    ));
    for chunk in chunks {
        let at = chunk as u64 * FILL_CHUNK;
        let mut buf = vec![0u8; FILL_CHUNK.min(size - at) as usize];
        primary_t.read(region, at, &mut buf).await.unwrap();
        target_t.write(region, at, &buf).await.unwrap();
    }
    assert!(!waiting.is_finished(), "a write to a frozen region waits");
    let copies = region_copies(&transports, region, size).await;
    assert!(
        copies.iter().all(|(_, c)| *c == copies[0].1),
        "after the frozen recopy every copy equals the primary"
    );

    // Thawed with the new copy as a backup: the waiting write lands on all three.
    pool.place_regions(&[placement(vec![], false, vec![holders[1], target])])
        .await
        .unwrap();
    let late = waiting.await.unwrap().unwrap();
    assert_eq!(pool.copy_count(region).await.unwrap(), 3);
    let copies = region_copies(&transports, region, size).await;
    assert_eq!(copies.len(), 3);
    assert!(copies.iter().all(|(_, c)| *c == copies[0].1));
    objs.push(("late".to_string(), late));
    for (key, obj) in &objs {
        assert!(matches!(
            pool.read_object(*obj, 0, key.as_bytes()).await.unwrap(),
            ReadObject::Value(..)
        ));
    }
}

/// A node that held a copy, left the region's record (it failed) and gets a new copy
/// filled (re-replication back onto it once it returned): the manager drops the stale
/// file and creates a new one, so a client that had mapped the old file (`shm`) must
/// map the new one, or every write after the fill lands in the unlinked old file and
/// the new copy silently falls behind its primary (seen in CI: `faults.rs`, a memory
/// node's lease lapsed under load and the refilled copy differed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_refilled_on_a_node_that_held_the_region_takes_the_writes() {
    use dmc_umo::{Placement, RegionRecord};
    let Start {
        _nodes,
        transports,
        pool,
        first,
        size,
    } = start(2).await;
    let region = first.block.addr.region();
    let record = |backups: Vec<u32>| RegionRecord {
        primary: 1,
        backups,
    };
    let placement = |backups: Vec<u32>, filling: Vec<u32>, frozen: bool| Placement {
        region,
        record: record(backups),
        filling,
        frozen,
    };
    // Node 2 fails: the region runs on node 1 alone.
    pool.place_regions(&[placement(vec![], vec![], false)])
        .await
        .unwrap();
    // It comes back; the manager drops its stale copy, creates a new one, marks it
    // filling, copies the primary, freezes, and thaws with node 2 a backup again.
    let copier = &transports[1];
    copier.drop_region(region).await.unwrap();
    copier.create_region(region, size).await.unwrap();
    pool.place_regions(&[placement(vec![], vec![2], false)])
        .await
        .unwrap();
    let mut bytes = vec![0u8; size as usize];
    transports[0].read(region, 0, &mut bytes).await.unwrap();
    copier.write(region, 0, &bytes).await.unwrap();
    pool.place_regions(&[placement(vec![], vec![2], true)])
        .await
        .unwrap();
    pool.place_regions(&[placement(vec![2], vec![], false)])
        .await
        .unwrap();
    let copies = region_copies(&transports, region, size).await;
    assert!(copies.iter().all(|(_, c)| *c == copies[0].1), "filled");

    // Writes after the fill reach the new copy.
    let mut written = 0;
    for i in 0..200u32 {
        let key = format!("after{i}");
        let obj = pool
            .write_object(0, key.as_bytes(), ValueKind::String, &[i as u8; 64])
            .await
            .unwrap();
        written += usize::from(obj.block.addr.region() == region);
    }
    assert!(written > 0, "some writes landed in the refilled region");
    let copies = region_copies(&transports, region, size).await;
    assert_eq!(copies.len(), 2);
    assert!(
        copies[0].1 == copies[1].1,
        "the refilled copy on node 2 missed writes made after its fill"
    );
}
