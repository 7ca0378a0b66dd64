//! The cluster map an instance's agents follow: building it from the state, the long
//! poll for a newer version, and which version each agent reports having applied (so a
//! rescale knows when all follow). Called by the API's map and heartbeat handlers and by
//! `scale`; it never changes the persisted state (applied versions are in memory only).

use std::time::Duration;

use dmc_proto::cluster::{
    AgentInfo, ClusterMap, InstanceSpec, PoolSpec, PoolTransport, RegionPlacement,
};
use dmc_proto::shards::AgentId;

use super::revoke::Fenced;
use super::{Manager, ManagerError, Member, instance_in};

impl Manager {
    /// The cluster as `instance`'s agents see it.
    pub fn map(&self, instance: &str) -> Result<ClusterMap, ManagerError> {
        let s = self.state.lock();
        let inst = instance_in(&s, instance)?;
        Ok(ClusterMap {
            cluster_id: s.cluster_id.clone(),
            version: s.map_version,
            shards: inst.shards.clone(),
            agents: s
                .agents
                .values()
                .filter(|a| a.instance == instance)
                .map(|a| AgentInfo {
                    id: a.id,
                    listen: a.listen.clone(),
                    tls_listen: a.tls_listen.clone(),
                })
                .collect(),
            pool: PoolSpec {
                transport: self.pool.transport,
                nodes: s.nodes.values().map(|n| n.endpoint.clone()).collect(),
                node_ids: s.nodes.keys().copied().collect(),
                replicas: self.pool.replicas,
                region_size: self.pool.region_size,
                segment_size: self.pool.segment_size,
            },
            lease_ms: self.lease.as_millis() as u64,
            draining: s
                .regions
                .values()
                .filter(|r| r.draining && r.instance == instance)
                .map(|r| r.id)
                .collect(),
            regions: s
                .regions
                .values()
                .filter(|r| r.instance == instance)
                .map(|r| RegionPlacement {
                    id: r.id,
                    primary: r.primary,
                    backups: r.backups.clone(),
                    filling: r.filling.clone(),
                    frozen: r.frozen,
                })
                .collect(),
            instance: InstanceSpec {
                name: inst.name.clone(),
                maxmemory: inst.maxmemory,
                policy: inst.policy.clone(),
                super_region: inst.super_region,
                acl: inst.acl.clone(),
                acl_version: inst.acl_version,
                functions: inst.functions.clone(),
                functions_version: inst.functions_version,
                scripts: inst.scripts.clone(),
                scripts_version: inst.scripts_version,
            },
        })
    }

    /// `instance`'s map once its version passes `after`, or the current one after
    /// `wait`.
    pub async fn wait_map(
        &self,
        instance: &str,
        after: u64,
        wait: Duration,
    ) -> Result<ClusterMap, ManagerError> {
        self.map(instance)?;
        let mut rx = self.version.subscribe();
        let _ = tokio::time::timeout(wait, rx.wait_for(|v| *v > after)).await;
        self.map(instance)
    }

    pub fn map_version(&self) -> u64 {
        self.state.lock().map_version
    }

    /// Whether every live agent of `instance` (other than `except`) has applied map
    /// `version`.
    pub fn applied_by_all(&self, instance: &str, version: u64, except: &[AgentId]) -> bool {
        let agents: Vec<AgentId> = self.state.lock().agents_of(instance).collect();
        let applied = self.applied.lock();
        agents
            .iter()
            .filter(|a| !except.contains(a) && self.alive(Member::Agent(**a)))
            .all(|a| applied.get(a).is_some_and(|v| *v >= version))
    }

    /// The map version agent `id` last reported applying (0: none yet).
    pub fn applied_version(&self, id: AgentId) -> u64 {
        self.applied.lock().get(&id).copied().unwrap_or(0)
    }

    /// Forgets removed agents that write nothing any more (silent for one and a half
    /// leases and revoked if they were failed over, or fenced by revocation alone on
    /// `tcp`), so no handoff waits for them.
    fn forget_silent_departed(&self) {
        let ids: Vec<AgentId> = self.departed.lock().keys().copied().collect();
        let fenced = self.fenced(&ids);
        // Lock order: departed, applied, seen, exited (as `released` takes the last
        // three).
        let mut departed = self.departed.lock();
        let mut applied = self.applied.lock();
        let mut seen = self.seen.lock();
        departed.retain(|id, _| {
            let silent = seen
                .get(&Member::Agent(*id))
                .is_none_or(|t| t.elapsed() >= self.lease * 3 / 2)
                || self.exited_long_enough(*id);
            let f = fenced.get(id).copied().unwrap_or(Fenced::Pending);
            let gone = (silent && f != Fenced::Pending) || self.fence_suffices(f);
            if gone {
                seen.remove(&Member::Agent(*id));
                applied.remove(id);
                self.exited.lock().remove(id);
            }
            !gone
        });
    }

    /// Records that agent `id` applied map `version` (also renews its lease).
    /// A removed agent's report is recorded too (it still follows maps while it
    /// drains), though it renews no lease.
    pub fn applied(&self, id: AgentId, version: u64) -> Result<(), ManagerError> {
        {
            let mut applied = self.applied.lock();
            let v = applied.entry(id).or_default();
            *v = (*v).max(version);
        }
        self.applied_changed.notify_waiters();
        if self.departed.lock().contains_key(&id) {
            // Removed and draining: its report counts (the agents taking its shards
            // wait for it), and it has no lease left to renew.
            return Ok(());
        }
        self.heartbeat(Member::Agent(id))
    }

    /// Whether agent `id` may write the shards it gained in map `version`: every other
    /// agent of its instance, and every agent removed from it, has applied that map
    /// (so it released whatever it held of them, however many owners a shard went
    /// through on the way) or has been silent for one and a half leases (dead,
    /// partitioned, or gone), or its process was seen to exit a grace period ago. An
    /// agent stops writing one lease after its last accepted heartbeat was sent; the
    /// extra half is the margin for writes in flight and clock drift. A failed-over
    /// agent must also be revoked on every live memory node (`revoke.rs`), which on a
    /// `tcp` pool suffices without the wait.
    pub fn released(&self, id: AgentId, version: u64) -> bool {
        let Some(instance) = self.instance_of(id) else {
            return false;
        };
        self.forget_silent_departed();
        let mut others: Vec<AgentId> = self.state.lock().agents_of(&instance).collect();
        others.extend(
            self.departed
                .lock()
                .iter()
                .filter(|(_, i)| **i == instance)
                .map(|(a, _)| *a),
        );
        let fenced = self.fenced(&others);
        let applied = self.applied.lock();
        let seen = self.seen.lock();
        others.iter().filter(|a| **a != id).all(|a| {
            let f = fenced.get(a).copied().unwrap_or(Fenced::Pending);
            applied.get(a).is_some_and(|v| *v >= version)
                || (f != Fenced::Pending
                    && (seen
                        .get(&Member::Agent(*a))
                        .is_none_or(|t| t.elapsed() >= self.lease * 3 / 2)
                        || self.exited_long_enough(*a)))
                || self.fence_suffices(f)
        })
    }

    /// Whether revocation alone stops an agent writing: on a `tcp` pool every verb
    /// goes through a memory node, which refuses a revoked client, and on an `rdma`
    /// pool the node moves the client's queue pairs to the error state; over `shm` the
    /// agent's one-sided stores bypass the node and only its lease stops them.
    fn fence_suffices(&self, f: Fenced) -> bool {
        f == Fenced::Everywhere
            && matches!(
                self.pool.transport,
                PoolTransport::Tcp | PoolTransport::Rdma
            )
    }
}
