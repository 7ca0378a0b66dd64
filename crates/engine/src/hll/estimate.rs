//! The cardinality estimator of Redis 7.0 (`hllCount`): Otmar Ertl's improved
//! estimator ("New cardinality estimation algorithms for HyperLogLog
//! sketches", arXiv:1702.01284) over a histogram of register values.
//!
//! ```text
//!   histogram h[0..64]  (h[v] = number of registers holding v)
//!   z  = m * tau((m - h[Q+1]) / m)
//!   for j = Q ..= 1:  z = (z + h[j]) * 0.5
//!   z += m * sigma(h[0] / m)
//!   E  = llroundl(ALPHA_INF * m * m / z)          m = 16384, Q = 50
//! ```
//!
//! Every floating-point operation is done in the same order and precision as
//! the C code (x86-64 SSE2 doubles, no FMA; `pow(x, 2)` is `x * x`), so the
//! integers are identical. Histogram slots 52..63 (only reachable through a
//! hand-made dense value) are counted but, as in Redis, unused by the formula.

use super::{HLL_Q, REGISTERS};

/// `HLL_ALPHA_INF`: 0.5 / ln(2), the C source's literal.
#[allow(clippy::excessive_precision)]
const HLL_ALPHA_INF: f64 = 0.721_347_520_444_481_703_680;

/// Histogram size: 6-bit registers hold 0..=63.
pub const HISTO_LEN: usize = 64;

const _: () = assert!(HLL_Q + 1 < HISTO_LEN);

/// `hllSigma`.
fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0f64;
    let mut z = x;
    loop {
        x *= x;
        let z_prime = z;
        z += x * y;
        y += y;
        if z_prime == z {
            return z;
        }
    }
}

/// `hllTau`.
fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0f64;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let z_prime = z;
        y *= 0.5;
        let d = 1.0 - x;
        z -= d * d * y;
        if z_prime == z {
            return z / 3.0;
        }
    }
}

/// `(uint64_t)(double)llroundl(v)` as Redis evaluates it on x86-64: round half
/// away from zero; a value that does not fit a `long long` (or NaN) gives
/// `LLONG_MIN`, which then converts to 2^63 (it never happens for registers
/// produced by hashing unless every register is >= 51).
fn redis_round(v: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    let r = v.round();
    let ll: i64 = if !(-TWO_63..TWO_63).contains(&r) {
        i64::MIN
    } else {
        r as i64
    };
    // `double E = llroundl(..)` then `(uint64_t) E`.
    let e = ll as f64;
    if e < 0.0 { (e as i64) as u64 } else { e as u64 }
}

/// Cardinality from a register histogram, exactly as `hllCount` computes it.
pub fn from_histogram(histo: &[u32; HISTO_LEN]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - f64::from(histo[HLL_Q + 1])) / m);
    for &h in histo[1..=HLL_Q].iter().rev() {
        z += f64::from(h);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histo[0]) / m);
    redis_round(HLL_ALPHA_INF * m * m / z)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_zero() {
        let mut h = [0u32; HISTO_LEN];
        h[0] = REGISTERS as u32;
        assert_eq!(from_histogram(&h), 0);
    }

    #[test]
    fn one_register_set() {
        // One element added: Redis's PFCOUNT answers 1.
        let mut h = [0u32; HISTO_LEN];
        h[0] = REGISTERS as u32 - 1;
        h[1] = 1;
        assert_eq!(from_histogram(&h), 1);
    }

    #[test]
    fn saturated_registers_overflow_like_redis() {
        // z == 0: ALPHA*m*m/0 = inf -> llroundl gives LLONG_MIN -> 2^63.
        let mut h = [0u32; HISTO_LEN];
        h[63] = REGISTERS as u32;
        assert_eq!(from_histogram(&h), 1u64 << 63);
    }

    #[test]
    fn rounding() {
        assert_eq!(redis_round(2.5), 3);
        assert_eq!(redis_round(2.4999), 2);
        assert_eq!(redis_round(f64::INFINITY), 1u64 << 63);
        assert_eq!(redis_round(f64::NAN), 1u64 << 63);
    }
}
