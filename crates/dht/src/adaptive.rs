//! The adaptive policy's logic (Ditto, seed `000_…`, thesis ch. 3 §3.4; LeCaR's regret
//! minimisation): experts, the eviction-history word a victim's hash slot keeps, the
//! regret a miss on a history entry charges, and the weights that follow from it.
//!
//! Several experts (eviction rules over the slot metadata) each pick a victim among the
//! sampled keys; one expert, drawn by weight, decides. The victim's slot then holds a
//! history entry: the key's hash (in the metadata word), the experts that picked it,
//! and the value of a history counter global to the instance (one FAA per eviction).
//! A later miss on that key finds the entry in the buckets it reads anyway and charges
//! those experts a regret of `d^age` (`age` evictions since; `d = 0.005^(1/N)`, `N`
//! the history's length, about the keys the cache holds, so an entry older than `N`
//! evictions charges nothing). An expert's weight is `exp(-η · P)` over its summed
//! regret `P`, normalised. Regrets are summed locally and added into the instance's
//! global sums in the pool every [`MERGE_EVERY`] (FAAs, so agents merging at once lose
//! nothing), and every agent's weights come from the same global sums.
//!
//! This file is the arithmetic alone; the table's part is `table/adaptive.rs`.

use crate::layout::{self, SlotMeta};
use crate::policy::{Now, lfu_decayed};

/// An expert: an eviction rule computable from the slot's words alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Expert {
    /// Least recently used (the access clock).
    Lru,
    /// Least frequently used (Redis's decayed logarithmic counter; ties: LRU).
    Lfu,
    /// Most recently used.
    Mru,
    /// Largest object first.
    Size,
}

/// The most experts an instance can run (one bit each in a history word).
pub const MAX_EXPERTS: usize = 7;

impl Expert {
    pub const ALL: [Expert; 4] = [Expert::Lru, Expert::Lfu, Expert::Mru, Expert::Size];

    /// The expert's fixed index: its bit in a history word and its regret sum in the
    /// pool (the same on every agent, whatever experts each lists).
    pub fn index(self) -> usize {
        match self {
            Expert::Lru => 0,
            Expert::Lfu => 1,
            Expert::Mru => 2,
            Expert::Size => 3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Expert::Lru => "lru",
            Expert::Lfu => "lfu",
            Expert::Mru => "mru",
            Expert::Size => "size",
        }
    }

    /// The expert's rank of a key (slot `word`, `meta`); the lowest is evicted.
    pub fn priority(self, word: layout::SlotWord, meta: SlotMeta, now: &Now) -> f64 {
        let idle = now.idle_secs(meta) as f64;
        match self {
            Expert::Lru => -idle,
            Expert::Lfu => lfu_decayed(meta, now) as f64 - idle / 65536.0,
            Expert::Mru => idle,
            Expert::Size => -(word.object().map_or(0, |o| o.block.size()) as f64),
        }
    }
}

const _: () = assert!(Expert::ALL.len() <= MAX_EXPERTS);

/// Parses `adaptive-experts`: comma-separated expert names, at least two, no repeats.
pub fn parse_experts(list: &str) -> Result<Vec<Expert>, String> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let e = Expert::ALL
            .into_iter()
            .find(|e| e.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let known: Vec<&str> = Expert::ALL.iter().map(|e| e.name()).collect();
                format!("unknown expert '{name}' (known: {})", known.join(", "))
            })?;
        if out.contains(&e) {
            return Err(format!("expert '{name}' listed twice"));
        }
        out.push(e);
    }
    if out.len() < 2 {
        return Err("adaptive-experts needs at least two experts".into());
    }
    Ok(out)
}

/// The experts named by `list`'s form of [`parse_experts`], comma-separated.
pub fn experts_string(experts: &[Expert]) -> String {
    experts
        .iter()
        .map(|e| e.name())
        .collect::<Vec<_>>()
        .join(",")
}

/// LeCaR's learning rate η.
pub const LEARNING_RATE: f64 = 0.45;
/// A regret `age` evictions old is `DISCOUNT_AT_N^(age / N)`.
const DISCOUNT_AT_N: f64 = 0.005;
/// Regrets summed locally before they are added into the instance's sums.
pub const MERGE_EVERY: u64 = 100;
/// Regret sums are kept in the pool as integers of this many units per 1.0.
pub const FIXED_POINT: f64 = 1e6;

/// A history word: `fp:8 | 0:8 | counter:40 | experts:7 | LOCK:1`. The zero size
/// byte makes it an empty slot to every writer and reader ([`layout::SlotWord::is_empty`]).
pub fn history_word(fp: u8, counter: u64, experts: u8) -> u64 {
    ((fp as u64) << 56) | ((counter & COUNTER_MASK) << 8) | (((experts & 0x7f) as u64) << 1)
}

const COUNTER_MASK: u64 = (1 << 40) - 1;

/// The counter value and expert bits of history word `w`, if it is one.
pub fn history_of(w: u64) -> Option<(u64, u8)> {
    let w = w & !layout::LOCK;
    let experts = ((w >> 1) & 0x7f) as u8;
    ((w >> 48) as u8 == 0 && experts != 0).then_some(((w >> 8) & COUNTER_MASK, experts))
}

/// The regret a miss charges for an entry `age` evictions old in a history of `len`
/// entries: 0 once the entry is `len` or more evictions old.
pub fn regret(age: u64, len: u64) -> f64 {
    let len = len.max(1);
    if age >= len {
        return 0.0;
    }
    DISCOUNT_AT_N.powf(age as f64 / len as f64)
}

/// The least share of the choice a regret is divided by (below).
pub const MIN_SHARE: f64 = 0.1;
/// How far an expert's summed regret may trail the least one's before it is charged no
/// more: its weight is then `exp(-η·MAX_GAP)` ≈ 1 % of the leader's, and a phase
/// that favours it wins it back within a few dozen regrets.
pub const MAX_GAP: f64 = 10.0;

/// What a regret `r` on a history entry named by the experts in `bits` adds to each
/// expert's sum, given the sums so far: `r` over the share of the choice those experts
/// held (EXP3's importance weighting, the share at least [`MIN_SHARE`]), for each of
/// them still within [`MAX_GAP`] of the leader, and never past it. Without the division, an expert
/// chosen rarely is charged rarely, and the worse of two settles at a weight near the
/// ratio of their regret rates (about 0.4 for LRU against LFU on a scan-heavy trace:
/// LeCaR's gap to its best expert); without the gap, a long phase would leave the
/// loser too far behind to recover in the next. Without the cap at the gap, one
/// charge of up to `1 / MIN_SHARE` (and a second agent's before the merge) carried an
/// expert twice the gap behind, and the next phase spent itself paying that back.
pub fn charges(
    experts: &[Expert],
    regret_sums: &[f64; MAX_EXPERTS],
    bits: u8,
    r: f64,
) -> [f64; MAX_EXPERTS] {
    let w = weights(experts, regret_sums);
    let share: f64 = experts
        .iter()
        .zip(&w)
        .filter(|(e, _)| bits & (1 << e.index()) != 0)
        .map(|(_, w)| w)
        .sum();
    let least = experts
        .iter()
        .map(|e| regret_sums[e.index()])
        .fold(f64::INFINITY, f64::min);
    let mut out = [0.0; MAX_EXPERTS];
    for e in experts {
        let i = e.index();
        let room = least + MAX_GAP - regret_sums[i];
        if bits & (1 << i) != 0 && room > 0.0 {
            out[i] = (r / share.max(MIN_SHARE)).min(room);
        }
    }
    out
}

/// The part of this client's pending regrets `local` that the instance's sums `global`
/// can take without carrying an expert more than [`MAX_GAP`] past the least (the
/// least counting these regrets too): each agent caps its charges against its own
/// view, and agents charging between merges would otherwise add up past the gap.
pub fn capped(
    experts: &[Expert],
    global: &[f64; MAX_EXPERTS],
    local: &[f64; MAX_EXPERTS],
) -> [f64; MAX_EXPERTS] {
    let least = experts
        .iter()
        .map(|e| global[e.index()] + local[e.index()])
        .fold(f64::INFINITY, f64::min);
    let mut out = *local;
    for e in experts {
        let i = e.index();
        out[i] = local[i].min((least + MAX_GAP - global[i]).max(0.0));
    }
    out
}

/// Each expert's weight from its summed regret: `exp(-η·P)`, normalised over `experts`,
/// with `P` at most [`MAX_GAP`] above the least (agents charging at once before a
/// merge can each take an expert up to the gap).
pub fn weights(experts: &[Expert], regret_sums: &[f64; MAX_EXPERTS]) -> Vec<f64> {
    let sums: Vec<f64> = experts.iter().map(|e| regret_sums[e.index()]).collect();
    let least = sums.iter().copied().fold(f64::INFINITY, f64::min);
    let raw: Vec<f64> = sums
        .iter()
        .map(|p| (-LEARNING_RATE * (p - least).min(MAX_GAP)).exp())
        .collect();
    let total: f64 = raw.iter().sum();
    raw.iter().map(|w| w / total).collect()
}

/// The expert drawn for `r` uniform in [0, 1) by `weights`.
pub fn draw(weights: &[f64], r: f64) -> usize {
    let mut acc = 0.0;
    for (i, w) in weights.iter().enumerate() {
        acc += w;
        if r < acc {
            return i;
        }
    }
    weights.len().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::SlotWord;

    #[test]
    fn history_words_are_empty_slots_and_decode() {
        let w = history_word(0xab, 12345, 0b101);
        assert!(SlotWord(w).is_empty() && SlotWord(w | layout::LOCK).is_empty());
        assert!(SlotWord(w).object().is_none());
        assert_eq!(history_of(w), Some((12345, 0b101)));
        assert_eq!(history_of(w | layout::LOCK), Some((12345, 0b101)));
        assert_eq!(history_of(0), None);
        assert_eq!(history_of(layout::LOCK), None);
        // The counter wraps in its 40 bits rather than spilling into the size byte.
        assert_eq!(history_of(history_word(1, (1 << 40) + 7, 1)), Some((7, 1)));
    }

    #[test]
    fn regret_decays_with_age_and_ends_at_the_history_length() {
        assert_eq!(regret(0, 100), 1.0);
        assert!((regret(100 - 1, 100) - 0.005f64.powf(0.99)).abs() < 1e-12);
        assert!(regret(10, 100) > regret(50, 100));
        assert_eq!(regret(100, 100), 0.0);
        assert_eq!(regret(5, 0), 0.0);
    }

    #[test]
    fn weights_fall_for_the_expert_charged_and_draws_follow_them() {
        let experts = [Expert::Lru, Expert::Lfu];
        let mut sums = [0.0; MAX_EXPERTS];
        assert_eq!(weights(&experts, &sums), vec![0.5, 0.5]);
        sums[Expert::Lru.index()] = 2.0;
        let w = weights(&experts, &sums);
        assert!(w[1] > w[0] && (w[0] + w[1] - 1.0).abs() < 1e-12);
        assert!((w[0] / w[1] - (-LEARNING_RATE * 2.0).exp()).abs() < 1e-12);
        assert_eq!(draw(&w, 0.0), 0);
        assert_eq!(draw(&w, 0.999), 1);
        assert_eq!(draw(&[0.3, 0.7], 0.31), 1);
    }

    #[test]
    fn charges_follow_the_choice_share_and_stop_at_the_gap() {
        let experts = [Expert::Lru, Expert::Lfu];
        let lru = 1 << Expert::Lru.index();
        let lfu = 1 << Expert::Lfu.index();
        let mut sums = [0.0; MAX_EXPERTS];
        // Even weights: half the choice each.
        let c = charges(&experts, &sums, lru, 0.5);
        assert!((c[Expert::Lru.index()] - 1.0).abs() < 1e-12 && c[Expert::Lfu.index()] == 0.0);
        // Named by both: the whole choice, so no difference between them.
        let c = charges(&experts, &sums, lru | lfu, 0.5);
        assert_eq!(c[Expert::Lru.index()], c[Expert::Lfu.index()]);
        assert!((c[Expert::Lru.index()] - 0.5).abs() < 1e-12);
        // A rarely chosen expert pays by its share, down to the floor.
        sums[Expert::Lru.index()] = 4.0;
        let share = weights(&experts, &sums)[0];
        let c = charges(&experts, &sums, lru, 0.5);
        assert!((c[Expert::Lru.index()] - 0.5 / share.max(MIN_SHARE)).abs() < 1e-12);
        // Near the gap, only up to it: the floor-share charge would overshoot.
        sums[Expert::Lru.index()] = MAX_GAP - 0.25;
        let c = charges(&experts, &sums, lru, 1.0);
        assert!((c[Expert::Lru.index()] - 0.25).abs() < 1e-12, "{c:?}");
        // Past the gap, nothing more; a sum beyond it (two agents' charges merged)
        // weighs as the gap.
        sums[Expert::Lru.index()] = MAX_GAP;
        let at_gap = weights(&experts, &sums);
        sums[Expert::Lru.index()] = 3.0 * MAX_GAP;
        assert_eq!(weights(&experts, &sums), at_gap);
        assert_eq!(charges(&experts, &sums, lru, 0.5)[Expert::Lru.index()], 0.0);
        assert!(charges(&experts, &sums, lfu, 0.5)[Expert::Lfu.index()] > 0.0);
    }

    #[test]
    fn merged_regrets_stop_at_the_gap_of_the_instance_s_sums() {
        let experts = [Expert::Lru, Expert::Lfu];
        let (lru, lfu) = (Expert::Lru.index(), Expert::Lfu.index());
        let mut global = [0.0; MAX_EXPERTS];
        let mut local = [0.0; MAX_EXPERTS];
        // Another agent already took LRU 8 behind; this one charged it 5 more and LFU 1.
        global[lru] = 8.0;
        local[lru] = 5.0;
        local[lfu] = 1.0;
        let c = capped(&experts, &global, &local);
        assert!((c[lru] - 3.0).abs() < 1e-12, "{c:?}");
        assert_eq!(c[lfu], 1.0, "the leader keeps what it was charged");
        // Within the gap, everything goes through.
        local[lru] = 2.0;
        assert_eq!(capped(&experts, &global, &local), local);
        // Already past it (merged before this cap existed): nothing more.
        global[lru] = 15.0;
        assert_eq!(capped(&experts, &global, &local)[lru], 0.0);
    }

    #[test]
    fn experts_parse_from_a_list() {
        assert_eq!(
            parse_experts("lru, LFU").unwrap(),
            vec![Expert::Lru, Expert::Lfu]
        );
        assert!(parse_experts("lru").is_err());
        assert!(parse_experts("lru,lru").is_err());
        assert!(
            parse_experts("lru,arc")
                .unwrap_err()
                .contains("known: lru, lfu")
        );
        assert_eq!(experts_string(&[Expert::Mru, Expert::Size]), "mru,size");
    }

    #[test]
    fn experts_rank_by_their_rule() {
        let now = Now {
            pool_ms: 0,
            access: 100,
        };
        let old = SlotMeta::new(0, 10, 5);
        let recent_frequent = SlotMeta::new(0, 99, 50);
        let w = SlotWord(0);
        assert!(
            Expert::Lru.priority(w, old, &now) < Expert::Lru.priority(w, recent_frequent, &now)
        );
        assert!(
            Expert::Lfu.priority(w, old, &now) < Expert::Lfu.priority(w, recent_frequent, &now)
        );
        assert!(
            Expert::Mru.priority(w, old, &now) > Expert::Mru.priority(w, recent_frequent, &now)
        );
    }
}
