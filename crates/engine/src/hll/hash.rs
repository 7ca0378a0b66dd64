//! Element hashing: Redis's `MurmurHash64A` (the endian-neutral variant in
//! `hyperloglog.c`) and `hllPatLen`, which turns an element into a register
//! index and a "run of zeroes + 1" count.
//!
//! ```text
//!   64-bit hash (seed 0xadc83b19)
//!   +-------------------------------------------+----------------+
//!   | bits 63..14: zero-run source (Q = 50 bits)| bits 13..0     |
//!   +-------------------------------------------+----------------+
//!                         |                       register index (P = 14)
//!   count = 1 + trailing zeroes of (hash >> 14 | 1 << 50)   -> 1..=51
//! ```

use super::{HLL_P, HLL_Q, REGISTERS};

/// The seed Redis passes to `MurmurHash64A` for HyperLogLog elements.
pub const HLL_SEED: u32 = 0xadc8_3b19;

const _: () = assert!(HLL_P as usize + HLL_Q == 64);
const _: () = assert!(REGISTERS == 1 << HLL_P);

/// `MurmurHash64A` exactly as Redis 7.0 computes it (little-endian reads of
/// 8-byte blocks, tail bytes folded in with the `switch` fall-through).
///
/// Redis passes the length as a C `int`; elements of 2 GiB or more (which Redis's
/// default `proto-max-bulk-len` of 512 MB cannot carry) are hashed with their full
/// length here.
pub fn murmur_hash64a(key: &[u8], seed: u32) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let len = key.len() as u64;
    let mut h: u64 = u64::from(seed) ^ len.wrapping_mul(M);

    let mut blocks = key.chunks_exact(8);
    for block in &mut blocks {
        let mut word = [0u8; 8];
        word.copy_from_slice(block);
        let mut k = u64::from_le_bytes(word);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }

    let tail = blocks.remainder();
    if !tail.is_empty() {
        // Cases 7..1 of the C switch: byte i goes to bits 8*i.
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }

    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// `hllPatLen`: the register an element maps to and the length of its
/// `000..1` pattern (1..=51).
pub fn pattern(element: &[u8]) -> (usize, u8) {
    let hash = murmur_hash64a(element, HLL_SEED);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> HLL_P) | (1u64 << HLL_Q);
    // trailing_zeros() <= 50 thanks to the guard bit, so this fits a u8.
    let count = (rest.trailing_zeros() + 1) as u8;
    (index, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by Redis 7.0.15's own `MurmurHash64A` compiled with gcc.
    const KNOWN: &[(&str, u64)] = &[
        ("", 0xd8dfea6585bc9732),
        ("a", 0x53d2470a9b43b1a7),
        ("ab", 0x0eaed676437142cf),
        ("abc", 0x77ec90aeb374e502),
        ("abcdefg", 0x22fe613bb08c9602),
        ("abcdefgh", 0xf3a65df559914567),
        ("abcdefghi", 0x834fba4d9152daf7),
        ("hello world", 0xa919bc3051f624b7),
        ("e0", 0x4e13fe6539844526),
        ("e1", 0x69ee434ef417be4d),
        ("e99999", 0x1e145e81c8200a76),
        ("0123456789abcdef0", 0xca1802fd45a1ff6c),
    ];

    #[test]
    fn murmur_matches_redis() {
        for &(s, want) in KNOWN {
            assert_eq!(murmur_hash64a(s.as_bytes(), HLL_SEED), want, "{s:?}");
        }
        assert_eq!(murmur_hash64a(b"abc", 0), 0x9cc9c33498a95efb);
    }

    #[test]
    fn pattern_derivation() {
        // "a": 0x53d2470a9b43b1a7 -> index 0x31a7, rest = hash >> 14.
        let (idx, count) = pattern(b"a");
        assert_eq!(idx, 0x53d2470a9b43b1a7u64 as usize & 0x3fff);
        let rest = 0x53d2470a9b43b1a7u64 >> 14;
        assert_eq!(u32::from(count), rest.trailing_zeros() + 1);
        for i in 0..10_000u32 {
            let (idx, count) = pattern(format!("x{i}").as_bytes());
            assert!(idx < REGISTERS);
            assert!((1..=51).contains(&count));
        }
    }
}
