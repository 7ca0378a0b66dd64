//! Moving region copies without stopping reads (issue 15, items 2 and 4):
//!
//! * **copy-free migration** ([`Manager::migrate_region`]): the region is frozen (its
//!   agents hold new writes and drain those in flight, then acknowledge), the primary
//!   role moves to a node that already holds a complete backup, and the region is thawed
//!   with the new roles in the same map. Writes to that region wait for two map rounds;
//!   reads never wait, and no byte moves.
//! * **filling a new copy** ([`Manager::fill_copy`]): the new copy is created and listed
//!   as *filling*, so once every agent has applied that map each write reaches it too,
//!   and the agents log which chunks they wrote. The manager copies the region from the
//!   primary chunk by chunk at a bounded rate, then copies again the chunks agents
//!   reported in a few rounds (a new map version collects the reports; a chunk copied
//!   while a write raced it may hold the older bytes), freezes the region, copies the
//!   chunks reported since (with the region frozen no write is in flight, so this copy
//!   is exact), and thaws it with the new copy as a backup.
//!
//! One such operation runs at a time. Every step is a persisted record change; a
//! manager restarted in the middle finishes a migration (its target is persisted with
//! the freeze) and calls a fill off ([`Manager::abandon_placements`]: the region thaws,
//! the partial copy is dropped as stale), then fills the same copy again from scratch
//! (`resume.rs`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use dmc_proto::cluster::DirtyChunks;
use dmc_proto::shards::AgentId;
use dmc_umo::FILL_CHUNK;

use super::{Manager, ManagerError, Member};
use crate::state::{ClusterState, RegionRecord};

/// Bytes copied per read and write when filling a copy.
const COPY_UNIT: u64 = 8 * FILL_CHUNK;
/// Copy units in flight at once.
const COPY_IN_FLIGHT: u64 = 4;
/// Most pre-copy rounds before a fill freezes its region.
const PRECOPY_ROUNDS: usize = 4;
/// A pre-copy round that copied this many chunks or fewer is the last.
const PRECOPY_DONE: usize = 8;

/// What a migration did, and how long writes to the region waited.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Migration {
    pub region: u16,
    pub from: u32,
    pub to: u32,
    /// From the freeze's map to every agent following the thawed one: the longest any
    /// agent's writes to the region can have waited.
    pub write_block_ms: f64,
    /// From the freeze's map until every agent had drained (the role swap's wait).
    pub drain_ms: f64,
}

/// What filling a copy did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Fill {
    pub region: u16,
    pub node: u32,
    pub bytes: u64,
    pub copy_ms: f64,
    /// Chunks written during the copy, copied again in the pre-copy rounds.
    pub precopied_chunks: usize,
    /// Chunks written during the last round, copied again while frozen.
    pub recopied_chunks: usize,
    /// From the freeze's map to every agent following the thawed one.
    pub write_block_ms: f64,
}

impl Manager {
    /// Moves region `id`'s primary role to node `to`, which must hold a complete
    /// backup (see the module doc).
    pub async fn migrate_region(&self, id: u16, to: u32) -> Result<Migration, ManagerError> {
        let _one = self.placing.lock().await;
        let rec = self.region_record(id)?;
        if rec.primary == to {
            return Err(ManagerError::Invalid(format!(
                "node {to} is region {id}'s primary already"
            )));
        }
        if !rec.backups.contains(&to) {
            return Err(ManagerError::Invalid(format!(
                "node {to} holds no complete copy of region {id} (copies on {:?}); \
                 a migration moves the primary role to a backup",
                rec.copies().collect::<Vec<_>>()
            )));
        }
        if !self.alive(Member::Node(to)) {
            return Err(ManagerError::Invalid(format!("node {to} is not alive")));
        }
        if self.snapshot().nodes.get(&to).is_some_and(|n| n.draining) {
            return Err(ManagerError::Invalid(format!("node {to} is being drained")));
        }
        let t0 = Instant::now();
        // The intent is persisted with the freeze: a manager restarted before the
        // swap finishes the migration (`resume.rs`).
        self.update(|s| {
            let r = s
                .regions
                .get_mut(&id)
                .ok_or_else(|| ManagerError::NotFound(format!("region {id}")))?;
            r.frozen = true;
            s.migrations.insert(id, to);
            Ok(())
        })?;
        self.swap_roles(&rec, to, t0).await
    }

    /// The rest of a migration of `rec`'s region to `to`, frozen since `t0` (map
    /// version now): once every agent drained and acknowledged the freeze, the roles
    /// swap and the region thaws in one change.
    pub(super) async fn swap_roles(
        &self,
        rec: &RegionRecord,
        to: u32,
        t0: Instant,
    ) -> Result<Migration, ManagerError> {
        let id = rec.id;
        let frozen = self.map_version();
        if let Err(e) = self.wait_applied(&rec.instance, frozen).await {
            self.call_off_migration(id)?;
            return Err(e);
        }
        let drained = t0.elapsed();
        let from = rec.primary;
        self.update(|s| {
            let r = s
                .regions
                .get_mut(&id)
                .ok_or_else(|| ManagerError::NotFound(format!("region {id}")))?;
            r.backups.retain(|&n| n != to);
            r.backups.insert(0, r.primary);
            r.primary = to;
            r.frozen = false;
            s.migrations.remove(&id);
            Ok(())
        })?;
        let thawed = self.map_version();
        self.wait_applied(&rec.instance, thawed).await?;
        let write_block = t0.elapsed();
        self.record_placements(&[self.region_record(id)?]).await;
        crate::metrics::region_migrated(write_block);
        tracing::info!(region = id, from, to, write_block = ?write_block, drain = ?drained, "migrated a region's primary");
        Ok(Migration {
            region: id,
            from,
            to,
            write_block_ms: ms(write_block),
            drain_ms: ms(drained),
        })
    }

    /// Thaws region `id` with its old roles and forgets its migration.
    pub(super) fn call_off_migration(&self, id: u16) -> Result<(), ManagerError> {
        self.update(|s| {
            if let Some(r) = s.regions.get_mut(&id) {
                r.frozen = false;
            }
            s.migrations.remove(&id);
            Ok(())
        })
    }

    /// Makes node `node` hold a new complete copy of region `id`, copying at most
    /// `rate` bytes a second (0: as fast as it goes). See the module doc.
    pub async fn fill_copy(&self, id: u16, node: u32, rate: u64) -> Result<Fill, ManagerError> {
        let _one = self.placing.lock().await;
        let rec = self.region_record(id)?;
        if rec.holders().any(|n| n == node) {
            return Err(ManagerError::Invalid(format!(
                "node {node} holds a copy of region {id} already"
            )));
        }
        if rec.frozen || !rec.filling.is_empty() {
            return Err(ManagerError::Invalid(format!(
                "region {id} is being moved already"
            )));
        }
        let s = self.snapshot();
        if !self.reachable_by_agents(&s, &rec.instance, node) {
            return Err(ManagerError::Invalid(format!(
                "some agents of {} cannot reach node {node} (it joined after they opened \
                 their pools; restart them first)",
                rec.instance
            )));
        }
        match self.create_copies(&s, id, rec.size.0, &[node]).await {
            Ok(()) => {}
            Err(ManagerError::Exists(_)) => {
                // A stale copy from before a failure: it is no copy of anything now.
                let t = self.node_rpc(&s, node).await?;
                let _ = t.drop_region(id).await;
                self.create_copies(&s, id, rec.size.0, &[node]).await?;
            }
            Err(e) => return Err(e),
        }
        self.fill_dirty.lock().insert(id, BTreeSet::new());
        let filled = self.fill(&rec, node, rate).await;
        self.fill_dirty.lock().remove(&id);
        if filled.is_err() {
            // Called off: the region thaws, the partial copy goes.
            let _ = self.change_region(id, |r| {
                r.filling.retain(|&n| n != node);
                r.frozen = false;
            });
            if let Ok(t) = self.node_rpc(&s, node).await {
                let _ = t.drop_region(id).await;
            }
        }
        filled
    }

    async fn fill(&self, rec: &RegionRecord, node: u32, rate: u64) -> Result<Fill, ManagerError> {
        let id = rec.id;
        let filling = self.change_region(id, |r| r.filling.push(node))?;
        self.wait_applied(&rec.instance, filling).await?;
        let writers: BTreeSet<AgentId> = self.live_agents_of(&rec.instance);
        // Every agent now writes the new copy too: copy what was there before.
        let t0 = Instant::now();
        let size = rec.size.0;
        let started = Instant::now();
        let mut offset = 0;
        while offset < size {
            // A few units in flight at once: each is a read from the primary and a write
            // to the new copy, round trips that would otherwise run one after another.
            let batch: Vec<(u64, u64)> = (0..COPY_IN_FLIGHT)
                .map(|k| offset + k * COPY_UNIT)
                .take_while(|at| *at < size)
                .map(|at| (at, COPY_UNIT.min(size - at)))
                .collect();
            let mut copies = Vec::with_capacity(batch.len());
            for &(at, len) in &batch {
                copies.push(self.copy_range(id, node, at, len));
            }
            futures::future::try_join_all(copies).await?;
            offset = batch.last().map_or(size, |&(at, len)| at + len);
            if rate > 0 {
                let due = Duration::from_secs_f64(offset as f64 / rate as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
            }
        }
        // Pre-copy rounds: a new map version makes every agent report the chunks its
        // landed writes touched; copying them again shrinks what is left for the frozen
        // pass to what one round of writes dirties.
        let mut recopied = 0;
        for _ in 0..PRECOPY_ROUNDS {
            self.update(|_| Ok(()))?;
            self.wait_applied(&rec.instance, self.map_version()).await?;
            let dirty = self
                .fill_dirty
                .lock()
                .get_mut(&id)
                .map(std::mem::take)
                .unwrap_or_default();
            self.copy_chunks(id, node, size, &dirty).await?;
            recopied += dirty.len();
            if dirty.len() <= PRECOPY_DONE {
                break;
            }
        }
        let copy_time = t0.elapsed();
        // Freeze: once every agent follows, each has drained and reported its log.
        let t1 = Instant::now();
        let frozen = self.change_region(id, |r| r.frozen = true)?;
        self.wait_applied(&rec.instance, frozen).await?;
        let mut dirty: BTreeSet<u32> = self.fill_dirty.lock().remove(&id).unwrap_or_default();
        if writers
            .iter()
            .any(|a| !self.live_agents_of(&rec.instance).contains(a))
        {
            // An agent that wrote during the copy left without its last report: its
            // chunks are unknown, so every chunk is copied again.
            tracing::warn!(
                region = id,
                "an agent left during the fill: copying the whole region again"
            );
            dirty = (0..size.div_ceil(FILL_CHUNK) as u32).collect();
        }
        self.copy_chunks(id, node, size, &dirty).await?;
        let done = self.change_region(id, |r| {
            r.filling.retain(|&n| n != node);
            r.backups.push(node);
            r.frozen = false;
        })?;
        self.wait_applied(&rec.instance, done).await?;
        let write_block = t1.elapsed();
        self.record_placements(&[self.region_record(id)?]).await;
        crate::metrics::copy_filled(size);
        tracing::info!(region = id, node, bytes = size, copy = ?copy_time, precopied = recopied,
            recopied = dirty.len(), write_block = ?write_block, "a new copy of the region is complete");
        Ok(Fill {
            region: id,
            node,
            bytes: size,
            copy_ms: ms(copy_time),
            precopied_chunks: recopied,
            recopied_chunks: dirty.len(),
            write_block_ms: ms(write_block),
        })
    }

    /// Copies the [`FILL_CHUNK`]s `chunks` of region `id` (of `size` bytes) from its
    /// primary to `node`'s copy, several at once.
    async fn copy_chunks(
        &self,
        id: u16,
        node: u32,
        size: u64,
        chunks: &BTreeSet<u32>,
    ) -> Result<(), ManagerError> {
        let offsets: Vec<u64> = chunks
            .iter()
            .map(|&c| c as u64 * FILL_CHUNK)
            .filter(|at| *at < size)
            .collect();
        for window in offsets.chunks(8) {
            let mut copies = Vec::with_capacity(window.len());
            for &at in window {
                copies.push(self.copy_range(id, node, at, FILL_CHUNK.min(size - at)));
            }
            futures::future::try_join_all(copies).await?;
        }
        Ok(())
    }

    /// Copies `len` bytes at `offset` of region `id` from its primary (as the record
    /// says now) to `node`'s copy; fails if the region lost its primary or that copy.
    async fn copy_range(
        &self,
        id: u16,
        node: u32,
        offset: u64,
        len: u64,
    ) -> Result<(), ManagerError> {
        let rec = self.region_record(id)?;
        if !rec.filling.contains(&node) {
            return Err(ManagerError::Invalid(format!(
                "region {id}'s copy on node {node} was called off"
            )));
        }
        let s = self.snapshot();
        let mut buf = vec![0u8; len as usize];
        let fail = |node: u32| {
            move |e: dmc_verbs::VerbsError| ManagerError::Node {
                node,
                message: e.to_string(),
            }
        };
        let src = self.node_rpc(&s, rec.primary).await?;
        if let Err(e) = src.read(id, offset, &mut buf).await {
            self.node_rpc.lock().await.remove(&rec.primary);
            return Err(fail(rec.primary)(e));
        }
        let dst = self.node_rpc(&s, node).await?;
        if let Err(e) = dst.write(id, offset, &buf).await {
            self.node_rpc.lock().await.remove(&node);
            return Err(fail(node)(e));
        }
        Ok(())
    }

    /// The next region short of the pool's `replicas` complete copies and the node to
    /// fill one on: every copy it has is on a live node (a dead one leaves the record
    /// first), nothing else moves it, and the node is the live one with the most room
    /// that holds no copy of it.
    pub fn next_refill(&self) -> Option<(u16, u32)> {
        let s = self.snapshot();
        let alive = |n: u32| self.alive(Member::Node(n));
        for r in s.regions.values() {
            if r.copies().count() >= self.pool.replicas
                || r.frozen
                || r.draining
                || !r.filling.is_empty()
                || !r.copies().all(alive)
            {
                continue;
            }
            if let Some(node) = self.fill_target(&s, r) {
                return Some((r.id, node));
            }
        }
        None
    }

    /// The live node, not being drained, with the most room for a copy of `r` that
    /// holds none yet.
    pub(super) fn fill_target(&self, s: &ClusterState, r: &RegionRecord) -> Option<u32> {
        s.nodes
            .values()
            .filter(|n| {
                self.alive(Member::Node(n.id))
                    && !n.draining
                    && !r.holders().any(|c| c == n.id)
                    && self.reachable_by_agents(s, &r.instance, n.id)
            })
            .map(|n| (n.capacity.0.saturating_sub(s.allocated_on(n.id)), n.id))
            .filter(|(free, _)| *free >= r.size.0)
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
            .map(|(_, n)| n)
    }

    /// Adds the chunks an agent reports to the logs of the fills in progress (reports
    /// for other regions are late and ignored). Called before the report's map version
    /// is recorded as applied, so a fill that sees the version has the chunks.
    pub fn report_dirty(&self, dirty: Vec<DirtyChunks>) {
        let mut fills = self.fill_dirty.lock();
        for d in dirty {
            if let Some(log) = fills.get_mut(&d.region) {
                log.extend(d.chunks);
            }
        }
    }

    /// Calls off placement changes a previous manager left half done: a frozen region
    /// thaws with the roles it has, a copy being filled leaves the record (and is
    /// dropped as stale later). Called when the manager opens its state.
    pub(super) fn abandon_placements(&self) -> Result<(), ManagerError> {
        let (busy, fills): (Vec<u16>, Vec<(u16, u32)>) = {
            let s = self.state.lock();
            let busy = s
                .regions
                .values()
                .filter(|r| {
                    (r.frozen && !s.migrations.contains_key(&r.id)) || !r.filling.is_empty()
                })
                .map(|r| r.id)
                .collect();
            let fills = s
                .regions
                .values()
                .flat_map(|r| r.filling.iter().map(|n| (r.id, *n)))
                .collect();
            (busy, fills)
        };
        // Fills start again from scratch once the manager serves (`resume.rs`).
        self.unfinished_fills.lock().extend(fills);
        if busy.is_empty() {
            return Ok(());
        }
        tracing::warn!(regions = ?busy, "calling off region fills a previous manager left unfinished; they start again");
        self.update(|s| {
            for id in &busy {
                if let Some(r) = s.regions.get_mut(id) {
                    r.frozen = false;
                    r.filling.clear();
                }
            }
            Ok(())
        })?;
        *self.placements_changed.lock() = self.map_version();
        Ok(())
    }

    /// The record of region `id`.
    pub(super) fn region_record(&self, id: u16) -> Result<RegionRecord, ManagerError> {
        self.state
            .lock()
            .regions
            .get(&id)
            .cloned()
            .ok_or_else(|| ManagerError::NotFound(format!("region {id}")))
    }

    /// Changes region `id`'s record (persisted, a new map); returns the map version.
    fn change_region(
        &self,
        id: u16,
        change: impl FnOnce(&mut RegionRecord),
    ) -> Result<u64, ManagerError> {
        self.update(|s| {
            let r = s
                .regions
                .get_mut(&id)
                .ok_or_else(|| ManagerError::NotFound(format!("region {id}")))?;
            change(r);
            Ok(())
        })?;
        Ok(self.map_version())
    }

    fn live_agents_of(&self, instance: &str) -> BTreeSet<AgentId> {
        let agents: Vec<AgentId> = self.state.lock().agents_of(instance).collect();
        agents
            .into_iter()
            .filter(|a| self.alive(Member::Agent(*a)))
            .collect()
    }

    /// Waits until every live agent of `instance` applied map `version`; an agent that
    /// cannot within two leases is failing (its lease lapses, and it stops writing).
    async fn wait_applied(&self, instance: &str, version: u64) -> Result<(), ManagerError> {
        let deadline = Instant::now() + self.lease * 2;
        loop {
            let reported = self.applied_changed.notified();
            tokio::pin!(reported);
            reported.as_mut().enable();
            if self.applied_by_all(instance, version, &[]) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(ManagerError::Invalid(format!(
                    "not every agent of {instance} applied cluster map {version} within two leases"
                )));
            }
            // Agents that die leave `applied_by_all` by their lease: look again now
            // and then even without a report.
            let _ = tokio::time::timeout(Duration::from_millis(50), reported).await;
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use dmc_proto::ByteSize;
    use dmc_proto::cluster::DEFAULT_INSTANCE as D;

    use crate::manager::{Manager, PoolSettings};
    use crate::state::{RegionRecord, StateFile};

    /// A region short of copies gets a new one on a live node that holds none, only
    /// where every agent of its instance can reach it (an agent's node list is fixed
    /// when it opens its pool; a copy it cannot reach would miss its writes).
    #[test]
    fn refills_go_only_to_nodes_every_agent_reaches() {
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
            s.regions.insert(
                4,
                RegionRecord {
                    id: 4,
                    instance: D.to_string(),
                    primary: 1,
                    backups: vec![],
                    size: ByteSize(1 << 20),
                    draining: false,
                    filling: vec![],
                    frozen: false,
                },
            );
            Ok(())
        })
        .unwrap();
        let agent = m.register_agent("127.0.0.1:9".into(), D).unwrap();
        // Node 3 has the most room (ties: the lowest id wins, so make 2 busier).
        m.update(|s| {
            s.regions.insert(
                5,
                RegionRecord {
                    id: 5,
                    instance: D.to_string(),
                    primary: 2,
                    backups: vec![1],
                    size: ByteSize(1 << 20),
                    draining: false,
                    filling: vec![],
                    frozen: false,
                },
            );
            Ok(())
        })
        .unwrap();
        assert_eq!(m.next_refill(), Some((4, 3)), "no report yet: any node");
        m.report_nodes(agent, vec![1, 2]);
        assert_eq!(m.next_refill(), Some((4, 2)), "the agent cannot reach 3");
        m.report_nodes(agent, vec![1]);
        assert_eq!(m.next_refill(), None);
    }
}
