//! Ditto's algorithms as table policies against their exact versions: with every key
//! compared (`maxmemory-samples 0`), a table under `allkeys-<algorithm>` evicts exactly
//! the key the algorithm's reference (`dmc_dht::algorithms`, run by this test over
//! exact access records of its own) would, through inserts, overwrites, reads,
//! deletes, splits that carry the access metadata to new subtables, and the inflation
//! value of GDS, GDSF and LFUDA.
//!
//! LRU is Redis's `allkeys-lru` over the slot's 1-second clock, so its steps are a
//! second apart, and its hits are sent after each read, as the 100 ms maintenance tick
//! would have sent them by the next step; LFU (`allkeys-lfu`) is Redis's probabilistic counter and has no exact
//! version to compare with (`model.rs` checks what it may evict).

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::Backend;
use dmc_dht::algorithms::{Access, Algorithm, Rules};
use dmc_dht::table::SetOptions;
use dmc_dht::{Clock, DhtConfig, ManualClock, RedisPolicy};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Set(u8, usize),
    Get(u8),
    Del(u8),
    Evict,
    Wait(u64),
}

fn op(keys: u8) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..keys, 1usize..600).prop_map(|(k, len)| Op::Set(k, len)),
        6 => (0..keys).prop_map(Op::Get),
        1 => (0..keys).prop_map(Op::Del),
        2 => Just(Op::Evict),
        1 => (1u64..5_000).prop_map(Op::Wait),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

fn policy_of(algorithm: Algorithm) -> RedisPolicy {
    match algorithm {
        Algorithm::Lru => RedisPolicy::AllKeysLru,
        Algorithm::Lfu => RedisPolicy::AllKeysLfu,
        a => RedisPolicy::AllKeys(a),
    }
}

/// The reference: each live key's exact access record, and the inflation value.
#[derive(Default)]
struct Reference {
    keys: HashMap<Vec<u8>, Access>,
    inflation: f64,
}

impl Reference {
    /// The key the algorithm evicts now: the lowest priority, ties to the least
    /// recently used.
    fn victim(&self, algorithm: Algorithm, now_ms: u64) -> Option<(Vec<u8>, f64)> {
        self.keys
            .iter()
            .map(|(k, a)| (k, algorithm.priority(a, now_ms), a.last_ms))
            .min_by(|x, y| x.1.total_cmp(&y.1).then(x.2.cmp(&y.2)))
            .map(|(k, p, _)| (k.clone(), p))
    }
}

fn run(algorithm: Algorithm, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let clock = ManualClock::new(0);
        let config = DhtConfig {
            policy: policy_of(algorithm),
            buckets_per_subtable: 2,
            samples: 0,
            ..DhtConfig::default()
        };
        // A grace period long enough that no recorded access is dropped as stale.
        let h = common::open(
            Backend::Local,
            config,
            Arc::new(clock.clone()),
            Duration::from_secs(600),
        )
        .await;
        let dht = h.dht.clone();
        let created = dht.pool().created_ms();
        clock.set(created + 1_000_000);
        let max_block = dht.pool().max_block();
        let size = |k: &[u8], len: usize| -> u64 {
            let inline = dmc_umo::object::inline_len(k, len).unwrap() as u64;
            let class = dmc_umo::classes::best_fit(inline, max_block, false).unwrap();
            dmc_umo::classes::size(class) as u64
        };
        // LRU's clock counts seconds: a step of a second keeps every access distinct.
        let step = if algorithm == Algorithm::Lru {
            1_000
        } else {
            1
        };
        let mut reference = Reference::default();
        for (n, op) in ops.into_iter().enumerate() {
            clock.advance(step);
            let now = clock.now_ms() - created;
            let l = reference.inflation;
            match op {
                Op::Set(k, len) => {
                    let k = key(k);
                    dht.set(0, &k, &vec![b'v'; len], SetOptions::default())
                        .await
                        .unwrap();
                    let size = size(&k, len);
                    match reference.keys.get_mut(&k) {
                        Some(a) => {
                            a.size = size;
                            algorithm.accessed(a, now, l);
                        }
                        None => {
                            reference.keys.insert(k, algorithm.inserted(size, now, l));
                        }
                    }
                }
                Op::Get(k) => {
                    let k = key(k);
                    let got = dht.get(0, &k).await.unwrap();
                    prop_assert_eq!(got.is_some(), reference.keys.contains_key(&k));
                    if let Some(a) = reference.keys.get_mut(&k) {
                        algorithm.accessed(a, now, l);
                    }
                    if algorithm == Algorithm::Lru {
                        dht.flush_hits().await;
                    }
                }
                Op::Del(k) => {
                    let k = key(k);
                    let gone = dht.delete(0, &k).await.unwrap();
                    prop_assert_eq!(gone, reference.keys.remove(&k).is_some());
                }
                Op::Wait(ms) => clock.advance(ms * step),
                Op::Evict => {
                    dht.flush_hits().await;
                    let evicted = dht.evict_one().await.unwrap();
                    let expected = reference.victim(algorithm, now);
                    prop_assert_eq!(
                        evicted.as_ref().map(|(_, k)| k.to_vec()),
                        expected.as_ref().map(|(k, _)| k.clone()),
                        "step {}: {} evicted another key",
                        n,
                        algorithm.name()
                    );
                    if let Some((k, p)) = expected {
                        reference.keys.remove(&k);
                        if algorithm.inflates() {
                            reference.inflation = p;
                        }
                    }
                }
            }
        }
        Ok(())
    })
}

fn exact_algorithm() -> impl Strategy<Value = Algorithm> {
    proptest::sample::select(
        Algorithm::ALL
            .into_iter()
            .filter(|a| *a != Algorithm::Lfu)
            .collect::<Vec<_>>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn every_key_compared_evicts_what_the_exact_algorithm_would(
        algorithm in exact_algorithm(),
        ops in proptest::collection::vec(op(40), 1..200),
    ) {
        run(algorithm, ops)?;
    }
}

/// Each algorithm on its own, so that a failure names it and every one is run.
#[test]
fn each_algorithm_matches_its_exact_version_on_a_fixed_sequence() {
    let mut ops = Vec::new();
    for round in 0..6u8 {
        for k in 0..30u8 {
            ops.push(Op::Set(
                k,
                10 + (k as usize * 37 + round as usize * 11) % 500,
            ));
            if k % 3 == round % 3 {
                ops.push(Op::Get(k / 2));
                ops.push(Op::Get(k / 3));
            }
        }
        ops.push(Op::Wait(700));
        for _ in 0..5 {
            ops.push(Op::Evict);
        }
        ops.push(Op::Del(round * 4));
    }
    for algorithm in Algorithm::ALL.into_iter().filter(|a| *a != Algorithm::Lfu) {
        run(algorithm, ops.clone()).unwrap_or_else(|e| panic!("{}: {e}", algorithm.name()));
    }
}

/// A read recorded but not yet sent, then an overwrite, then the read sent: the key's
/// clock must say it was used recently. Hits used to add the clock's change as the
/// reader saw it (an FAA), on top of the overwrite's newer clock: the clock ran ahead
/// of time, wrapped, and the key looked idle for 18 hours, first to be evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hit_sent_after_an_overwrite_leaves_the_clock_recent() {
    let clock = ManualClock::new(0);
    let h = common::open(
        Backend::Local,
        DhtConfig {
            policy: RedisPolicy::AllKeysLru,
            ..DhtConfig::default()
        },
        Arc::new(clock.clone()),
        Duration::from_secs(600),
    )
    .await;
    let dht = h.dht.clone();
    clock.set(dht.pool().created_ms() + 1_000_000);
    dht.set(0, b"k", b"v1", SetOptions::default())
        .await
        .unwrap();
    clock.advance(10_000);
    assert!(dht.get(0, b"k").await.unwrap().is_some());
    clock.advance(10_000);
    dht.set(0, b"k", b"v2", SetOptions::default())
        .await
        .unwrap();
    dht.flush_hits().await;
    let (entry, _) = dht.peek(0, b"k").await.unwrap().unwrap();
    assert!(
        entry.idle_secs <= 10,
        "idle {} s after a read 10 s ago and a write just now",
        entry.idle_secs
    );
}

/// Subtables made under a policy with the access-metadata area and under one without
/// differ in size: splits across a change of policy free each old subtable with its
/// own size class (freed with its children's, it would hand out memory still in use),
/// and every key keeps its value through the churn that reuses those blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splits_across_policy_changes_free_each_subtable_by_its_own_size() {
    let h = common::open(
        Backend::Local,
        DhtConfig {
            policy: RedisPolicy::AllKeysLru,
            buckets_per_subtable: 2,
            // 16 partitions: every round's keys split their subtables many times.
            slot_group_bits: 10,
            ..DhtConfig::default()
        },
        Arc::new(dmc_dht::SystemClock),
        Duration::ZERO,
    )
    .await;
    let dht = h.dht.clone();
    let value = |i: usize, round: usize| format!("value-{i}-{round}-{}", "x".repeat(i % 97));
    let mut live: HashMap<usize, usize> = HashMap::new();
    let policies = [
        RedisPolicy::AllKeysLru,
        RedisPolicy::AllKeys(Algorithm::Gdsf),
        RedisPolicy::AllKeysLfu,
        RedisPolicy::AllKeys(Algorithm::Lirs),
        RedisPolicy::AllKeysLru,
    ];
    for (round, policy) in policies.into_iter().enumerate() {
        dht.set_policy(policy);
        for i in round * 400..(round + 1) * 400 {
            let k = format!("key:{i}");
            dht.set(
                0,
                k.as_bytes(),
                value(i, round).as_bytes(),
                SetOptions::default(),
            )
            .await
            .unwrap();
            live.insert(i, round);
        }
        // Churn: deletes and rewrites reuse the blocks the splits freed.
        for i in (0..(round + 1) * 400).step_by(3) {
            let k = format!("key:{i}");
            dht.delete(0, k.as_bytes()).await.unwrap();
            dht.set(
                0,
                k.as_bytes(),
                value(i, round).as_bytes(),
                SetOptions::default(),
            )
            .await
            .unwrap();
            live.insert(i, round);
        }
        for (i, r) in &live {
            let k = format!("key:{i}");
            let got = dht.get(0, k.as_bytes()).await.unwrap();
            assert_eq!(
                got.map(|e| e.value),
                Some(bytes::Bytes::from(value(*i, *r))),
                "{k} after round {round} ({})",
                policy.name()
            );
        }
    }
    assert!(dht.stats().splits > 100, "{} splits", dht.stats().splits);
}
