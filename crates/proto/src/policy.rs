//! Redis's `maxmemory-policy` names (and DMC's `adaptive`), shared by every process: the manager validates
//! an instance's policy with them, agents parse config and `CONFIG SET` with them,
//! and the hash table (`dmc-dht`) implements eviction for each. Only names live here;
//! what a policy does is the hash table's.

/// Ditto's twelve caching algorithms (seed `000_…`, thesis ch. 3, Table 3.3), by name.
/// Redis's `*-lru` and `*-lfu` policies are LRU and LFU over the slot's inline metadata
/// at Redis's precision; the other ten are `allkeys-<name>` and `volatile-<name>` and
/// rank keys by the table's extended access metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Least recently used.
    Lru,
    /// Least frequently used (ties: least recently used).
    Lfu,
    /// Most recently used.
    Mru,
    /// First in, first out.
    Fifo,
    /// Largest first (ties: least recently used).
    Size,
    /// GreedyDual-Size: `L + 1/size`, `L` as of the key's last access.
    Gds,
    /// GreedyDual-Size with frequency: `L + freq/size`.
    Gdsf,
    /// LFU with dynamic aging: `L + freq`.
    Lfuda,
    /// LIRS approximated as Ditto does: the largest inter-reference recency first.
    Lirs,
    /// Least recently/frequently used: the smallest combined recency-frequency value.
    Lrfu,
    /// LRU-2: the oldest second-to-last access; FIFO among keys seen once.
    LruK,
    /// Hyperbolic caching: the smallest `freq / age`.
    Hyperbolic,
}

impl Algorithm {
    pub const ALL: [Algorithm; 12] = [
        Algorithm::Lru,
        Algorithm::Lfu,
        Algorithm::Mru,
        Algorithm::Fifo,
        Algorithm::Size,
        Algorithm::Gds,
        Algorithm::Gdsf,
        Algorithm::Lfuda,
        Algorithm::Lirs,
        Algorithm::Lrfu,
        Algorithm::LruK,
        Algorithm::Hyperbolic,
    ];

    /// The ten that have `allkeys-` and `volatile-` policies of their own: all but
    /// LRU and LFU, which are Redis's.
    pub const EXTENDED: [Algorithm; 10] = {
        let mut out = [Algorithm::Mru; 10];
        let mut i = 0;
        while i < out.len() {
            out[i] = Algorithm::ALL[i + 2];
            i += 1;
        }
        out
    };

    /// The algorithm's name, and its `allkeys-` and `volatile-` policy names.
    fn names(self) -> [&'static str; 3] {
        match self {
            Algorithm::Lru => ["lru", "allkeys-lru", "volatile-lru"],
            Algorithm::Lfu => ["lfu", "allkeys-lfu", "volatile-lfu"],
            Algorithm::Mru => ["mru", "allkeys-mru", "volatile-mru"],
            Algorithm::Fifo => ["fifo", "allkeys-fifo", "volatile-fifo"],
            Algorithm::Size => ["size", "allkeys-size", "volatile-size"],
            Algorithm::Gds => ["gds", "allkeys-gds", "volatile-gds"],
            Algorithm::Gdsf => ["gdsf", "allkeys-gdsf", "volatile-gdsf"],
            Algorithm::Lfuda => ["lfuda", "allkeys-lfuda", "volatile-lfuda"],
            Algorithm::Lirs => ["lirs", "allkeys-lirs", "volatile-lirs"],
            Algorithm::Lrfu => ["lrfu", "allkeys-lrfu", "volatile-lrfu"],
            Algorithm::LruK => ["lru-k", "allkeys-lru-k", "volatile-lru-k"],
            Algorithm::Hyperbolic => ["hyperbolic", "allkeys-hyperbolic", "volatile-hyperbolic"],
        }
    }

    pub fn name(self) -> &'static str {
        self.names()[0]
    }

    /// The algorithm with this name, case-insensitively.
    pub fn parse(name: &str) -> Option<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }
}

/// Redis's `maxmemory-policy` family, DMC's `adaptive`, and Ditto's other ten
/// algorithms over all keys or over keys with a TTL.
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
    /// One of [`Algorithm::EXTENDED`] over every key.
    AllKeys(Algorithm),
    /// One of [`Algorithm::EXTENDED`] over keys with a TTL.
    Volatile(Algorithm),
}

const fn extended_policies() -> [RedisPolicy; 29] {
    let mut all = [RedisPolicy::NoEviction; 29];
    all[1] = RedisPolicy::AllKeysLru;
    all[2] = RedisPolicy::AllKeysLfu;
    all[3] = RedisPolicy::AllKeysRandom;
    all[4] = RedisPolicy::VolatileLru;
    all[5] = RedisPolicy::VolatileLfu;
    all[6] = RedisPolicy::VolatileRandom;
    all[7] = RedisPolicy::VolatileTtl;
    all[8] = RedisPolicy::Adaptive;
    let mut i = 0;
    while i < Algorithm::EXTENDED.len() {
        all[9 + 2 * i] = RedisPolicy::AllKeys(Algorithm::EXTENDED[i]);
        all[10 + 2 * i] = RedisPolicy::Volatile(Algorithm::EXTENDED[i]);
        i += 1;
    }
    all
}

impl RedisPolicy {
    /// Every policy: Redis's eight, `adaptive`, then each extended algorithm's
    /// `allkeys-` and `volatile-` forms.
    pub const ALL: [RedisPolicy; 29] = extended_policies();

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
            RedisPolicy::AllKeys(a) => a.names()[1],
            RedisPolicy::Volatile(a) => a.names()[2],
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
                | RedisPolicy::Volatile(_)
        )
    }

    /// The Ditto algorithm the policy ranks keys by, if it is one of them.
    pub fn algorithm(self) -> Option<Algorithm> {
        match self {
            RedisPolicy::AllKeysLru | RedisPolicy::VolatileLru => Some(Algorithm::Lru),
            RedisPolicy::AllKeysLfu | RedisPolicy::VolatileLfu => Some(Algorithm::Lfu),
            RedisPolicy::AllKeys(a) | RedisPolicy::Volatile(a) => Some(a),
            _ => None,
        }
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
        assert_eq!(
            RedisPolicy::parse("allkeys-lru-k"),
            Some(RedisPolicy::AllKeys(Algorithm::LruK))
        );
        assert!(RedisPolicy::parse("volatile-gdsf").is_some_and(RedisPolicy::volatile));
        let mut names: Vec<&str> = RedisPolicy::ALL.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            RedisPolicy::ALL.len(),
            "every name is distinct"
        );
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::parse(a.name()), Some(a));
        }
        assert!(!Algorithm::EXTENDED.contains(&Algorithm::Lru));
        assert!(!Algorithm::EXTENDED.contains(&Algorithm::Lfu));
    }
}
