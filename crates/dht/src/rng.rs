//! A small, fast, non-cryptographic PRNG for sampling and probabilistic counters.
//!
//! Eviction sampling and LFU increments need a few random bits per operation, on the
//! hot path, from many tasks; a per-thread xorshift is all they need.

use std::cell::Cell;

thread_local! {
    static STATE: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    let local = 0u8;
    (t ^ (&local as *const u8 as u64).rotate_left(32)) | 1
}

/// A uniformly distributed u64 (xorshift64*).
pub fn next_u64() -> u64 {
    STATE.with(|s| {
        let mut x = s.get();
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
