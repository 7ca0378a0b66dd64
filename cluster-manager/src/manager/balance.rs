//! Automatic load balancing (DESIGN.md §6): agents report, with each heartbeat, the
//! latency they saw on every memory node and the reads (and their latency) of every
//! region; the manager sums the reports over a window and, when one node stays much
//! slower than another node holding a complete backup of one of its primaries, moves
//! that primary role there with a copy-free migration (`copies.rs`). A region's reads
//! go to its primary, so moving the primary role is what moves its read load. Called
//! by the heartbeat handler (reports) and the balancer loop (`crate::balance`); it
//! never moves a region itself.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::{Manager, Member};
use crate::state::RegionRecord;

/// Timed operations a node needs in a window before its latency counts.
const MIN_OPS: u64 = 10;
/// Windows a node's last latency estimate stands for without new samples (a node
/// holding only backups sees few operations while its peer is slow).
const STALE_AFTER: u32 = 3;
/// A slow node must be slower than the target by at least this much, besides the
/// factor: microsecond noise on idle nodes must not move anything.
const MIN_GAP_US: f64 = 1000.0;
/// Consecutive slow windows before a node's primaries move.
const STRIKES: u32 = 2;
/// A moved region stays put this long.
const COOLDOWN: Duration = Duration::from_secs(60);

/// One window's sums of the agents' reports, and the balancer's memory.
#[derive(Default)]
pub struct LoadWindow {
    /// Per memory node: (timed batches, µs).
    nodes: HashMap<u32, (u64, u64)>,
    /// Per region: (reads, µs).
    regions: HashMap<u16, (u64, u64)>,
    /// Per node: consecutive windows it was found slow.
    strikes: HashMap<u32, u32>,
    /// Regions moved recently, and when.
    moved: HashMap<u16, Instant>,
    /// Each node's latest mean latency (µs), and the windows since it was measured.
    last: HashMap<u32, (f64, u32)>,
}

/// A primary role to move: why, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct Rebalance {
    pub region: u16,
    pub from: u32,
    pub to: u32,
    /// Mean latency (µs) agents saw on `from` and on `to` over the window.
    pub from_us: f64,
    pub to_us: f64,
}

/// One agent's report: `[id, ops, µs]` rows for nodes and for regions.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct AgentLoad {
    #[serde(default)]
    pub nodes: Vec<[u64; 3]>,
    #[serde(default)]
    pub regions: Vec<[u64; 3]>,
}

impl Manager {
    /// Adds an agent's latency report to the current window.
    pub fn report_load(&self, load: AgentLoad) {
        let mut w = self.load.lock();
        for [id, ops, us] in load.nodes {
            let e = w.nodes.entry(id as u32).or_default();
            e.0 = e.0.saturating_add(ops);
            e.1 = e.1.saturating_add(us);
        }
        for [id, ops, us] in load.regions {
            let e = w.regions.entry(id as u16).or_default();
            e.0 = e.0.saturating_add(ops);
            e.1 = e.1.saturating_add(us);
        }
    }

    /// Each memory node's mean latency (µs) over the last balancing window.
    pub fn node_latency(&self) -> HashMap<u32, f64> {
        self.load
            .lock()
            .last
            .iter()
            .map(|(n, (l, _))| (*n, *l))
            .collect()
    }

    /// Closes the window: the primary role to move, if a node has been slow for
    /// `STRIKES` windows in a row (at least `factor` times, and `MIN_GAP_US`, slower
    /// than a live node holding a complete backup of one of its primaries). The
    /// busiest such region moves, to its fastest such backup; one a window.
    pub fn next_rebalance(&self, factor: f64) -> Option<Rebalance> {
        // A snapshot of the records, so the state and the window are never locked
        // together.
        let (records, usable): (Vec<RegionRecord>, HashSet<u32>) = {
            let s = self.state.lock();
            (
                s.regions.values().cloned().collect(),
                s.nodes
                    .values()
                    .filter(|n| !n.draining && self.alive(Member::Node(n.id)))
                    .map(|n| n.id)
                    .collect(),
            )
        };
        let mut w = self.load.lock();
        let nodes = std::mem::take(&mut w.nodes);
        let regions = std::mem::take(&mut w.regions);
        for (_, age) in w.last.values_mut() {
            *age += 1;
        }
        for (n, (ops, us)) in &nodes {
            if *ops >= MIN_OPS {
                w.last.insert(*n, (*us as f64 / *ops as f64, 0));
            }
        }
        w.last.retain(|_, (_, age)| *age <= STALE_AFTER);
        let latency: HashMap<u32, f64> = w.last.iter().map(|(n, (l, _))| (*n, *l)).collect();
        w.moved.retain(|_, at| at.elapsed() < COOLDOWN);
        let slower = |a: f64, b: f64| a >= factor * b && a - b >= MIN_GAP_US;
        // Strikes: a node slower than some other usable node this window.
        let mut strikes = HashMap::new();
        for (&n, &l) in &latency {
            let slow = latency
                .iter()
                .any(|(&b, &lb)| b != n && usable.contains(&b) && slower(l, lb));
            if slow {
                strikes.insert(n, w.strikes.get(&n).copied().unwrap_or(0) + 1);
            }
        }
        w.strikes = strikes;
        let mut best: Option<(u64, Rebalance)> = None;
        for r in &records {
            let Some(&strikes) = w.strikes.get(&r.primary) else {
                continue;
            };
            if strikes < STRIKES
                || r.frozen
                || !r.filling.is_empty()
                || r.draining
                || w.moved.contains_key(&r.id)
            {
                continue;
            }
            let Some(&from_us) = latency.get(&r.primary) else {
                continue;
            };
            let target = r
                .backups
                .iter()
                .filter(|b| usable.contains(b))
                .filter_map(|b| latency.get(b).map(|l| (*b, *l)))
                .filter(|(_, l)| slower(from_us, *l))
                .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            let Some((to, to_us)) = target else {
                continue;
            };
            let reads = regions.get(&r.id).map_or(0, |(ops, _)| *ops);
            let better = best
                .as_ref()
                .is_none_or(|(most, b)| reads > *most || (reads == *most && r.id < b.region));
            if better {
                best = Some((
                    reads,
                    Rebalance {
                        region: r.id,
                        from: r.primary,
                        to,
                        from_us,
                        to_us,
                    },
                ));
            }
        }
        let (_, pick) = best?;
        w.moved.insert(pick.region, Instant::now());
        Some(pick)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::PoolSettings;
    use crate::state::{RegionRecord, StateFile};
    use dmc_proto::ByteSize;

    fn region(id: u16, primary: u32, backups: Vec<u32>) -> RegionRecord {
        RegionRecord {
            id,
            instance: dmc_proto::cluster::DEFAULT_INSTANCE.to_string(),
            primary,
            backups,
            size: ByteSize(1 << 20),
            draining: false,
            filling: vec![],
            frozen: false,
        }
    }

    /// Node 1 at 10 ms, nodes 2 and 3 at 0.3 and 0.5 ms: after two slow windows the
    /// busiest region whose primary is on node 1 moves to its fastest backup; a node
    /// slow for one window only, or slower by less than the factor, moves nothing; a
    /// moved region waits out its cooldown.
    #[test]
    fn a_node_slow_two_windows_running_loses_its_busiest_primary_to_a_fast_backup() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manager::open(
            StateFile::new(dir.path().join("state.json")),
            8,
            Duration::from_secs(60),
            PoolSettings::default(),
        )
        .unwrap();
        for id in 1..=3u32 {
            m.add_node(id, format!("127.0.0.1:{id}"), ByteSize(1 << 30))
                .unwrap();
        }
        m.update(|s| {
            s.regions.insert(4, region(4, 1, vec![2]));
            s.regions.insert(5, region(5, 1, vec![3, 2]));
            s.regions.insert(6, region(6, 2, vec![1]));
            Ok(())
        })
        .unwrap();
        let report = |slow_us: u64| AgentLoad {
            nodes: vec![
                [1, 100, 100 * slow_us],
                [2, 100, 100 * 300],
                [3, 100, 100 * 500],
            ],
            regions: vec![
                [4, 10, 10 * slow_us],
                [5, 90, 90 * slow_us],
                [6, 50, 50 * 300],
            ],
        };
        m.report_load(report(10_000));
        assert_eq!(m.next_rebalance(3.0), None, "one slow window moves nothing");
        m.report_load(report(700));
        assert_eq!(
            m.next_rebalance(3.0),
            None,
            "2.3 times slower is under the factor"
        );
        m.report_load(report(10_000));
        assert_eq!(m.next_rebalance(3.0), None);
        m.report_load(report(10_000));
        let r = m.next_rebalance(3.0).expect("a primary moves");
        assert_eq!((r.region, r.from, r.to), (5, 1, 2), "{r:?}");
        // Region 5 now waits out its cooldown; region 4 is next.
        m.report_load(report(10_000));
        let r = m.next_rebalance(3.0).expect("a primary moves");
        assert_eq!((r.region, r.to), (4, 2), "{r:?}");
        assert!(m.node_latency()[&1] > 9_000.0);
        // Without reports the estimates stand for a few windows, then go.
        for _ in 0..=STALE_AFTER {
            assert_eq!(m.next_rebalance(3.0), None, "nothing left to move");
        }
        assert!(m.node_latency().is_empty());
    }
}
