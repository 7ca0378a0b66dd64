//! Hit ratios of the caching algorithms on a trace, simulated: a cache of a byte
//! budget that evicts by sampling `k` keys and taking the algorithm's lowest priority
//! (`k = 0`: every key, the exact algorithm), as DMC's table evicts.

use std::collections::HashMap;

use dmc_dht::algorithms::{Access, Algorithm, Rules, victim};
use rand::{RngExt, SeedableRng};

use super::workloads::Request;

/// The hit ratio of `alg` on `trace` with `capacity` bytes, sampling `k` keys (0: all).
pub fn hit_ratio(alg: Algorithm, trace: &[Request], capacity: u64, k: usize, seed: u64) -> f64 {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut keys: Vec<(u64, Access)> = Vec::new();
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut used = 0u64;
    let mut inflation = 0.0f64;
    let mut hits = 0u64;
    let mut sample: Vec<usize> = Vec::with_capacity(k.max(1));
    let mut candidates: Vec<Access> = Vec::new();
    for (i, (key, size)) in trace.iter().enumerate() {
        // One millisecond per request: the algorithms' clocks.
        let now = 1 + i as u64;
        if let Some(&at) = index.get(key) {
            hits += 1;
            if let Some((_, a)) = keys.get_mut(at) {
                alg.accessed(a, now, inflation);
            }
            continue;
        }
        let size = u64::from(*size);
        if size > capacity {
            continue;
        }
        while used + size > capacity && !keys.is_empty() {
            sample.clear();
            if k == 0 || k >= keys.len() {
                sample.extend(0..keys.len());
            } else {
                for _ in 0..k {
                    sample.push(rng.random_range(0..keys.len()));
                }
            }
            candidates.clear();
            candidates.extend(sample.iter().map(|&s| keys[s].1));
            let Some(v) = victim(alg, &candidates, now) else {
                break;
            };
            let at = sample[v];
            if alg.inflates() {
                inflation = alg.priority(&keys[at].1, now);
            }
            let (gone, a) = keys.swap_remove(at);
            used -= a.size;
            index.remove(&gone);
            if let Some((moved, _)) = keys.get(at) {
                index.insert(*moved, at);
            }
        }
        index.insert(*key, keys.len());
        keys.push((*key, alg.inserted(size, now, inflation)));
        used += size;
    }
    hits as f64 / trace.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_that_holds_everything_misses_only_first_accesses() {
        let trace: Vec<Request> = (0..1000u64).map(|i| (i % 10, 100)).collect();
        for alg in Algorithm::ALL {
            let r = hit_ratio(alg, &trace, 10_000, 5, 1);
            assert!((r - 0.99).abs() < 1e-9, "{} {r}", alg.name());
        }
    }

    #[test]
    fn a_loop_larger_than_the_cache_defeats_lru_and_not_mru() {
        // 20 keys in a loop, room for 10: LRU always evicts the next key needed.
        let trace: Vec<Request> = (0..2000u64).map(|i| (i % 20, 100)).collect();
        assert_eq!(hit_ratio(Algorithm::Lru, &trace, 1000, 0, 1), 0.0);
        assert!(hit_ratio(Algorithm::Mru, &trace, 1000, 0, 1) > 0.4);
    }
}
