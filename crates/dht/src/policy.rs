//! Eviction policies as Ditto expresses them: `update` says how an access changes a
//! key's metadata, `priority` ranks sampled keys (lowest is evicted), and `eligible`
//! says which keys a policy may evict at all.
//!
//! Every policy keeps both the LRU clock and the LFU counter up to date on access, so
//! `CONFIG SET maxmemory-policy` takes effect at once without a warm-up.

pub use dmc_proto::policy::RedisPolicy;

use crate::layout::SlotMeta;

/// Redis's initial LFU counter value for new keys (`LFU_INIT_VAL`).
pub const LFU_INIT: u8 = 5;
/// Redis's `lfu-log-factor` default.
pub const LFU_LOG_FACTOR: f64 = 10.0;
/// Redis's `lfu-decay-time` default, in minutes.
pub const LFU_DECAY_MINUTES: u64 = 1;

/// The time inputs of a policy decision.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// Milliseconds since the pool was formatted (the expiry time base).
    pub pool_ms: u64,
    /// The LRU clock: seconds since the pool was formatted, mod 2^16.
    pub access: u16,
}

impl Now {
    /// Seconds since `meta` was last accessed (the clock wraps every 18.2 hours).
    pub fn idle_secs(&self, meta: SlotMeta) -> u64 {
        self.access.wrapping_sub(meta.access()) as u64
    }
}

/// How one access changes a key's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Touch {
    /// Added to the LFU counter (never past 255).
    pub lfu_add: u8,
    /// The new LRU clock value.
    pub access: u16,
}

/// Redis's probabilistic logarithmic counter increment; `r` is uniform in [0, 1).
pub fn lfu_should_increment(counter: u8, r: f64) -> bool {
    if counter == u8::MAX {
        return false;
    }
    let base = counter.saturating_sub(LFU_INIT) as f64;
    r < 1.0 / (base * LFU_LOG_FACTOR + 1.0)
}

/// The LFU counter after decay for idle time, as Redis's `LFUDecrAndReturn`.
pub fn lfu_decayed(meta: SlotMeta, now: &Now) -> u8 {
    let periods = now.idle_secs(meta) / 60 / LFU_DECAY_MINUTES;
    meta.lfu().saturating_sub(periods.min(255) as u8)
}

pub trait Policy: Send + Sync {
    /// The `maxmemory-policy` name.
    fn name(&self) -> &'static str;
    /// Whether this policy evicts at all (`noeviction` does not).
    fn evicts(&self) -> bool {
        true
    }
    /// Whether the key may be evicted under this policy.
    fn eligible(&self, meta: SlotMeta) -> bool;
    /// Rank of a sampled key; the lowest is evicted. `noise` is uniform in [0, 1).
    fn priority(&self, meta: SlotMeta, now: &Now, noise: f64) -> f64;
    /// How an access changes the key's metadata; `r` is uniform in [0, 1).
    fn update(&self, meta: SlotMeta, now: &Now, r: f64) -> Touch {
        Touch {
            lfu_add: lfu_should_increment(meta.lfu(), r) as u8,
            access: now.access,
        }
    }
}

impl Policy for RedisPolicy {
    fn name(&self) -> &'static str {
        RedisPolicy::name(*self)
    }

    fn evicts(&self) -> bool {
        *self != RedisPolicy::NoEviction
    }

    fn eligible(&self, meta: SlotMeta) -> bool {
        match self {
            RedisPolicy::NoEviction => false,
            p if p.volatile() => meta.expire() != 0,
            _ => true,
        }
    }

    fn priority(&self, meta: SlotMeta, now: &Now, noise: f64) -> f64 {
        let idle = now.idle_secs(meta) as f64;
        match self {
            // The adaptive policy's experts choose in `table/adaptive.rs`; where one
            // rank is needed (an exhaustive search), LRU's.
            RedisPolicy::AllKeysLru | RedisPolicy::VolatileLru | RedisPolicy::Adaptive => -idle,
            RedisPolicy::AllKeysLfu | RedisPolicy::VolatileLfu => {
                lfu_decayed(meta, now) as f64 - idle / 65536.0
            }
            RedisPolicy::AllKeysRandom | RedisPolicy::VolatileRandom => noise,
            RedisPolicy::VolatileTtl => meta.expire() as f64,
            RedisPolicy::NoEviction => f64::INFINITY,
            // Ranked by access-metadata entries in `table/access.rs`; from the slot
            // alone (its size unknown here), what the algorithm makes of its clock
            // and counter.
            RedisPolicy::AllKeys(a) | RedisPolicy::Volatile(a) => {
                let access = crate::table::inline_access(0, meta, now);
                crate::algorithms::Rules::priority(*a, &access, now.pool_ms)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(access: u16) -> Now {
        Now { pool_ms: 0, access }
    }

    #[test]
    fn lru_prefers_the_oldest_and_ttl_the_soonest() {
        let old = SlotMeta::new(0, 10, 0);
        let new = SlotMeta::new(0, 100, 0);
        let p = RedisPolicy::AllKeysLru;
        assert!(p.priority(old, &now(200), 0.5) < p.priority(new, &now(200), 0.5));
        // Across the clock's wrap.
        assert!(
            p.priority(SlotMeta::new(0, 65530, 0), &now(5), 0.0)
                < p.priority(SlotMeta::new(0, 2, 0), &now(5), 0.0)
        );
        let t = RedisPolicy::VolatileTtl;
        assert!(
            t.priority(SlotMeta::new(10, 0, 0), &now(0), 0.0)
                < t.priority(SlotMeta::new(20, 0, 0), &now(0), 0.0)
        );
    }

    #[test]
    fn volatile_policies_never_pick_keys_without_ttl() {
        for p in RedisPolicy::ALL {
            let persistent = SlotMeta::new(0, 1, 1);
            let volatile = SlotMeta::new(99, 1, 1);
            let name = p.name();
            if name.starts_with("volatile") {
                assert!(!p.eligible(persistent) && p.eligible(volatile), "{name}");
            } else if name == "noeviction" {
                assert!(!p.eligible(volatile) && !p.evicts());
            } else {
                assert!(p.eligible(persistent), "{name}");
            }
        }
    }

    #[test]
    fn lfu_counter_grows_logarithmically_and_decays() {
        assert!(lfu_should_increment(LFU_INIT, 0.99));
        assert!(!lfu_should_increment(LFU_INIT + 10, 0.5));
        assert!(!lfu_should_increment(255, 0.0));
        let m = SlotMeta::new(0, 0, 20);
        assert_eq!(lfu_decayed(m, &now(600)), 10);
        assert_eq!(lfu_decayed(m, &now(59)), 20);
    }
}
