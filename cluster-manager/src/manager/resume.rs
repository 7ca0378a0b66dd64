//! Finishing what a previous manager process started (issue 15, item 5): run once the
//! restarted manager serves (agents must be able to report maps applied).
//!
//! * a **migration** (persisted in `ClusterState::migrations` with the freeze) is
//!   finished: the region is still frozen; a new map version makes every agent drain
//!   and report, then the roles swap and it thaws, as [`Manager::migrate_region`]
//!   would have (a target no longer able to take the role thaws the region instead);
//! * a **fill** (a copy listed as filling) was called off when the state was loaded
//!   ([`Manager::abandon_placements`]) and is started again from scratch, to the same
//!   node, at the manager's `fill-rate`;
//! * a **drain** (a node marked draining that still holds copies) is run again; it
//!   skips what is done.

use std::time::Instant;

use super::{Manager, ManagerError, Member};

/// What a restarted manager finished.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Resumed {
    pub migrations: usize,
    pub fills: usize,
    pub drains: usize,
}

impl Manager {
    /// Finishes the migrations, fills and drains a previous manager left unfinished
    /// (see the module doc); `rate` bounds each fill. Failures are logged and left to
    /// the operator (or, for lost copies, to re-replication).
    pub async fn finish_unfinished(&self, rate: u64) -> Resumed {
        let mut done = Resumed::default();
        let migrations: Vec<(u16, u32)> = self
            .snapshot()
            .migrations
            .iter()
            .map(|(r, n)| (*r, *n))
            .collect();
        for (id, to) in migrations {
            match self.finish_migration(id, to).await {
                Ok(m) => {
                    done.migrations += 1;
                    tracing::info!(
                        region = id,
                        to,
                        write_block_ms = m.write_block_ms,
                        "finished a migration a previous manager started"
                    )
                }
                Err(e) => {
                    tracing::warn!(region = id, to, error = %e, "could not finish a migration a previous manager started; the region keeps its roles")
                }
            }
        }
        let fills = std::mem::take(&mut *self.unfinished_fills.lock());
        for (id, node) in fills {
            match self.fill_copy(id, node, rate).await {
                Ok(_) => {
                    done.fills += 1;
                    tracing::info!(
                        region = id,
                        node,
                        "filled again a copy a previous manager left unfinished"
                    )
                }
                Err(e) => {
                    tracing::warn!(region = id, node, error = %e, "could not fill again a copy a previous manager left unfinished")
                }
            }
        }
        let s = self.snapshot();
        let drains: Vec<u32> = s
            .nodes
            .values()
            .filter(|n| n.draining && s.regions.values().any(|r| r.copies().any(|c| c == n.id)))
            .map(|n| n.id)
            .collect();
        for node in drains {
            match self.drain_node(node, rate).await {
                Ok(_) => {
                    done.drains += 1;
                    tracing::info!(node, "finished draining a node a previous manager started")
                }
                Err(e) => {
                    tracing::warn!(node, error = %e, "could not finish draining a node a previous manager started")
                }
            }
        }
        done
    }

    /// Finishes the migration of region `id` to `to` recorded with its freeze.
    async fn finish_migration(&self, id: u16, to: u32) -> Result<super::Migration, ManagerError> {
        let _one = self.placing.lock().await;
        let rec = self.region_record(id)?;
        let able = rec.backups.contains(&to)
            && self.alive(Member::Node(to))
            && !self.snapshot().nodes.get(&to).is_some_and(|n| n.draining);
        if !able {
            self.call_off_migration(id)?;
            return Err(ManagerError::Invalid(format!(
                "node {to} can no longer take region {id}'s primary role"
            )));
        }
        // A new version of the (still frozen) map: every agent applies it, drains
        // and reports to this manager.
        let t0 = Instant::now();
        self.update(|s| {
            if let Some(r) = s.regions.get_mut(&id) {
                r.frozen = true;
            }
            Ok(())
        })?;
        self.swap_roles(&rec, to, t0).await
    }
}
