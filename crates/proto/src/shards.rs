//! Logical sharding (DESIGN.md §5–6): the 16 384 Redis hash slots are split into a fixed
//! number of logical shards, each a contiguous slot range; each shard has a primary
//! agent (the only one that writes it), optional backup agents, and an epoch that is
//! bumped whenever its primary changes, so the memory nodes can fence the old owner.
//!
//! Scaling agents only re-assigns shards: [`ShardMap::assign`] balances shards over the
//! given agents (counts differ by at most one) while moving as few as possible, and no
//! key moves, since every agent reads every key from the pool.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

/// Redis Cluster's hash slot count.
pub const HASH_SLOTS: u16 = 16384;

/// An agent's id, as the cluster manager assigned it.
pub type AgentId = u64;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub id: u32,
    /// The agent that writes this shard; `None` until one is assigned.
    pub primary: Option<AgentId>,
    pub backups: Vec<AgentId>,
    /// Bumped on every change of primary.
    pub epoch: u64,
}

/// Hash slots → shards → agents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    pub shards: Vec<Shard>,
}

impl ShardMap {
    /// `count` shards (1 to 16 384) with no owners yet.
    pub fn new(count: u32) -> ShardMap {
        let count = count.clamp(1, u32::from(HASH_SLOTS));
        ShardMap {
            shards: (0..count)
                .map(|id| Shard {
                    id,
                    primary: None,
                    backups: Vec::new(),
                    epoch: 0,
                })
                .collect(),
        }
    }

    /// The shard that holds `slot`: shards cover equal, contiguous slot ranges.
    pub fn shard_of(&self, slot: u16) -> u32 {
        let n = self.shards.len() as u32;
        (u32::from(slot % HASH_SLOTS) * n) / u32::from(HASH_SLOTS)
    }

    /// The slots of `shard`.
    pub fn slots(&self, shard: u32) -> Range<u16> {
        let n = self.shards.len() as u32;
        if n == 0 {
            return 0..0;
        }
        let first = |s: u32| (s * u32::from(HASH_SLOTS)).div_ceil(n) as u16;
        first(shard)..first(shard + 1).max(first(shard))
    }

    /// The agent that writes `slot` (none in a map without shards, as a malformed
    /// one from a peer may be).
    pub fn owner(&self, slot: u16) -> Option<AgentId> {
        self.shards.get(self.shard_of(slot) as usize)?.primary
    }

    /// Shards per agent, for status and tests.
    pub fn counts(&self) -> BTreeMap<AgentId, usize> {
        let mut c = BTreeMap::new();
        for s in &self.shards {
            if let Some(a) = s.primary {
                *c.entry(a).or_default() += 1;
            }
        }
        c
    }

    /// Makes `agents` the primaries, balanced (each gets ⌊n/a⌋ or ⌈n/a⌉ shards) and
    /// moving as few shards as possible: an agent keeps its shards up to its share; the
    /// shards of departed agents, and the surplus of over-full ones, go to agents below
    /// their share. Backups that are no longer agents are dropped. Returns the ids of the
    /// shards whose primary changed (their epochs are bumped). With no agents, every
    /// shard is left without a primary.
    pub fn assign(&mut self, agents: &[AgentId]) -> Vec<u32> {
        let mut agents: Vec<AgentId> = agents.to_vec();
        agents.sort_unstable();
        agents.dedup();
        let mut moved = Vec::new();
        for s in &mut self.shards {
            s.backups.retain(|b| agents.contains(b));
        }
        if agents.is_empty() {
            for s in &mut self.shards {
                if s.primary.take().is_some() {
                    s.epoch += 1;
                    moved.push(s.id);
                }
            }
            return moved;
        }
        let n = self.shards.len();
        let (base, extra) = (n / agents.len(), n % agents.len());
        // Agents that already hold more shards get the larger shares, so fewer move.
        let mut held: Vec<(AgentId, usize)> = agents
            .iter()
            .map(|a| {
                (
                    *a,
                    self.shards.iter().filter(|s| s.primary == Some(*a)).count(),
                )
            })
            .collect();
        held.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        let target: BTreeMap<AgentId, usize> = held
            .iter()
            .enumerate()
            .map(|(i, (a, _))| (*a, base + usize::from(i < extra)))
            .collect();
        // Keep each agent's shards up to its target; free the rest.
        let mut kept: BTreeMap<AgentId, usize> = BTreeMap::new();
        let mut free = Vec::new();
        for (i, s) in self.shards.iter().enumerate() {
            match s.primary {
                Some(a)
                    if target
                        .get(&a)
                        .is_some_and(|t| kept.get(&a).copied().unwrap_or(0) < *t) =>
                {
                    *kept.entry(a).or_default() += 1;
                }
                _ => free.push(i),
            }
        }
        // Hand the free shards to agents below their target.
        let mut free = free.into_iter();
        for (a, t) in &target {
            let have = kept.get(a).copied().unwrap_or(0);
            for _ in have..*t {
                let Some(i) = free.next() else { break };
                let s = &mut self.shards[i];
                if s.primary != Some(*a) {
                    s.primary = Some(*a);
                    s.backups.retain(|b| b != a);
                    s.epoch += 1;
                    moved.push(s.id);
                }
            }
        }
        moved.sort_unstable();
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn slots_split_into_contiguous_ranges() {
        for n in [1u32, 3, 16, 1000, 16384] {
            let m = ShardMap::new(n);
            let mut next = 0u32;
            for s in 0..n {
                let r = m.slots(s);
                assert_eq!(u32::from(r.start), next, "{n} shards: shard {s}");
                for slot in r.clone() {
                    assert_eq!(m.shard_of(slot), s);
                }
                next = u32::from(r.end);
            }
            assert_eq!(next, u32::from(HASH_SLOTS));
        }
    }

    #[test]
    fn a_map_without_shards_from_a_peer_owns_nothing_and_does_not_panic() {
        let m: ShardMap = serde_json::from_str(r#"{"shards": []}"#).unwrap();
        assert_eq!(m.owner(0), None);
        assert_eq!(m.owner(16383), None);
        assert_eq!(m.slots(0), 0..0);
    }

    #[test]
    fn scaling_up_and_down_moves_only_what_it_must() {
        let mut m = ShardMap::new(12);
        assert_eq!(m.assign(&[1]).len(), 12);
        // 1 -> 3 agents: 8 shards move, agent 1 keeps 4 and keeps its epochs there.
        let moved = m.assign(&[1, 2, 3]);
        assert_eq!(moved.len(), 8);
        assert_eq!(m.counts(), BTreeMap::from([(1, 4), (2, 4), (3, 4)]));
        // Same agents again: nothing moves.
        assert!(m.assign(&[3, 2, 1]).is_empty());
        // 3 -> 2: only agent 3's shards move.
        let moved = m.assign(&[1, 2]);
        assert_eq!(moved.len(), 4);
        assert_eq!(m.counts(), BTreeMap::from([(1, 6), (2, 6)]));
        assert!(m.assign(&[]).len() == 12 && m.owner(0).is_none());
    }

    proptest! {
        /// Any sequence of agent sets: balanced, every shard owned by a current agent,
        /// epochs bumped exactly for the shards that changed hands, and the number moved
        /// is the least any balanced assignment needs.
        #[test]
        fn assignments_are_balanced_and_minimal(
            shards in 1u32..64,
            steps in proptest::collection::vec(proptest::collection::btree_set(1u64..10, 0..6), 1..8),
        ) {
            let mut m = ShardMap::new(shards);
            for agents in steps {
                let agents: Vec<AgentId> = agents.into_iter().collect();
                let before = m.clone();
                let moved = m.assign(&agents);
                for (b, a) in before.shards.iter().zip(&m.shards) {
                    let changed = b.primary != a.primary;
                    prop_assert_eq!(changed, moved.contains(&a.id));
                    prop_assert_eq!(a.epoch, b.epoch + u64::from(changed));
                    if let Some(p) = a.primary {
                        prop_assert!(agents.contains(&p));
                    }
                }
                if agents.is_empty() {
                    prop_assert!(m.shards.iter().all(|s| s.primary.is_none()));
                    continue;
                }
                let counts = m.counts();
                prop_assert_eq!(counts.values().sum::<usize>(), shards as usize);
                let per: Vec<usize> = agents.iter().map(|a| counts.get(a).copied().unwrap_or(0)).collect();
                let (lo, hi) = (per.iter().min().copied().unwrap_or(0), per.iter().max().copied().unwrap_or(0));
                prop_assert!(hi - lo <= 1, "unbalanced: {:?}", per);
                // Least moves: every shard whose owner stays and fits its share stays.
                let n = shards as usize;
                let (base, extra) = (n / agents.len(), n % agents.len());
                let mut held: Vec<usize> = agents
                    .iter()
                    .map(|a| before.shards.iter().filter(|s| s.primary == Some(*a)).count())
                    .collect();
                held.sort_unstable_by(|x, y| y.cmp(x));
                let can_keep: usize = held
                    .iter()
                    .enumerate()
                    .map(|(i, h)| (*h).min(base + usize::from(i < extra)))
                    .sum();
                prop_assert_eq!(moved.len(), n - can_keep);
            }
        }
    }
}
