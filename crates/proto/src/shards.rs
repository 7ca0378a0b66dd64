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
        // Keep each agent's shards up to its target; free the rest. An over-full agent
        // gives up first the shards an agent below its target backs up (warm there).
        let holds: BTreeMap<AgentId, usize> = held.iter().copied().collect();
        let under =
            |a: &AgentId| target.get(a).copied().unwrap_or(0) > holds.get(a).copied().unwrap_or(0);
        let warm_elsewhere = |s: &Shard| s.backups.first().is_some_and(under);
        let mut order: Vec<usize> = (0..self.shards.len()).collect();
        order.sort_by_key(|&i| warm_elsewhere(&self.shards[i]));
        let mut kept: BTreeMap<AgentId, usize> = BTreeMap::new();
        let mut free = Vec::new();
        for i in order {
            let s = &self.shards[i];
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
        free.sort_unstable();
        // A free shard goes first to its first backup below its target (its cache is
        // warm with the shard's keys), then the rest to agents below their target.
        let mut given: Vec<(usize, AgentId)> = Vec::new();
        let mut rest = Vec::new();
        for i in free {
            let warm = self.shards[i].backups.iter().copied().find(|b| {
                target
                    .get(b)
                    .is_some_and(|t| kept.get(b).copied().unwrap_or(0) < *t)
            });
            match warm {
                Some(b) => {
                    *kept.entry(b).or_default() += 1;
                    given.push((i, b));
                }
                None => rest.push(i),
            }
        }
        let mut rest = rest.into_iter();
        for (a, t) in &target {
            let have = kept.get(a).copied().unwrap_or(0);
            for _ in have..*t {
                let Some(i) = rest.next() else { break };
                given.push((i, *a));
            }
        }
        for (i, a) in given {
            let s = &mut self.shards[i];
            if s.primary != Some(a) {
                s.primary = Some(a);
                s.backups.retain(|b| *b != a);
                s.epoch += 1;
                moved.push(s.id);
            }
        }
        moved.sort_unstable();
        moved
    }

    /// Gives every owned shard up to `k` backup agents (fewer if there are not enough
    /// other agents): the agents that hold a shard's cache warm, so one of them can take
    /// it over with hits at once. Backups that stay valid are kept; new ones are the
    /// agents backing the fewest shards. Backups never change epochs (they do not
    /// write). Returns whether any backup changed.
    pub fn assign_backups(&mut self, agents: &[AgentId], k: usize) -> bool {
        let mut agents: Vec<AgentId> = agents.to_vec();
        agents.sort_unstable();
        agents.dedup();
        let mut duties: BTreeMap<AgentId, usize> = agents.iter().map(|a| (*a, 0)).collect();
        let mut changed = false;
        for s in &mut self.shards {
            let before = s.backups.len();
            let primary = s.primary;
            s.backups
                .retain(|b| agents.contains(b) && Some(*b) != primary);
            let mut seen = Vec::with_capacity(s.backups.len());
            s.backups.retain(|b| {
                let fresh = !seen.contains(b);
                seen.push(*b);
                fresh
            });
            let want = if primary.is_some() { k } else { 0 };
            if s.backups.len() > want {
                s.backups.truncate(want);
            }
            changed |= s.backups.len() != before;
            for b in &s.backups {
                *duties.entry(*b).or_default() += 1;
            }
        }
        // How many of a primary's shards each agent backs: a dead agent's shards should
        // spread over the survivors, not all land on one.
        let mut pairs: BTreeMap<(AgentId, AgentId), usize> = BTreeMap::new();
        for s in &self.shards {
            if let Some(p) = s.primary {
                for b in &s.backups {
                    *pairs.entry((p, *b)).or_default() += 1;
                }
            }
        }
        for s in &mut self.shards {
            let Some(primary) = s.primary else { continue };
            while s.backups.len() < k {
                let pick = duties
                    .iter()
                    .filter(|(a, _)| **a != primary && !s.backups.contains(a))
                    .min_by_key(|(a, n)| {
                        let pair = pairs.get(&(primary, **a)).copied().unwrap_or(0);
                        (pair, **n, **a)
                    })
                    .map(|(a, _)| *a);
                let Some(b) = pick else { break };
                s.backups.push(b);
                *duties.entry(b).or_default() += 1;
                *pairs.entry((primary, b)).or_default() += 1;
                changed = true;
            }
        }
        changed
    }

    /// Whether `agent` backs up the shard holding `slot`.
    pub fn backs_up(&self, slot: u16, agent: AgentId) -> bool {
        self.shards
            .get(self.shard_of(slot) as usize)
            .is_some_and(|s| s.backups.contains(&agent))
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

    #[test]
    fn a_dead_primarys_shards_go_to_their_backups() {
        let mut m = ShardMap::new(12);
        m.assign(&[1, 2, 3]);
        m.assign_backups(&[1, 2, 3], 1);
        let backed: BTreeMap<u32, AgentId> = m
            .shards
            .iter()
            .filter(|s| s.primary == Some(3))
            .map(|s| (s.id, s.backups[0]))
            .collect();
        assert_eq!(backed.len(), 4);
        m.assign(&[1, 2]);
        for (id, b) in backed {
            assert_eq!(m.shards[id as usize].primary, Some(b), "shard {id}");
        }
        assert_eq!(m.counts(), BTreeMap::from([(1, 6), (2, 6)]));
        m.assign_backups(&[1, 2], 1);
        for s in &m.shards {
            assert_eq!(s.backups.len(), 1);
            assert_ne!(s.backups[0], s.primary.unwrap());
        }
    }

    /// A newcomer that backed shards up while warming gets exactly those shards when
    /// it takes primaries (they are the ones its cache holds).
    #[test]
    fn a_warmed_up_agent_takes_the_shards_it_backs_up() {
        let mut m = ShardMap::new(12);
        m.assign(&[1, 2]);
        // Agent 3 warms up: no primary, backups only.
        m.assign(&[1, 2]);
        m.assign_backups(&[1, 2, 3], 1);
        let backed: Vec<u32> = m
            .shards
            .iter()
            .filter(|s| s.backups == [3])
            .map(|s| s.id)
            .collect();
        assert_eq!(backed.len(), 6, "half of the shards: {backed:?}");
        let moved = m.assign(&[1, 2, 3]);
        assert_eq!(moved.len(), 4);
        for id in moved {
            assert!(backed.contains(&id), "shard {id} went to agent 3 cold");
            assert_eq!(m.shards[id as usize].primary, Some(3));
        }
    }

    proptest! {
        /// Backups: never the primary, no duplicates, exactly min(k, agents - 1) for an
        /// owned shard (none for an unowned one), only current agents.
        #[test]
        fn backups_are_other_live_agents(
            shards in 1u32..40,
            k in 0usize..4,
            steps in proptest::collection::vec(proptest::collection::btree_set(1u64..8, 0..6), 1..6),
        ) {
            let mut m = ShardMap::new(shards);
            for agents in steps {
                let agents: Vec<AgentId> = agents.into_iter().collect();
                m.assign(&agents);
                m.assign_backups(&agents, k);
                for s in &m.shards {
                    let want = if s.primary.is_some() { k.min(agents.len().saturating_sub(1)) } else { 0 };
                    prop_assert_eq!(s.backups.len(), want);
                    for b in &s.backups {
                        prop_assert!(agents.contains(b));
                        prop_assert!(Some(*b) != s.primary);
                        prop_assert_eq!(s.backups.iter().filter(|x| *x == b).count(), 1);
                    }
                }
            }
            // One backup each from a bare map: an agent's shards are backed by the others
            // evenly, so its death spreads its shards over the survivors.
            let mut fresh = ShardMap::new(shards);
            let agents = [1, 2, 3, 4];
            fresh.assign(&agents);
            fresh.assign_backups(&agents, 1);
            for p in agents {
                let per: Vec<usize> = agents
                    .iter()
                    .filter(|a| **a != p)
                    .map(|a| fresh.shards.iter().filter(|s| s.primary == Some(p) && s.backups[0] == *a).count())
                    .collect();
                let (lo, hi) = (per.iter().min().copied().unwrap_or(0), per.iter().max().copied().unwrap_or(0));
                prop_assert!(hi - lo <= 1, "agent {}: {:?}", p, per);
            }
        }

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
