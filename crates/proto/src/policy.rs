//! Redis's `maxmemory-policy` names (and DMC's `adaptive`), shared by every process: the manager validates
//! an instance's policy with them, agents parse config and `CONFIG SET` with them,
//! and the hash table (`dmc-dht`) implements eviction for each. Only names live here;
//! what a policy does is the hash table's.

/// Redis's `maxmemory-policy` family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisPolicy {
    NoEviction,
    AllKeysLru,
    AllKeysLfu,
    AllKeysRandom,
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
    /// Ditto's adaptive policy: several experts, weighted by regret (not Redis's).
    Adaptive,
}

impl RedisPolicy {
    pub const ALL: [RedisPolicy; 9] = [
        RedisPolicy::NoEviction,
        RedisPolicy::AllKeysLru,
        RedisPolicy::AllKeysLfu,
        RedisPolicy::AllKeysRandom,
        RedisPolicy::VolatileLru,
        RedisPolicy::VolatileLfu,
        RedisPolicy::VolatileRandom,
        RedisPolicy::VolatileTtl,
        RedisPolicy::Adaptive,
    ];

    /// The policy with this name, case-insensitively.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// The `maxmemory-policy` name.
    pub fn name(self) -> &'static str {
        match self {
            RedisPolicy::NoEviction => "noeviction",
            RedisPolicy::AllKeysLru => "allkeys-lru",
            RedisPolicy::AllKeysLfu => "allkeys-lfu",
            RedisPolicy::AllKeysRandom => "allkeys-random",
            RedisPolicy::VolatileLru => "volatile-lru",
            RedisPolicy::VolatileLfu => "volatile-lfu",
            RedisPolicy::VolatileRandom => "volatile-random",
            RedisPolicy::VolatileTtl => "volatile-ttl",
            RedisPolicy::Adaptive => "adaptive",
        }
    }

    /// Whether the policy evicts only keys with a TTL.
    pub fn volatile(self) -> bool {
        matches!(
            self,
            RedisPolicy::VolatileLru
                | RedisPolicy::VolatileLfu
                | RedisPolicy::VolatileRandom
                | RedisPolicy::VolatileTtl
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip() {
        for p in RedisPolicy::ALL {
            assert_eq!(RedisPolicy::parse(p.name()), Some(p));
        }
        assert_eq!(
            RedisPolicy::parse("ALLKEYS-LRU"),
            Some(RedisPolicy::AllKeysLru)
        );
        assert_eq!(RedisPolicy::parse("lru"), None);
    }
}
