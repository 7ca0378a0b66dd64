//! Key hashing: the Redis hash slot (which partition of the table, and which shard owns
//! the key) and the 64-bit hash that places the key inside its partition.

use crc::{CRC_16_XMODEM, Crc, Table};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// CRC16-CCITT (XMODEM), the checksum Redis Cluster slots are built on, by 16-byte
/// slices: each byte of a slice is looked up independently (a byte-at-a-time table is
/// a chain of dependent lookups, and was 2 % of a pipelined write's agent time).
static CRC16: Crc<u16, Table<16>> = Crc::<u16, Table<16>>::new(&CRC_16_XMODEM);

fn crc16(data: &[u8]) -> u16 {
    CRC16.checksum(data)
}

/// The Redis Cluster hash slot of `key` (honouring `{hash tags}`), as `CLUSTER KEYSLOT`.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&len| len > 0)
                .map(|len| &rest[..len])
        })
        .unwrap_or(key);
    crc16(tagged) & 0x3fff
}

/// The placement hash of a key in database `db`.
pub fn key_hash(db: u8, key: &[u8]) -> u64 {
    xxh3_64_with_seed(key, db as u64)
}

/// The key's fingerprint byte in slot words.
pub fn fingerprint(hash: u64) -> u8 {
    (hash >> 56) as u8
}

/// The two candidate buckets of a key in a subtable of `buckets` buckets (a power of two).
pub fn buckets(hash: u64, buckets: u64) -> (u64, u64) {
    let mask = buckets - 1;
    let a = (hash >> 24) & mask;
    let mut b = (hash >> 40) & mask;
    if a == b && buckets > 1 {
        b = (a + 1) & mask;
    }
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(key_slot(b"{}foo"), key_slot(b"{}foo"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }

    #[test]
    fn crc16_agrees_with_the_bitwise_definition_at_every_length() {
        // Redis's crc16.c, one bit at a time: the slices must give the same for keys
        // shorter than, equal to and longer than a slice.
        fn bitwise(data: &[u8]) -> u16 {
            let mut crc = 0u16;
            for &byte in data {
                crc ^= u16::from(byte) << 8;
                for _ in 0..8 {
                    crc = if crc & 0x8000 != 0 {
                        (crc << 1) ^ 0x1021
                    } else {
                        crc << 1
                    };
                }
            }
            crc
        }
        let data: Vec<u8> = (0..80u32).map(|i| (i * 37 + 11) as u8).collect();
        for len in 0..=data.len() {
            assert_eq!(crc16(&data[..len]), bitwise(&data[..len]), "length {len}");
        }
    }

    #[test]
    fn candidate_buckets_differ() {
        for h in [0u64, u64::MAX, 0x1234_5678_9abc_def0] {
            let (a, b) = buckets(h, 4);
            assert!(a < 4 && b < 4 && a != b);
        }
    }
}
