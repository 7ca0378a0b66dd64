//! Cache workloads that change phase, as look-aside GET traces: the key of each
//! request and its value size. Real cache traffic shifts (a scan, a new hot set, a
//! daily cycle) and no single fixed policy wins every phase; these traces exercise that.
//!
//! | name | what |
//! |---|---|
//! | `zipf-moving` | Zipf 0.99 over the keys; the hot set moves to fresh keys every phase |
//! | `zipf-scan` | Zipf 0.99, and every phase a sequential scan of once-seen keys |
//! | `loop` | a cycle over more keys than the cache holds, with a little Zipf noise |
//! | `mix` | phases alternating a moving hot set (recency wins) and a stable Zipf under scans (frequency wins) |

use rand::{RngExt, SeedableRng};

use crate::loadgen::keys::Zipf;

/// One request: a key id and its value's size.
pub type Request = (u64, u32);

pub const WORKLOADS: [&str; 4] = ["zipf-moving", "zipf-scan", "loop", "mix"];

/// A key's value size: 100–1 000 bytes, fixed per key (a hash of its id).
pub fn size_of(key: u64) -> u32 {
    let h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
    100 + (h % 901) as u32
}

/// `requests` requests of workload `name` over `keys` keys, in `phases` phases.
pub fn generate(
    name: &str,
    keys: u64,
    requests: u64,
    phases: u64,
    seed: u64,
) -> Option<Vec<Request>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let zipf = Zipf::new(keys, 0.99);
    let phase_len = (requests / phases.max(1)).max(1);
    let mut out = Vec::with_capacity(requests as usize);
    // Keys past `keys` are one-time scan keys.
    let mut next_scan_key = keys;
    for i in 0..requests {
        let phase = i / phase_len;
        let at = i % phase_len;
        let key = match name {
            "zipf-moving" => {
                // Each phase's hot keys are a fresh quarter of the key space.
                (zipf.sample(&mut rng) + phase * keys / 4) % keys
            }
            "zipf-scan" => {
                // The last fifth of each phase is a scan of keys never seen again.
                if at >= phase_len * 4 / 5 {
                    next_scan_key += 1;
                    next_scan_key
                } else {
                    zipf.sample(&mut rng)
                }
            }
            "loop" => {
                if rng.random::<f64>() < 0.1 {
                    zipf.sample(&mut rng)
                } else {
                    i % keys
                }
            }
            "mix" => {
                if phase.is_multiple_of(2) {
                    // Recency phase: a hot set that moves every tenth of the phase.
                    let shift = (at * 10 / phase_len) * keys / 7;
                    (zipf.sample(&mut rng) + shift + phase * keys / 3) % keys
                } else if at % 4 == 3 {
                    // Frequency phase: a stable Zipf, a quarter of it a scan.
                    next_scan_key += 1;
                    next_scan_key
                } else {
                    zipf.sample(&mut rng)
                }
            }
            _ => return None,
        };
        out.push((key, size_of(key)));
    }
    Some(out)
}

/// `trace` as `dmc-bench trace` reads it: `timestamp_ms,get,key:ID,size` rows, `rate`
/// requests a second.
pub fn to_csv(trace: &[Request], rate: u64) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(trace.len() * 24);
    for (i, (key, size)) in trace.iter().enumerate() {
        let ms = i as u64 * 1000 / rate.max(1);
        let _ = writeln!(out, "{ms},get,key:{key},{size}");
    }
    out
}

/// Bytes of every distinct key of `trace` (the cache size that holds it all).
pub fn footprint(trace: &[Request]) -> u64 {
    let mut seen = std::collections::HashSet::new();
    trace
        .iter()
        .filter(|(k, _)| seen.insert(*k))
        .map(|(_, s)| u64::from(*s))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_generate_and_unknown_ones_do_not() {
        for w in WORKLOADS {
            let t = generate(w, 1000, 10_000, 4, 1).unwrap();
            assert_eq!(t.len(), 10_000);
            assert!(footprint(&t) > 0);
        }
        assert!(generate("nope", 10, 10, 1, 1).is_none());
    }

    #[test]
    fn traces_write_as_replayable_csv() {
        let csv = to_csv(&[(7, 120), (9, 300), (7, 120)], 2000);
        assert_eq!(csv, "0,get,key:7,120\n0,get,key:9,300\n1,get,key:7,120\n");
    }

    #[test]
    fn a_moving_hot_set_moves() {
        let t = generate("zipf-moving", 1000, 8000, 4, 7).unwrap();
        let top = |s: &[Request]| {
            let mut counts = std::collections::HashMap::new();
            for (k, _) in s {
                *counts.entry(*k).or_insert(0u32) += 1;
            }
            counts.into_iter().max_by_key(|(_, c)| *c).map(|(k, _)| k)
        };
        assert_ne!(top(&t[..2000]), top(&t[6000..]));
    }
}
