//! Types every DMC process shares.
//!
//! [`ByteSize`], the human-readable sizes (`"4gb"`, `"16mb"`, `1048576`) that every
//! config file and flag accepts, with Redis's unit rules; and [`shards`], the logical
//! shard map (hash slots → shards → agents, with epochs); [`cluster`], the map the
//! cluster manager pushes to agents; [`policy`], the `maxmemory-policy` names;
//! [`metrics`], the catalog of every exported metric; and [`rng`], the one
//! random-number source.

pub mod cluster;

/// Equality of two byte strings in time that depends only on their lengths: for
/// passwords and the cluster secret, so a peer cannot learn them a byte at a time.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Keep the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

pub mod metrics;
pub mod policy;
pub mod rng;
pub mod shards;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A size in bytes written the way Redis config writes it: a plain number, or a number
/// with `k`/`kb`/`m`/`mb`/`g`/`gb` (case-insensitive). Like Redis, `k`, `m`, `g` are
/// powers of 1000 and `kb`, `mb`, `gb` powers of 1024.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ByteSize(pub u64);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {0:?}: expected a number with an optional k, kb, m, mb, g or gb suffix")]
pub struct BadSize(pub String);

impl FromStr for ByteSize {
    type Err = BadSize;
    fn from_str(s: &str) -> Result<Self, BadSize> {
        let t = s.trim().to_ascii_lowercase();
        let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(digits_end);
        let n: u64 = num.parse().map_err(|_| BadSize(s.to_string()))?;
        let mul: u64 = match unit.trim() {
            "" | "b" => 1,
            "k" => 1000,
            "kb" => 1 << 10,
            "m" => 1000 * 1000,
            "mb" => 1 << 20,
            "g" => 1000 * 1000 * 1000,
            "gb" => 1 << 30,
            _ => return Err(BadSize(s.to_string())),
        };
        n.checked_mul(mul)
            .map(ByteSize)
            .ok_or_else(|| BadSize(s.to_string()))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, m) in [("gb", 1u64 << 30), ("mb", 1 << 20), ("kb", 1 << 10)] {
            if n >= m && n.is_multiple_of(m) {
                return write!(f, "{}{unit}", n / m);
            }
        }
        write!(f, "{n}")
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(n) => Ok(ByteSize(n)),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_redis_units() {
        assert_eq!("100".parse::<ByteSize>().unwrap().0, 100);
        assert_eq!("4gb".parse::<ByteSize>().unwrap().0, 4 << 30);
        assert_eq!("4G".parse::<ByteSize>().unwrap().0, 4_000_000_000);
        assert_eq!("16mb".parse::<ByteSize>().unwrap().0, 16 << 20);
        assert!("12xb".parse::<ByteSize>().is_err());
        assert!("".parse::<ByteSize>().is_err());
        assert!("99999999999999gb".parse::<ByteSize>().is_err());
        assert_eq!(ByteSize(16 << 20).to_string(), "16mb");
    }

    #[test]
    fn sizes_deserialize_from_numbers_and_strings() {
        #[derive(Deserialize)]
        struct C {
            a: ByteSize,
            b: ByteSize,
        }
        let c: C = toml::from_str("a = 1024\nb = \"2mb\"").unwrap();
        assert_eq!((c.a.0, c.b.0), (1024, 2 << 20));
    }
}
