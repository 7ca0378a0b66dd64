//! Key hashing: the Redis hash slot (which partition of the table, and which shard owns
//! the key) and the 64-bit hash that places the key inside its partition.

use xxhash_rust::xxh3::xxh3_64_with_seed;

const fn crc16_table() -> [u16; 256] {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut b = 0;
        while b < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            b += 1;
        }
        t[i] = crc;
        i += 1;
    }
    t
}

static CRC16: [u16; 256] = crc16_table();

/// CRC16-CCITT (XMODEM), the checksum Redis Cluster slots are built on.
fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ CRC16[((crc >> 8) as u8 ^ b) as usize]
    })
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
    fn candidate_buckets_differ() {
        for h in [0u64, u64::MAX, 0x1234_5678_9abc_def0] {
            let (a, b) = buckets(h, 4);
            assert!(a < 4 && b < 4 && a != b);
        }
    }
}
