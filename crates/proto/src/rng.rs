//! The one random-number source of DMC's processes: a small, fast, non-cryptographic
//! per-thread generator (xorshift64*), seeded from the OS's entropy.
//!
//! Eviction sampling, LFU increments and the local cache's victim sampling need a few
//! random bits per operation, on the hot path, from many tasks; ids (a run id, a
//! cluster id) need a few random hex digits once. Nothing here is fit for secrets.

use std::cell::Cell;

thread_local! {
    // 0 until the thread's first draw seeds it (a const initializer needs no lazy-init
    // check on every access; xorshift never reaches 0 from a non-zero state).
    static STATE: Cell<u64> = const { Cell::new(0) };
}

fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // std's RandomState is keyed from the OS's entropy once per thread.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish() | 1
}

/// A uniformly distributed u64 (xorshift64*).
pub fn next_u64() -> u64 {
    STATE.with(|s| {
        let mut x = s.get();
        if x == 0 {
            x = seed();
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

/// Uniform in [0, 1).
pub fn next_f64() -> f64 {
    (next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// Uniform in [0, n); `n` must be positive.
pub fn below(n: u64) -> u64 {
    next_u64() % n
}

/// `digits` random lowercase hex digits (an id: INFO's `run_id`, a cluster id).
pub fn hex_id(digits: usize) -> String {
    let mut id = String::with_capacity(digits + 16);
    while id.len() < digits {
        id.push_str(&format!("{:016x}", next_u64()));
    }
    id.truncate(digits);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_range_and_ids_are_hex() {
        for _ in 0..1000 {
            assert!(below(7) < 7);
            let f = next_f64();
            assert!((0.0..1.0).contains(&f));
        }
        let id = hex_id(40);
        assert_eq!(id.len(), 40);
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(hex_id(40), id);
    }
}
