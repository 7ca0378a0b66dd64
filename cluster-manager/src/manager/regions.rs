//! Pool regions: granting one (placement of its copies on memory nodes, creating them
//! over RPC), and taking a draining one back once its agents vacated it. Called by the
//! API's region handlers and the return loop `cli::serve` runs; a region is recorded
//! only after every copy exists, and forgotten only after every copy is dropped.

use dmc_proto::ByteSize;
use dmc_proto::cluster::RegionGrant;
use dmc_proto::shards::AgentId;

use super::{Manager, ManagerError, Member, instance_in};
use crate::state::{ClusterState, RegionRecord};

impl Manager {
    /// Grants `instance` a region: `want` (its superblock's, when an agent formats the
    /// instance's pool) or the lowest id no region or instance holds. Its copies go to the `replicas` live memory nodes
    /// with the most unallocated capacity (so never two on one node), the one that is
    /// primary of the fewest regions first; never beyond the instance's maxmemory.
    pub async fn grant_region(
        &self,
        instance: &str,
        want: Option<u16>,
    ) -> Result<RegionGrant, ManagerError> {
        let _one = self.granting.lock().await;
        let s = self.snapshot();
        let inst = instance_in(&s, instance)?;
        let size = self.pool.region_size.0;
        if let Some(id) = want {
            if s.regions.contains_key(&id) {
                return Err(ManagerError::Exists(format!("region {id}")));
            }
            if id != inst.super_region {
                return Err(ManagerError::Invalid(format!(
                    "instance {instance} may ask for its superblock region {} only, not {id}",
                    inst.super_region
                )));
            }
        }
        let allocated = s.allocated_to(instance);
        if inst.maxmemory.0 > 0 && allocated + size > inst.maxmemory.0.max(size) {
            return Err(ManagerError::Full(format!(
                "instance {instance} holds {allocated} bytes of regions; another {size} \
                 would pass its maxmemory of {}",
                inst.maxmemory.0
            )));
        }
        let mut free: Vec<(u64, u32)> = s
            .nodes
            .values()
            .filter(|n| {
                self.alive(Member::Node(n.id))
                    && !n.draining
                    && self.reachable_by_agents(&s, instance, n.id)
            })
            .map(|n| (n.capacity.0.saturating_sub(s.allocated_on(n.id)), n.id))
            .filter(|(free, _)| *free >= size)
            .collect();
        free.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        if free.len() < self.pool.replicas {
            return Err(ManagerError::Full(format!(
                "{} live memory nodes have room for a {size} byte region; {} copies needed",
                free.len(),
                self.pool.replicas
            )));
        }
        let mut chosen: Vec<u32> = free.iter().take(self.pool.replicas).map(|f| f.1).collect();
        let primaries = |n: u32| s.regions.values().filter(|r| r.primary == n).count();
        if let Some(best) = (0..chosen.len()).min_by_key(|&k| (primaries(chosen[k]), k)) {
            chosen.swap(0, best);
        }
        let free_id = |from: u16| {
            s.free_region_id(from)
                .ok_or_else(|| ManagerError::Full("no free region id".into()))
        };
        let mut id = match want {
            Some(id) => id,
            None => free_id(1)?,
        };
        // A copy that exists already (left by an earlier pool) keeps its id taken.
        loop {
            match self.create_copies(&s, id, size, &chosen).await {
                Ok(()) => break,
                Err(ManagerError::Exists(_)) if want.is_none() => id = free_id(id + 1)?,
                Err(e) => return Err(e),
            }
        }
        let rec = RegionRecord {
            id,
            instance: instance.to_string(),
            primary: chosen[0],
            backups: chosen[1..].to_vec(),
            size: ByteSize(size),
            draining: false,
            filling: vec![],
            frozen: false,
        };
        self.update(|st| {
            st.regions.insert(id, rec.clone());
            Ok(())
        })?;
        tracing::info!(region = id, instance, primary = rec.primary, backups = ?rec.backups, "granted a region");
        Ok(RegionGrant {
            region: id,
            primary: rec.primary,
            backups: rec.backups,
        })
    }

    /// Creates region `id` on every node of `nodes`, or on none.
    pub(super) async fn create_copies(
        &self,
        s: &ClusterState,
        id: u16,
        size: u64,
        nodes: &[u32],
    ) -> Result<(), ManagerError> {
        for (k, &n) in nodes.iter().enumerate() {
            let t = self.node_rpc(s, n).await?;
            if let Err(e) = t.create_region(id, size).await {
                for &m in &nodes[..k] {
                    if let Ok(t) = self.node_rpc(s, m).await {
                        let _ = t.drop_region(id).await;
                    }
                }
                return Err(match e {
                    dmc_verbs::VerbsError::RegionExists(_) => {
                        ManagerError::Exists(format!("region {id} on node {n}"))
                    }
                    e => {
                        // A broken connection is reopened next time.
                        self.node_rpc.lock().await.remove(&n);
                        ManagerError::Node {
                            node: n,
                            message: e.to_string(),
                        }
                    }
                });
            }
        }
        Ok(())
    }

    pub(super) async fn node_rpc(
        &self,
        s: &ClusterState,
        node: u32,
    ) -> Result<std::sync::Arc<dyn dmc_verbs::Transport>, ManagerError> {
        let mut conns = self.node_rpc.lock().await;
        if let Some(t) = conns.get(&node) {
            return Ok(t.clone());
        }
        let rec = s
            .nodes
            .get(&node)
            .ok_or_else(|| ManagerError::NotFound(format!("node {node}")))?;
        let fail = |message: String| ManagerError::Node { node, message };
        let endpoint = rec
            .endpoint
            .parse()
            .map_err(|e: dmc_verbs::VerbsError| fail(e.to_string()))?;
        // Memory nodes demand the cluster secret this process was started with.
        let options = dmc_verbs::RpcOptions {
            secret: dmc_process::secret::installed()
                .map(|s| s.bytes().clone())
                .unwrap_or_default(),
            tls: self.node_tls.clone(),
            ..dmc_verbs::RpcOptions::default()
        };
        let t = dmc_verbs::backend::connect(dmc_verbs::BackendKind::Tcp, endpoint, options)
            .await
            .map_err(|e| fail(e.to_string()))?;
        conns.insert(node, t.clone());
        Ok(t)
    }

    /// Records that agent `agent` vacated `region` (moved its part of the table out
    /// and evicted its keys there) while following map `version`.
    pub fn vacated(&self, region: u16, agent: AgentId, version: u64) -> Result<(), ManagerError> {
        if !self
            .state
            .lock()
            .regions
            .get(&region)
            .is_some_and(|r| r.draining)
        {
            return Err(ManagerError::NotFound(format!("draining region {region}")));
        }
        self.vacated
            .lock()
            .entry(region)
            .or_default()
            .insert(agent, version);
        Ok(())
    }

    /// Draining regions every agent of their instance has vacated under the current
    /// shard map (a rescale after a report means the new owners must vacate their
    /// slots too). Every agent counts, alive or not: a dead owner's slots still point
    /// into the region until they are given to an agent that moves them out. A region
    /// of an instance without agents is never vacated: nobody moved its blocks, and
    /// returning it would drop part of the instance's hash table.
    pub fn vacated_regions(&self) -> Vec<u16> {
        let s = self.snapshot();
        let since = *self.shards_changed.lock();
        let reports = self.vacated.lock();
        s.regions
            .values()
            .filter(|r| r.draining)
            .filter(|r| {
                let got = reports.get(&r.id);
                let mut owners = s.agents_of(&r.instance).peekable();
                owners.peek().is_some()
                    && owners.all(|a| got.and_then(|g| g.get(&a)).is_some_and(|v| *v >= since))
            })
            .map(|r| r.id)
            .collect()
    }

    /// Returns a vacated region to the memory nodes: drops its copies, clears its
    /// record in its instance's superblock (so no agent learns it again), and forgets
    /// it.
    pub async fn return_region(&self, id: u16) -> Result<(), ManagerError> {
        let s = self.snapshot();
        let rec = s
            .regions
            .get(&id)
            .cloned()
            .ok_or_else(|| ManagerError::NotFound(format!("region {id}")))?;
        let super_region = s.instances.get(&rec.instance).map(|i| i.super_region);
        if let Some(sb) = super_region.and_then(|r| s.regions.get(&r)) {
            let zero = [0u8; dmc_umo::layout::REGION_ENTRY as usize];
            for n in sb.copies() {
                let t = self.node_rpc(&s, n).await?;
                let mut verbs = [dmc_verbs::Verb::Write {
                    region: sb.id,
                    offset: dmc_umo::RegionRecord::offset(id),
                    data: &zero,
                }];
                t.post(&mut verbs).await.map_err(|e| ManagerError::Node {
                    node: n,
                    message: e.to_string(),
                })?;
            }
        }
        for n in rec.copies() {
            let t = self.node_rpc(&s, n).await?;
            match t.drop_region(id).await {
                Ok(()) | Err(dmc_verbs::VerbsError::NoSuchRegion(_)) => {}
                Err(e) => {
                    return Err(ManagerError::Node {
                        node: n,
                        message: e.to_string(),
                    });
                }
            }
        }
        self.update(|st| {
            st.regions.remove(&id);
            Ok(())
        })?;
        self.vacated.lock().remove(&id);
        tracing::info!(region = id, instance = %rec.instance, "returned a region to the memory nodes");
        Ok(())
    }

    pub fn regions(&self) -> Vec<RegionRecord> {
        self.snapshot().regions.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use dmc_proto::ByteSize;
    use dmc_proto::cluster::DEFAULT_INSTANCE as D;

    use crate::manager::{Manager, PoolSettings};
    use crate::state::{RegionRecord, StateFile};

    /// A draining region is returned only once every agent of its instance moved its
    /// slots out: not while the instance has no agent at all (it was returned at once
    /// before, dropping blocks of the hash table nobody had moved), and not while a
    /// dead agent that owns slots has not reported.
    #[test]
    fn a_draining_region_waits_for_every_owner() {
        let dir = tempfile::tempdir().unwrap();
        let lease = Duration::from_millis(50);
        let m = Manager::open(
            StateFile::new(dir.path().join("s.json")),
            8,
            lease,
            PoolSettings::default(),
        )
        .unwrap();
        m.update(|s| {
            s.regions.insert(
                9,
                RegionRecord {
                    id: 9,
                    instance: D.into(),
                    primary: 1,
                    backups: vec![],
                    size: ByteSize(1 << 20),
                    draining: true,
                    filling: vec![],
                    frozen: false,
                },
            );
            Ok(())
        })
        .unwrap();
        assert!(m.vacated_regions().is_empty(), "an instance without agents");
        let a = m.register_agent("127.0.0.1:6379".into(), D).unwrap();
        let b = m.register_agent("127.0.0.1:6380".into(), D).unwrap();
        let v = m.map_version();
        m.vacated(9, a, v).unwrap();
        // b's lease lapses without a report: its slots still point into region 9.
        std::thread::sleep(lease * 3);
        assert!(
            m.vacated_regions().is_empty(),
            "a dead owner has not vacated"
        );
        m.vacated(9, b, v).unwrap();
        assert_eq!(m.vacated_regions(), vec![9]);
    }

    /// A memory node that holds region copies cannot be removed (the regions would
    /// name a node no one knows); an empty one can.
    #[test]
    fn a_node_holding_copies_is_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manager::open(
            StateFile::new(dir.path().join("s.json")),
            8,
            Duration::from_secs(5),
            PoolSettings::default(),
        )
        .unwrap();
        m.add_node(1, "127.0.0.1:7001".into(), ByteSize(1 << 30))
            .unwrap();
        m.add_node(2, "127.0.0.1:7002".into(), ByteSize(1 << 30))
            .unwrap();
        m.update(|s| {
            s.regions.insert(
                3,
                RegionRecord {
                    id: 3,
                    instance: D.into(),
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
        let refused = m.remove_node(1).unwrap_err().to_string();
        assert!(refused.contains("holds copies of regions [3]"), "{refused}");
        m.remove_node(2).unwrap();
        assert_eq!(m.status().nodes.len(), 1);
    }
}
