//! `maxmemory-policy adaptive` (issue 20): on a trace that alternates a phase LFU
//! handles well (a hot set and scans larger than the cache) with one LRU handles well
//! (the hot set abandoned for a new, larger working set), the weights move toward the
//! right expert within each phase, and two agents of one instance compute the same
//! weights from the regrets both charged.

mod common;

use std::sync::Arc;

use common::{clock_start_ms, instance_client_with, two_nodes};
use dmc_dht::adaptive::Expert;
use dmc_dht::hash::key_slot;
use dmc_dht::{Dht, DhtConfig, ManualClock, RedisPolicy, SetOptions};

const VALUE: usize = 1000;
/// Keys the cache holds, about.
const CAPACITY: usize = 200;

/// A key in one of 16 hash slots (the index stays small next to the values).
fn key(name: &str, i: usize) -> Vec<u8> {
    format!("{{t{}}}{name}{i}", i % 16).into_bytes()
}

struct Instance {
    agents: [Arc<Dht>; 2],
    clock: ManualClock,
}

impl Instance {
    /// The agent owning `key` (the first owns hash slots below 8192).
    fn owner(&self, key: &[u8]) -> &Dht {
        &self.agents[usize::from(key_slot(key) >= 8192)]
    }

    /// A look-aside access through the key's owner: GET, and SET after a miss.
    async fn access(&self, key: &[u8]) {
        let dht = self.owner(key);
        if dht.get(0, key).await.unwrap().is_none() {
            dht.set(0, key, &[7u8; VALUE], SetOptions::default())
                .await
                .unwrap();
        }
    }

    /// Sends combined hit metadata and lets a second pass on the LRU clock.
    async fn tick(&self) {
        for a in &self.agents {
            a.flush_hits().await;
        }
        self.clock.advance(1000);
    }

    /// Both agents merge their regrets and read every agent's back.
    async fn sync(&self) {
        for _ in 0..2 {
            for a in &self.agents {
                a.sync_adaptive(true).await.unwrap();
            }
        }
    }

    fn weight(&self, agent: usize, expert: Expert) -> f64 {
        self.agents[agent]
            .adaptive_weights()
            .into_iter()
            .find(|(e, _)| *e == expert)
            .map_or(0.0, |(_, w)| w)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_weights_follow_the_phase_on_both_agents() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = two_nodes(&dirs).await;
    let clock = ManualClock::new(clock_start_ms());
    let config = DhtConfig {
        policy: RedisPolicy::Adaptive,
        ..DhtConfig::default()
    };
    let mut agents = Vec::new();
    for (id, owned) in [(1u32, 0..8192u16), (2, 8192..16384)] {
        agents.push(
            instance_client_with(
                &nodes,
                id,
                owned.clone(),
                id - 1,
                (1, 1),
                config.clone(),
                Arc::new(clock.clone()),
            )
            .await,
        );
    }
    let agents: [Arc<Dht>; 2] = [agents[0].clone(), agents[1].clone()];
    let i = Instance { agents, clock };
    // Size the instance to about CAPACITY keys: fill that many, then cap used memory
    // there (the fillers are never read again and go first).
    for n in 0..CAPACITY {
        i.access(&key("fill", n)).await;
    }
    let used = i.agents[0].used_memory();
    for a in &i.agents {
        a.set_maxmemory(used);
    }
    i.tick().await;

    // Phase 1, LFU's: 50 hot keys read ten times every round, then a scan of 300 keys
    // seen once (more than the cache). LRU's victims are the hot keys (read before the
    // scan); LFU's are scan keys.
    let start = i.weight(0, Expert::Lfu);
    for round in 0..25 {
        for h in 0..50 {
            for _ in 0..10 {
                i.access(&key("hot", h)).await;
            }
        }
        i.tick().await;
        for s in 0..300 {
            i.access(&key("scan", round * 300 + s)).await;
        }
        i.tick().await;
    }
    i.sync().await;
    let after_lfu_phase = i.weight(0, Expert::Lfu);
    eprintln!(
        "phase 1: lfu weight {start:.3} -> {after_lfu_phase:.3}; {:?}",
        i.agents[0].adaptive_status()
    );
    assert!(
        after_lfu_phase > start && after_lfu_phase > 0.5,
        "the weight moves to LFU: {start} -> {after_lfu_phase}"
    );

    // Phase 2, LRU's: the hot keys are never read again (their LFU counters stay
    // high), and a working set near the cache's size is read round after round,
    // drifting by 30 keys a round (each key is read in about six rounds). LFU's victims
    // are working-set keys (low counters); LRU's are the abandoned hot keys.
    let start = i.weight(0, Expert::Lru);
    for round in 0..60 {
        for w in 0..170 {
            i.access(&key("work", round * 30 + w)).await;
        }
        i.tick().await;
    }
    i.sync().await;
    let after_lru_phase = i.weight(0, Expert::Lru);
    eprintln!(
        "phase 2: lru weight {start:.3} -> {after_lru_phase:.3}; {:?}",
        i.agents[0].adaptive_status()
    );
    assert!(
        after_lru_phase > start && after_lru_phase > 0.5,
        "the weight moves back to LRU: {start} -> {after_lru_phase}"
    );
    // Both agents see the same weights: the regret sums are the instance's.
    let (a, b) = (
        i.agents[0].adaptive_weights(),
        i.agents[1].adaptive_weights(),
    );
    assert_eq!(a.len(), b.len());
    for ((ea, wa), (eb, wb)) in a.iter().zip(&b) {
        assert_eq!(ea, eb);
        assert!((wa - wb).abs() < 1e-12, "{a:?} vs {b:?}");
    }
    let regrets: u64 = i.agents.iter().map(|a| a.adaptive_status().regrets).sum();
    assert!(regrets > 0);
}

/// A key evicted under `adaptive` and written again (no miss in between) leaves its
/// history entry in the buckets; reads that find the key must not charge it: regret is
/// for misses only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_charge_no_regret_whatever_history_their_buckets_hold() {
    let clock = ManualClock::new(clock_start_ms());
    let h = common::open(
        common::Backend::Local,
        DhtConfig {
            policy: RedisPolicy::Adaptive,
            ..DhtConfig::default()
        },
        Arc::new(clock.clone()),
        std::time::Duration::ZERO,
    )
    .await;
    let dht = h.dht.clone();
    let set = |n: usize| {
        let dht = dht.clone();
        async move {
            dht.set(0, &key("k", n), &[7u8; VALUE], SetOptions::default())
                .await
                .unwrap();
        }
    };
    for n in 0..300 {
        set(n).await;
    }
    dht.set_maxmemory(dht.used_memory());
    for n in 300..600 {
        set(n).await;
    }
    assert!(dht.stats().evicted > 0);
    assert!(dht.adaptive_status().history > 0, "evictions left history");
    // Room again, and every key written back without a read first.
    dht.set_maxmemory(0);
    for n in 0..600 {
        set(n).await;
    }
    let before = dht.adaptive_status().regrets;
    for n in 0..600 {
        assert!(dht.get(0, &key("k", n)).await.unwrap().is_some());
    }
    assert_eq!(
        dht.adaptive_status().regrets,
        before,
        "a hit charged regret"
    );
}
