//! Memory-node failover, first part (issue 15, item 2): a memory node whose lease
//! lapsed loses its place in every region record. Where it held a backup the region
//! runs on its remaining copies; where it held the primary, the first live backup is
//! promoted (it holds every committed word: commits reach the backups first). The new
//! records go to the instance's superblock (every live copy of its region table, so an
//! agent opening the pool sees them) and into the cluster map, which agents apply
//! before their next operations on the region. A node that comes back has its stale
//! copies dropped ([`Manager::drop_stale_copies`]), never served. Not yet: copying a
//! region to another node to restore `r` copies.

use dmc_verbs::Verb;

use super::{Manager, ManagerError, Member};
use crate::state::RegionRecord;

impl Manager {
    /// Takes memory nodes whose lease lapsed out of every region record (see the
    /// module doc); a region that would be left with no copy keeps its record (its
    /// data is gone with the node; nothing better can be served). Returns the nodes
    /// taken out, if any.
    pub async fn fail_lapsed_nodes(&self) -> Result<Vec<u32>, ManagerError> {
        let s = self.snapshot();
        let dead: Vec<u32> = s
            .nodes
            .keys()
            .copied()
            .filter(|n| !self.alive(Member::Node(*n)))
            .collect();
        let changed: Vec<RegionRecord> = s
            .regions
            .values()
            .filter_map(|r| without(r, &dead))
            .collect();
        if changed.is_empty() {
            return Ok(Vec::new());
        }
        self.update(|st| {
            for r in &changed {
                st.regions.insert(r.id, r.clone());
            }
            Ok(())
        })?;
        *self.placements_changed.lock() = self.map_version();
        self.record_placements(&changed).await;
        let failed: Vec<u32> = dead
            .into_iter()
            .filter(|n| s.regions.values().any(|r| r.copies().any(|c| c == *n)))
            .collect();
        tracing::warn!(nodes = ?failed, regions = changed.len(), "memory nodes failed: their copies left the region records");
        Ok(failed)
    }

    /// Drops, on every live memory node, the copies of regions whose record no
    /// longer lists that node: a node that failed, left the records and came back holds
    /// stale data there, which must never be served (nor take its capacity). Only once
    /// every live agent follows the map that took the node out, so no agent still
    /// reads those copies. Regions without a record are left alone (a grant in
    /// progress creates its copies before it records them). Returns what it dropped,
    /// as (node, region).
    pub async fn drop_stale_copies(&self) -> Result<Vec<(u32, u16)>, ManagerError> {
        let changed = *self.placements_changed.lock();
        if changed == 0 {
            return Ok(Vec::new());
        }
        let s = self.snapshot();
        if !s
            .instances
            .keys()
            .all(|i| self.applied_by_all(i, changed, &[]))
        {
            return Ok(Vec::new());
        }
        let mut dropped = Vec::new();
        for &node in s.nodes.keys().filter(|n| self.alive(Member::Node(**n))) {
            let t = self.node_rpc(&s, node).await?;
            let held = match t.list_regions().await {
                Ok(held) => held,
                Err(e) => {
                    // A broken connection is reopened next time.
                    self.node_rpc.lock().await.remove(&node);
                    tracing::debug!(node, error = %e, "listing a node's regions failed");
                    continue;
                }
            };
            for (region, _) in held {
                let stale = s
                    .regions
                    .get(&region)
                    .is_some_and(|r| !r.holders().any(|c| c == node));
                if !stale {
                    continue;
                }
                match t.drop_region(region).await {
                    Ok(()) => {
                        tracing::warn!(
                            node,
                            region,
                            "dropped a copy its region record no longer lists \
                             (a failed node came back with it, or the node was drained)"
                        );
                        dropped.push((node, region));
                    }
                    Err(e) => {
                        tracing::warn!(node, region, error = %e, "dropping a stale copy failed")
                    }
                }
            }
        }
        Ok(dropped)
    }

    /// Writes the records of `regions` into their instances' superblocks, on every
    /// live copy of each superblock region (best effort: a copy that fails is logged;
    /// agents also get the records with the map).
    pub(super) async fn record_placements(&self, regions: &[RegionRecord]) {
        let s = self.snapshot();
        for r in regions {
            let Some(sb) = s
                .instances
                .get(&r.instance)
                .and_then(|i| s.regions.get(&i.super_region))
            else {
                continue;
            };
            let entry = dmc_umo::RegionRecord {
                primary: r.primary,
                backups: r.backups.clone(),
            }
            .encode();
            let at = dmc_umo::RegionRecord::offset(r.id);
            if let Some(log) = self.fill_dirty.lock().get_mut(&sb.id) {
                // The superblock's region is being filled: copy this record again.
                log.insert((at / dmc_umo::FILL_CHUNK) as u32);
            }
            for node in sb.holders() {
                let written = async {
                    let t = self.node_rpc(&s, node).await?;
                    let mut verbs = [Verb::Write {
                        region: sb.id,
                        offset: at,
                        data: &entry,
                    }];
                    t.post(&mut verbs).await.map_err(|e| ManagerError::Node {
                        node,
                        message: e.to_string(),
                    })
                }
                .await;
                if let Err(e) = written {
                    tracing::warn!(region = r.id, node, error = %e, "recording a region's new copies failed");
                }
            }
        }
    }
}

/// `r` without its copies on `dead` nodes, the first live copy its primary; `None`
/// when nothing changes, or when no copy would be left (the data is gone with the
/// nodes: the record stays as it was).
fn without(r: &RegionRecord, dead: &[u32]) -> Option<RegionRecord> {
    let live: Vec<u32> = r.copies().filter(|c| !dead.contains(c)).collect();
    let filling: Vec<u32> = r
        .filling
        .iter()
        .copied()
        .filter(|c| !dead.contains(c))
        .collect();
    if live.len() == r.copies().count() && filling.len() == r.filling.len() {
        return None;
    }
    let Some((&primary, backups)) = live.split_first() else {
        tracing::error!(
            region = r.id,
            "every copy of the region is on failed memory nodes"
        );
        return None;
    };
    if primary != r.primary {
        tracing::warn!(
            region = r.id,
            from = r.primary,
            to = primary,
            "promoted a backup to primary"
        );
    }
    Some(RegionRecord {
        primary,
        backups: backups.to_vec(),
        filling,
        ..r.clone()
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use dmc_proto::ByteSize;
    use dmc_proto::cluster::DEFAULT_INSTANCE as D;

    use crate::manager::{Manager, Member, PoolSettings};
    use crate::state::{RegionRecord, StateFile};

    /// A lapsed node leaves every region record once, a backup promoted where it was
    /// the primary; a region with no other copy keeps its record; the map carries the
    /// new placements; nothing changes (no new map) on later checks.
    #[tokio::test]
    async fn a_lapsed_node_leaves_the_region_records_once() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manager::open(
            StateFile::new(dir.path().join("state.json")),
            8,
            Duration::from_millis(100),
            PoolSettings::default(),
        )
        .unwrap();
        for id in 1..=3u32 {
            // Nothing listens there: recording in the superblock fails fast, logged.
            m.add_node(id, format!("127.0.0.1:{id}"), ByteSize(1 << 30))
                .unwrap();
        }
        let rec = |id: u16, primary: u32, backups: Vec<u32>| RegionRecord {
            id,
            instance: D.to_string(),
            primary,
            backups,
            size: ByteSize(1 << 20),
            draining: false,
            filling: vec![],
            frozen: false,
        };
        m.update(|s| {
            for r in [rec(1, 1, vec![2]), rec(2, 2, vec![1, 3]), rec(3, 1, vec![])] {
                s.regions.insert(r.id, r);
            }
            Ok(())
        })
        .unwrap();
        assert!(m.fail_lapsed_nodes().await.unwrap().is_empty(), "all alive");
        std::thread::sleep(Duration::from_millis(150));
        m.heartbeat(Member::Node(2)).unwrap();
        m.heartbeat(Member::Node(3)).unwrap();
        assert_eq!(m.fail_lapsed_nodes().await.unwrap(), vec![1]);
        let s = m.snapshot();
        assert_eq!(
            (s.regions[&1].primary, s.regions[&1].backups.clone()),
            (2, vec![])
        );
        assert_eq!(
            (s.regions[&2].primary, s.regions[&2].backups.clone()),
            (2, vec![3])
        );
        assert_eq!(
            (s.regions[&3].primary, s.regions[&3].backups.clone()),
            (1, vec![])
        );
        let map = m.map(D).unwrap();
        assert!(
            map.regions
                .iter()
                .any(|r| r.id == 1 && r.primary == 2 && r.backups.is_empty())
        );
        let version = m.map_version();
        assert!(m.fail_lapsed_nodes().await.unwrap().is_empty());
        assert_eq!(m.map_version(), version, "no change, no new map");
    }
}
