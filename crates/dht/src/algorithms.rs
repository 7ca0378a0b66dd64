//! Ditto's twelve caching algorithms as `priority` / `update` pairs over a key's access
//! information (seed `000_…`, thesis ch. 3, Table 3.3).
//!
//! An algorithm sees [`Access`]: the key's size, when it was inserted and last
//! accessed, how often it was accessed, and one word of its own (LRU-K's previous
//! access, LIRS's inter-reference recency, LRFU's combined recency-frequency value,
//! GDS's inflation at the last access). [`Algorithm::accessed`] says how an access
//! changes it, [`Algorithm::priority`] ranks keys (the lowest is evicted first), and
//! [`victim`] picks among sampled candidates, ties going to the least recently used.
//! Algorithms with an inflation value `L` (GDS, GDSF, LFUDA) take the priority of the
//! last victim as their new `L`, per client, as Ditto's code does.
//!
//! This module is the algorithms alone, with their tests against exact reference
//! implementations; which metadata the table keeps for them is the table's concern.

/// What an algorithm knows of a key.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Access {
    /// Bytes the key takes.
    pub size: u64,
    pub insert_ms: u64,
    pub last_ms: u64,
    /// Accesses, the insert included.
    pub freq: u64,
    /// The algorithm's own word (see [`Algorithm::accessed`]).
    pub word: u64,
}

pub use dmc_proto::policy::Algorithm;

/// Subtracted from LRU-2's rank of a key seen once (milliseconds since the epoch stay
/// far below it for millennia).
const SEEN_ONCE: f64 = 1e15;

/// LRFU's λ: how fast an access's weight halves, per second.
pub const LRFU_LAMBDA: f64 = 0.5;

/// `f(x) = 0.5^(λ·x)` for `x` milliseconds.
fn lrfu_weight(ms: u64) -> f64 {
    0.5f64.powf(LRFU_LAMBDA * ms as f64 / 1000.0)
}

/// What an algorithm does: how it starts and updates a key's [`Access`], and how it
/// ranks keys.
pub trait Rules {
    /// Whether the algorithm keeps an inflation value (the last victim's priority).
    fn inflates(self) -> bool;
    /// A key inserted now, `size` bytes, under inflation `l`.
    fn inserted(self, size: u64, now_ms: u64, l: f64) -> Access;
    /// How one access at `now_ms` (under inflation `l`) changes `a`.
    fn accessed(self, a: &mut Access, now_ms: u64, l: f64);
    /// The key's rank at `now_ms`; the lowest is evicted first.
    fn priority(self, a: &Access, now_ms: u64) -> f64;
}

impl Rules for Algorithm {
    fn inflates(self) -> bool {
        matches!(self, Algorithm::Gds | Algorithm::Gdsf | Algorithm::Lfuda)
    }

    fn inserted(self, size: u64, now_ms: u64, l: f64) -> Access {
        let mut a = Access {
            size,
            insert_ms: now_ms,
            last_ms: now_ms,
            freq: 1,
            word: 0,
        };
        a.word = match self {
            Algorithm::Gds | Algorithm::Gdsf | Algorithm::Lfuda => l.to_bits(),
            Algorithm::Lirs => u64::MAX,
            Algorithm::Lrfu => 1.0f64.to_bits(),
            _ => 0,
        };
        a
    }

    fn accessed(self, a: &mut Access, now_ms: u64, l: f64) {
        let since = now_ms.saturating_sub(a.last_ms);
        a.word = match self {
            Algorithm::Gds | Algorithm::Gdsf | Algorithm::Lfuda => l.to_bits(),
            // The gap between this access and the one before.
            Algorithm::Lirs => since,
            // CRF(now) = f(0) + f(now − last) · CRF(last).
            Algorithm::Lrfu => (1.0 + lrfu_weight(since) * f64::from_bits(a.word)).to_bits(),
            // The access before this one.
            Algorithm::LruK => a.last_ms,
            _ => a.word,
        };
        a.freq = a.freq.saturating_add(1);
        a.last_ms = now_ms;
    }

    fn priority(self, a: &Access, now_ms: u64) -> f64 {
        let size = a.size.max(1) as f64;
        let freq = a.freq as f64;
        let word_f = f64::from_bits(a.word);
        match self {
            Algorithm::Lru => a.last_ms as f64,
            Algorithm::Lfu => freq,
            Algorithm::Mru => -(a.last_ms as f64),
            Algorithm::Fifo => a.insert_ms as f64,
            Algorithm::Size => -size,
            Algorithm::Gds => word_f + 1.0 / size,
            Algorithm::Gdsf => word_f + freq / size,
            Algorithm::Lfuda => word_f + freq,
            Algorithm::Lirs => {
                // A key's reuse distance is at least its current recency.
                let recency = now_ms.saturating_sub(a.last_ms);
                -(a.word.max(recency) as f64)
            }
            Algorithm::Lrfu => word_f * lrfu_weight(now_ms.saturating_sub(a.last_ms)),
            // Seen once: an infinite backward 2-distance, so before every key seen
            // twice (Ditto's code mixes the insert time in with the others' second
            // accesses instead), first in first out among them.
            Algorithm::LruK if a.freq < 2 => a.insert_ms as f64 - SEEN_ONCE,
            Algorithm::LruK => a.word as f64,
            Algorithm::Hyperbolic => freq / now_ms.saturating_sub(a.insert_ms).max(1) as f64,
        }
    }
}

/// The candidate to evict among `candidates`: the lowest priority, ties to the least
/// recently used, then to the first. `None` when there is none.
pub fn victim(algorithm: Algorithm, candidates: &[Access], now_ms: u64) -> Option<usize> {
    let rank = |a: &Access| (algorithm.priority(a, now_ms), a.last_ms);
    candidates
        .iter()
        .enumerate()
        .min_by(|(_, x), (_, y)| {
            let (px, lx) = rank(x);
            let (py, ly) = rank(y);
            px.total_cmp(&py).then(lx.cmp(&ly))
        })
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests;
