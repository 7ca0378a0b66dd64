//! Each algorithm's ordering on hand-computed cases, and a model test: a cache that
//! evicts by [`victim`] over every key (sampling with K = all) makes exactly the
//! evictions of an exact reference implementation of the algorithm.

use std::collections::{HashMap, VecDeque};

use proptest::prelude::*;

use super::*;

fn key(size: u64, insert_ms: u64, last_ms: u64, freq: u64) -> Access {
    Access {
        size,
        insert_ms,
        last_ms,
        freq,
        word: 0,
    }
}

/// The order in which `alg` evicts `keys` (indexes), evicting one at a time.
fn eviction_order(alg: Algorithm, mut keys: Vec<Access>, now: u64) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..keys.len()).collect();
    let mut out = Vec::new();
    while let Some(i) = victim(alg, &keys, now) {
        out.push(ids.remove(i));
        keys.remove(i);
    }
    out
}

#[test]
fn recency_and_insertion_orders() {
    // (size, inserted, last access, accesses)
    let keys = vec![
        key(100, 10, 50, 3), // 0
        key(100, 20, 30, 1), // 1
        key(100, 5, 70, 2),  // 2
    ];
    assert_eq!(eviction_order(Algorithm::Lru, keys.clone(), 100), [1, 0, 2]);
    assert_eq!(eviction_order(Algorithm::Mru, keys.clone(), 100), [2, 0, 1]);
    assert_eq!(
        eviction_order(Algorithm::Fifo, keys.clone(), 100),
        [2, 0, 1]
    );
    // LFU: fewest accesses first.
    assert_eq!(eviction_order(Algorithm::Lfu, keys, 100), [1, 2, 0]);
}

#[test]
fn size_and_greedy_dual_orders() {
    let keys = vec![key(400, 0, 10, 1), key(100, 0, 20, 8), key(400, 0, 5, 4)];
    // SIZE: largest first, the least recently used of equal sizes first.
    assert_eq!(eviction_order(Algorithm::Size, keys.clone(), 30), [2, 0, 1]);
    // GDS with L = 0: 1/size, so the large ones first (ties: LRU).
    assert_eq!(eviction_order(Algorithm::Gds, keys.clone(), 30), [2, 0, 1]);
    // GDSF: freq/size = 1/400, 8/100, 4/400.
    assert_eq!(eviction_order(Algorithm::Gdsf, keys.clone(), 30), [0, 2, 1]);
    // LFUDA with L = 0 is LFU.
    assert_eq!(eviction_order(Algorithm::Lfuda, keys, 30), [0, 2, 1]);
}

#[test]
fn inflation_is_taken_at_the_last_access() {
    let alg = Algorithm::Gds;
    let mut old = alg.inserted(100, 0, 0.0);
    let fresh = alg.inserted(1000, 10, 5.0);
    // Inserted under L = 5: 5 + 1/1000 beats the old key's 0 + 1/100.
    assert!(alg.priority(&fresh, 20) > alg.priority(&old, 20));
    alg.accessed(&mut old, 30, 5.0);
    assert!(
        alg.priority(&old, 40) > alg.priority(&fresh, 40),
        "an access re-inflates"
    );
}

#[test]
fn lru_k_lirs_lrfu_and_hyperbolic_orders() {
    let lru2 = Algorithm::LruK;
    let mut once = lru2.inserted(1, 50, 0.0);
    let mut twice = lru2.inserted(1, 10, 0.0);
    lru2.accessed(&mut twice, 60, 0.0);
    // A key seen once has no second-to-last access: it goes first.
    assert_eq!(victim(lru2, &[once, twice], 100), Some(0));
    lru2.accessed(&mut once, 70, 0.0);
    assert_eq!(victim(lru2, &[once, twice], 100), Some(1), "10 < 50");

    let lirs = Algorithm::Lirs;
    let mut hot = lirs.inserted(1, 0, 0.0);
    lirs.accessed(&mut hot, 10, 0.0);
    let mut cold = lirs.inserted(1, 0, 0.0);
    lirs.accessed(&mut cold, 9, 0.0);
    lirs.accessed(&mut cold, 90, 0.0);
    // Reuse gaps 10 and 81, but `hot` was last seen 90 ms ago, which bounds its gap
    // from below: 90 goes before 81; a key seen once goes before both.
    let single = lirs.inserted(1, 95, 0.0);
    assert_eq!(
        eviction_order(lirs, vec![hot, cold, single], 100),
        [2, 0, 1]
    );
    let cold2 = cold;
    assert_eq!(
        eviction_order(lirs, vec![hot, cold2], 20),
        [1, 0],
        "at 20: 81 > 10"
    );

    let lrfu = Algorithm::Lrfu;
    let mut frequent = lrfu.inserted(1, 0, 0.0);
    for t in [1000, 2000, 3000] {
        lrfu.accessed(&mut frequent, t, 0.0);
    }
    let recent = lrfu.inserted(1, 3500, 0.0);
    let stale = lrfu.inserted(1, 0, 0.0);
    assert_eq!(
        eviction_order(lrfu, vec![frequent, recent, stale], 4000),
        [2, 1, 0]
    );

    let hyp = Algorithm::Hyperbolic;
    // 4 accesses in 1000 ms against 1 in 100 ms: 0.004 < 0.01.
    let a = key(1, 0, 900, 4);
    let b = key(1, 900, 950, 1);
    assert_eq!(victim(hyp, &[a, b], 1000), Some(0));
}

#[test]
fn names_round_trip() {
    for a in Algorithm::ALL {
        assert_eq!(Algorithm::parse(a.name()), Some(a));
    }
    assert_eq!(Algorithm::parse("LRU-K"), Some(Algorithm::LruK));
    assert_eq!(Algorithm::parse("arc"), None);
}

/// An exact implementation of each algorithm, written independently of `priority`:
/// every key's full access history, and the algorithm's textbook rule.
struct Reference {
    alg: Algorithm,
    /// key → (size, access times)
    keys: HashMap<u32, (u64, Vec<u64>)>,
    /// Insertion order (FIFO) and recency order (LRU/MRU), oldest first.
    inserted: VecDeque<u32>,
    recency: VecDeque<u32>,
    /// GreedyDual's H per key and its L.
    h: HashMap<u32, f64>,
    l: f64,
}

impl Reference {
    fn new(alg: Algorithm) -> Self {
        Reference {
            alg,
            keys: HashMap::new(),
            inserted: VecDeque::new(),
            recency: VecDeque::new(),
            h: HashMap::new(),
            l: 0.0,
        }
    }

    fn greedy_dual(&self, size: u64, freq: usize) -> f64 {
        let size = size.max(1) as f64;
        match self.alg {
            Algorithm::Gds => self.l + 1.0 / size,
            Algorithm::Gdsf => self.l + freq as f64 / size,
            _ => self.l + freq as f64,
        }
    }

    fn access(&mut self, k: u32, size: u64, now: u64) {
        let entry = self.keys.entry(k).or_insert((size, Vec::new()));
        entry.1.push(now);
        let freq = entry.1.len();
        if freq == 1 {
            self.inserted.push_back(k);
        }
        self.recency.retain(|x| *x != k);
        self.recency.push_back(k);
        let h = self.greedy_dual(size, freq);
        self.h.insert(k, h);
    }

    fn last(&self, k: u32) -> u64 {
        self.keys[&k].1.last().copied().unwrap_or(0)
    }

    /// The key the textbook algorithm evicts now; removes it.
    fn evict(&mut self, now: u64) -> u32 {
        let lf = |r: &Reference, k: u32| (r.keys[&k].1.len(), r.last(k));
        let by_last = |r: &Reference, ks: Vec<u32>| ks.into_iter().min_by_key(|k| r.last(*k));
        let all: Vec<u32> = self.keys.keys().copied().collect();
        let pick = match self.alg {
            Algorithm::Lru => self.recency.front().copied(),
            Algorithm::Mru => self.recency.back().copied(),
            Algorithm::Fifo => self.inserted.front().copied(),
            Algorithm::Lfu => all.iter().copied().min_by_key(|k| lf(self, *k)),
            Algorithm::Size => all
                .iter()
                .copied()
                .min_by_key(|k| (std::cmp::Reverse(self.keys[k].0), self.last(*k))),
            Algorithm::Gds | Algorithm::Gdsf | Algorithm::Lfuda => {
                let min = all.iter().map(|k| self.h[k]).fold(f64::INFINITY, f64::min);
                by_last(
                    self,
                    all.iter().copied().filter(|k| self.h[k] == min).collect(),
                )
            }
            Algorithm::LruK => {
                // Keys seen once go first, in insertion order; then the oldest
                // second-to-last access.
                let once: Vec<u32> = self
                    .inserted
                    .iter()
                    .copied()
                    .filter(|k| self.keys[k].1.len() < 2)
                    .collect();
                once.first().copied().or_else(|| {
                    all.iter().copied().min_by_key(|k| {
                        let t = &self.keys[k].1;
                        (t[t.len() - 2], self.last(*k))
                    })
                })
            }
            Algorithm::Lirs => all.iter().copied().min_by_key(|k| {
                let t = &self.keys[k].1;
                let gap = if t.len() < 2 {
                    u64::MAX
                } else {
                    t[t.len() - 1] - t[t.len() - 2]
                };
                (
                    std::cmp::Reverse(gap.max(now - self.last(*k))),
                    self.last(*k),
                )
            }),
            Algorithm::Lrfu => {
                let crf = |k: &u32| -> f64 {
                    self.keys[k]
                        .1
                        .iter()
                        .map(|t| 0.5f64.powf(LRFU_LAMBDA * (now - t) as f64 / 1000.0))
                        .sum()
                };
                let min = all.iter().map(crf).fold(f64::INFINITY, f64::min);
                // Floating point: the recursive and the summed forms agree to rounding.
                by_last(
                    self,
                    all.iter()
                        .copied()
                        .filter(|k| crf(k) <= min * (1.0 + 1e-9))
                        .collect(),
                )
            }
            Algorithm::Hyperbolic => all.iter().copied().min_by(|a, b| {
                let score = |k: &u32| {
                    let (_, t) = &self.keys[k];
                    t.len() as f64 / (now - t[0]).max(1) as f64
                };
                score(a)
                    .total_cmp(&score(b))
                    .then(self.last(*a).cmp(&self.last(*b)))
            }),
        };
        let victim = pick.expect("a full cache has keys");
        if self.alg.inflates() {
            self.l = self.h[&victim];
        }
        self.keys.remove(&victim);
        self.inserted.retain(|x| *x != victim);
        self.recency.retain(|x| *x != victim);
        self.h.remove(&victim);
        victim
    }
}

/// The cache under test: every key's [`Access`], evicting with [`victim`] over all of
/// them.
struct Sampled {
    alg: Algorithm,
    keys: Vec<(u32, Access)>,
    l: f64,
}

impl Sampled {
    fn access(&mut self, k: u32, size: u64, now: u64) {
        match self.keys.iter_mut().find(|(x, _)| *x == k) {
            Some((_, a)) => self.alg.accessed(a, now, self.l),
            None => self.keys.push((k, self.alg.inserted(size, now, self.l))),
        }
    }

    fn evict(&mut self, now: u64) -> u32 {
        let candidates: Vec<Access> = self.keys.iter().map(|(_, a)| *a).collect();
        let i = victim(self.alg, &candidates, now).expect("a full cache has keys");
        if self.alg.inflates() {
            self.l = self.alg.priority(&candidates[i], now);
        }
        self.keys.remove(i).0
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn sampling_every_key_evicts_what_the_exact_algorithm_does(
        trace in proptest::collection::vec((0u32..24, 1u64..3000), 1..400),
        sizes in proptest::collection::vec(1u64..5000, 24),
        capacity in 2usize..10,
    ) {
        for alg in Algorithm::ALL {
            let mut exact = Reference::new(alg);
            let mut sampled = Sampled { alg, keys: Vec::new(), l: 0.0 };
            let mut now = 1_000u64;
            for (step, (k, gap)) in trace.iter().enumerate() {
                now += gap;
                let size = sizes[*k as usize];
                if !exact.keys.contains_key(k) && exact.keys.len() == capacity {
                    let want = exact.evict(now);
                    let got = sampled.evict(now);
                    prop_assert_eq!(got, want, "{} at step {}", alg.name(), step);
                }
                exact.access(*k, size, now);
                sampled.access(*k, size, now);
            }
        }
    }
}
