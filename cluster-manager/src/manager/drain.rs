//! Draining a memory node (`nodes drain NODE`, issue 15 item 4): the node takes no new
//! copies; every region whose primary it holds moves that role to a backup (copy-free,
//! [`Manager::migrate_region`]); every region with a copy on it gets a new copy filled
//! on another node ([`Manager::fill_copy`]) and then loses the drained one, which the
//! stale-copy sweep drops once every agent follows. Afterwards `nodes remove NODE`
//! succeeds. Reads never wait; writes to a region wait only while its roles swap and
//! while its new copy is finished.

use std::time::Instant;

use super::{Fill, Manager, ManagerError, Migration};

/// What a drain did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Drain {
    pub node: u32,
    pub migrated: Vec<Migration>,
    pub filled: Vec<Fill>,
    pub millis: u64,
}

impl Manager {
    /// Empties memory node `node` of region copies (see the module doc); `rate` bounds
    /// each fill (bytes a second, 0: unbounded).
    pub async fn drain_node(&self, node: u32, rate: u64) -> Result<Drain, ManagerError> {
        let started = Instant::now();
        self.update(|s| {
            let n = s
                .nodes
                .get_mut(&node)
                .ok_or_else(|| ManagerError::NotFound(format!("node {node}")))?;
            n.draining = true;
            Ok(())
        })?;
        let mut migrated = Vec::new();
        let mut filled = Vec::new();
        let held: Vec<u16> = self
            .snapshot()
            .regions
            .values()
            .filter(|r| r.copies().any(|c| c == node))
            .map(|r| r.id)
            .collect();
        for id in held {
            let s = self.snapshot();
            let Some(r) = s.regions.get(&id) else {
                continue;
            };
            if r.primary == node {
                let Some(&to) = r.backups.iter().find(|&&b| {
                    self.alive(super::Member::Node(b))
                        && !s.nodes.get(&b).is_some_and(|n| n.draining)
                }) else {
                    return Err(ManagerError::Invalid(format!(
                        "region {id} has no live backup to take over its primary role from node {node}"
                    )));
                };
                migrated.push(self.migrate_region(id, to).await?);
            }
            let s = self.snapshot();
            let Some(r) = s.regions.get(&id) else {
                continue;
            };
            let target = self.fill_target(&s, r).ok_or_else(|| {
                ManagerError::Full(format!(
                    "no live node with room holds no copy of region {id}: node {node} cannot be drained"
                ))
            })?;
            filled.push(self.fill_copy(id, target, rate).await?);
            self.update(|s| {
                if let Some(r) = s.regions.get_mut(&id) {
                    r.backups.retain(|&b| b != node);
                }
                Ok(())
            })?;
            *self.placements_changed.lock() = self.map_version();
            let rec = self
                .snapshot()
                .regions
                .get(&id)
                .cloned()
                .ok_or_else(|| ManagerError::NotFound(format!("region {id}")))?;
            self.record_placements(&[rec]).await;
            tracing::info!(region = id, node, "moved a region copy off a draining node");
        }
        Ok(Drain {
            node,
            migrated,
            filled,
            millis: started.elapsed().as_millis() as u64,
        })
    }
}
