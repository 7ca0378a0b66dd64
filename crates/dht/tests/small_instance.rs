//! A small instance (issue 20, item 4): a table sized to `maxmemory` holds about as many
//! keys as its bytes allow while it evicts, rather than spending them on an empty
//! subtable per hash slot.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Backend;
use dmc_dht::{DhtConfig, RedisPolicy, SetOptions, SystemClock};

const MAXMEMORY: u64 = 8 << 20;
const VALUE: usize = 200;

async fn fill(slot_group_bits: u32) -> (u64, i64) {
    let h = common::open(
        Backend::Local,
        DhtConfig {
            maxmemory: MAXMEMORY,
            policy: RedisPolicy::AllKeysLru,
            slot_group_bits,
            ..DhtConfig::default()
        },
        Arc::new(SystemClock),
        Duration::ZERO,
    )
    .await;
    let dht = h.dht.clone();
    // Bytes a key costs, from the first keys (no eviction yet): the object and its
    // share of the index.
    let base = dht.used_memory();
    for i in 0..2000u32 {
        let key = format!("key:{i}");
        dht.set(0, key.as_bytes(), &[7u8; VALUE], SetOptions::default())
            .await
            .unwrap();
    }
    let per_key = (dht.used_memory() - base) / 2000;
    // Twice what fits, so the table evicts for the second half.
    for i in 2000..60_000u32 {
        let key = format!("key:{i}");
        dht.set(0, key.as_bytes(), &[7u8; VALUE], SetOptions::default())
            .await
            .unwrap();
    }
    (per_key, dht.key_count_db(0))
}

/// An 8 MB instance taking 60 000 SETs of 200-byte values ends with about the keys its
/// bytes hold (within 20 %). With one subtable per hash slot it kept about 700: the
/// index of 16 384 slots took the 8 MB and eviction emptied the keys instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_instance_keeps_as_many_keys_as_its_bytes_hold() {
    let bits =
        dmc_dht::slot_group_bits(MAXMEMORY, DhtConfig::default().buckets_per_subtable, |_| 0);
    assert!(bits > 0, "an 8 MB table groups its hash slots");
    let (per_key, keys) = fill(bits).await;
    let fits = (MAXMEMORY / per_key) as i64;
    eprintln!(
        "slot groups of {}: {keys} keys held, {fits} fit at {per_key} B each",
        1 << bits
    );
    assert!(
        keys * 5 >= fits * 4,
        "{keys} keys held where {fits} fit ({per_key} B each)"
    );
}

/// Group sizes follow the instance's size and never cross a shard boundary.
#[test]
fn slot_groups_follow_the_size_and_the_shards() {
    let buckets = DhtConfig::default().buckets_per_subtable;
    let bits = |mm: u64| dmc_dht::slot_group_bits(mm, buckets, |_| 0);
    assert_eq!(bits(0), 0, "unlimited: one partition per slot");
    assert_eq!(bits(64 << 30), 0);
    assert!(bits(1 << 20) > bits(8 << 20) && bits(8 << 20) > bits(256 << 20));
    assert!(bits(1 << 20) <= dmc_dht::layout::MAX_SLOT_GROUP_BITS);
    // 64 shards of 256 slots: groups of up to 256.
    let shards64 = |slot: u16| u32::from(slot) * 64 / 16384;
    assert_eq!(dmc_dht::slot_group_bits(1 << 20, buckets, shards64), 8);
    // 3 shards: the second starts at slot 5462 and the third at 10923, an odd slot,
    // so only single slots keep within shards.
    let shards3 = |slot: u16| u32::from(slot) * 3 / 16384;
    assert_eq!(dmc_dht::slot_group_bits(1 << 20, buckets, shards3), 0);
    assert!(!dmc_dht::groups_within_shards(1, &shards3));
}
