//! Membership: memory nodes and agents joining and leaving, their leases (renewed by
//! heartbeats, never persisted) and the record of agents this manager's launcher
//! started. Called by the API's node/agent handlers and by `scale`; shards move here
//! only through `ClusterState::rebalance`, never by hand.

use std::time::{Duration, Instant};

use dmc_proto::ByteSize;
use dmc_proto::shards::AgentId;

use super::{Manager, ManagerError, Member};
use crate::state::{AgentRecord, LaunchRecord, NodeRecord};

impl Manager {
    pub fn record_launch(&self, rec: LaunchRecord) -> Result<(), ManagerError> {
        self.update(|s| {
            s.launched.insert(rec.listen.clone(), rec);
            Ok(())
        })
    }

    pub fn forget_launch(&self, listen: &str) -> Result<(), ManagerError> {
        self.update(|s| {
            s.launched.remove(listen);
            Ok(())
        })
    }

    pub fn alive(&self, m: Member) -> bool {
        self.seen
            .lock()
            .get(&m)
            .is_some_and(|t| t.elapsed() < self.lease)
    }

    pub fn heartbeat(&self, m: Member) -> Result<(), ManagerError> {
        let known = {
            let s = self.state.lock();
            match m {
                Member::Node(id) => s.nodes.contains_key(&id),
                Member::Agent(id) => s.agents.contains_key(&id),
            }
        };
        if !known {
            return Err(ManagerError::NotFound(format!("{m:?}")));
        }
        self.seen.lock().insert(m, Instant::now());
        Ok(())
    }

    pub fn add_node(
        &self,
        id: u32,
        endpoint: String,
        capacity: ByteSize,
    ) -> Result<(), ManagerError> {
        if endpoint.is_empty() {
            return Err(ManagerError::Invalid("a node needs an endpoint".into()));
        }
        self.update(|s| {
            if s.nodes
                .values()
                .any(|n| n.endpoint == endpoint && n.id != id)
            {
                return Err(ManagerError::Invalid(format!(
                    "{endpoint} is already a node"
                )));
            }
            s.nodes.insert(
                id,
                NodeRecord {
                    id,
                    endpoint,
                    capacity,
                    draining: false,
                },
            );
            Ok(())
        })?;
        self.seen.lock().insert(Member::Node(id), Instant::now());
        self.node_registered(id);
        Ok(())
    }

    /// Forgets a memory node that holds no region copy. One that does is refused:
    /// the regions would keep naming a node no one knows (and one being returned
    /// could never be), so its copies must move first.
    pub fn remove_node(&self, id: u32) -> Result<(), ManagerError> {
        self.update(|s| {
            let held: Vec<u16> = s
                .regions
                .values()
                .filter(|r| r.holders().any(|n| n == id))
                .map(|r| r.id)
                .collect();
            if !held.is_empty() {
                return Err(ManagerError::Invalid(format!(
                    "node {id} holds copies of regions {held:?}; move them off it first (nodes drain {id})"
                )));
            }
            s.nodes
                .remove(&id)
                .map(|_| ())
                .ok_or_else(|| ManagerError::NotFound(format!("node {id}")))
        })?;
        self.seen.lock().remove(&Member::Node(id));
        Ok(())
    }

    /// Registers an agent of `instance` serving clients at `listen`, gives it its
    /// share of the instance's shards, and returns its id.
    pub fn register_agent(&self, listen: String, instance: &str) -> Result<AgentId, ManagerError> {
        self.register_agent_with_tls(listen, None, instance, 0)
    }

    /// Registers an agent that also serves TLS clients at `tls_listen` (other agents
    /// forward to it there) and names itself `client` to the memory nodes (0: none;
    /// a failover revokes it, see `revoke.rs`).
    pub fn register_agent_with_tls(
        &self,
        listen: String,
        tls_listen: Option<String>,
        instance: &str,
        client: u64,
    ) -> Result<AgentId, ManagerError> {
        if listen.is_empty() {
            return Err(ManagerError::Invalid(
                "an agent needs a listen address".into(),
            ));
        }
        let id = self.update(|s| {
            if !s.instances.contains_key(instance) {
                return Err(ManagerError::NotFound(format!("instance {instance}")));
            }
            let id = s.next_agent;
            s.next_agent += 1;
            s.agents.insert(
                id,
                AgentRecord {
                    id,
                    listen,
                    instance: instance.to_string(),
                    tls_listen,
                    client,
                },
            );
            // With backup agents, a newcomer first backs shards up (its primaries send
            // it their hot sets) and takes primaries once warm (`end_warming`).
            let backups = s.instances.get(instance).map_or(0, |i| i.backups);
            let others = s.agents_of(instance).any(|a| a != id);
            if backups > 0 && others {
                self.warming
                    .lock()
                    .insert(id, Instant::now() + self.warm_for());
            }
            s.rebalance_except(instance, &self.warming_agents());
            Ok(id)
        })?;
        self.seen.lock().insert(Member::Agent(id), Instant::now());
        Ok(id)
    }

    /// Removes an agent; its shards go to the others (no key moves).
    pub fn remove_agent(&self, id: AgentId) -> Result<(), ManagerError> {
        self.remove_agents(&[id])
    }

    /// Removes agents in one change, so their instances' shards are re-balanced once.
    pub fn remove_agents(&self, ids: &[AgentId]) -> Result<(), ManagerError> {
        self.update(|s| {
            let mut instances = std::collections::BTreeSet::new();
            for id in ids {
                let a = s
                    .agents
                    .remove(id)
                    .ok_or_else(|| ManagerError::NotFound(format!("agent {id}")))?;
                self.departed.lock().insert(*id, a.instance.clone());
                instances.insert(a.instance);
            }
            for i in instances {
                s.rebalance_except(&i, &self.warming_agents());
            }
            Ok(())
        })?;
        // Their last heartbeats and applied maps stay: the agents their shards went to
        // wait until each applied the map that took them (its one-sided writes are
        // over) or its lease lapsed (it stopped heartbeating).
        Ok(())
    }

    /// Agent failover: removes the agents whose lease lapsed (no heartbeat for a whole
    /// lease), so that their shards go to the live agents of their instance at a new
    /// epoch. The agents gaining them write only once the lapsed one has been silent
    /// for one and a half leases ([`released`](Self::released)), when it has stopped
    /// writing by itself, and they first resolve the commits it left half-way. An
    /// instance with no live agent keeps its agents (there is no one to hand the shards
    /// to, and they may come back). Returns the agents removed.
    pub fn remove_lapsed_agents(&self) -> Result<Vec<AgentRecord>, ManagerError> {
        let agents: Vec<AgentRecord> = self.state.lock().agents.values().cloned().collect();
        let lapsed: Vec<AgentRecord> = agents
            .iter()
            .filter(|a| {
                !self.alive(Member::Agent(a.id))
                    && agents
                        .iter()
                        .any(|b| b.instance == a.instance && self.alive(Member::Agent(b.id)))
            })
            .cloned()
            .collect();
        if !lapsed.is_empty() {
            self.fail_over(&lapsed)?;
        }
        Ok(lapsed)
    }

    /// Agent failover without waiting out a lease: agents whose process the launcher
    /// saw exit (it reaped them, so they write nothing more) are removed from their
    /// instances at once, and the agents gaining their shards may write them once
    /// [`exit_grace`](Self::exit_grace) has passed (requests a process sent just before
    /// it died may still sit in a memory node's socket buffer).
    pub fn agents_exited(&self, ids: &[AgentId]) -> Result<(), ManagerError> {
        let records: Vec<AgentRecord> = {
            let s = self.state.lock();
            ids.iter()
                .filter_map(|id| s.agents.get(id).cloned())
                .collect()
        };
        {
            let now = Instant::now();
            let mut exited = self.exited.lock();
            for id in ids {
                exited.insert(*id, now);
            }
        }
        self.fail_over(&records)
    }

    /// Records that removed agents' processes were seen to exit (the launcher reaped
    /// them after `agents scale` stopped them), so the agents taking their shards need
    /// not wait for a report of the map that removed them, which an agent that exited
    /// early never sends, nor for their lease: [`exit_grace`](Self::exit_grace) after
    /// now suffices. Agents still members are left alone (failover is
    /// [`agents_exited`](Self::agents_exited)).
    pub fn removed_agents_exited(&self, ids: &[AgentId]) {
        let departed = self.departed.lock();
        let now = Instant::now();
        let mut exited = self.exited.lock();
        for id in ids.iter().filter(|id| departed.contains_key(id)) {
            exited.insert(*id, now);
        }
    }

    /// Removes failed agents, queueing their revocation first (so no handoff ever
    /// sees them removed but not yet to be revoked); a failed removal queues nothing.
    pub(super) fn fail_over(&self, agents: &[AgentRecord]) -> Result<(), ManagerError> {
        let ids: Vec<AgentId> = agents.iter().map(|a| a.id).collect();
        self.revoke_later(agents);
        self.remove_agents(&ids)
            .inspect_err(|_| self.forget_revocations(&ids))
    }

    /// How long after an agent's exit was seen its requests may still reach memory
    /// nodes: a quarter lease, 20–250 ms.
    pub(crate) fn exit_grace(&self) -> Duration {
        (self.lease / 4).clamp(Duration::from_millis(20), Duration::from_millis(250))
    }

    /// Whether agent `id` exited at least [`exit_grace`](Self::exit_grace) ago.
    pub(crate) fn exited_long_enough(&self, id: AgentId) -> bool {
        self.exited
            .lock()
            .get(&id)
            .is_some_and(|t| t.elapsed() >= self.exit_grace())
    }

    /// How long a new agent of an instance with backups only backs shards up: two
    /// leases, 1–10 s (its primaries' hot sets reach it meanwhile).
    pub(crate) fn warm_for(&self) -> Duration {
        (self.lease * 2).clamp(Duration::from_secs(1), Duration::from_secs(10))
    }

    /// Agents still warming up.
    pub(crate) fn warming_agents(&self) -> Vec<AgentId> {
        self.warming.lock().keys().copied().collect()
    }

    /// Gives primaries to the agents whose warm-up ended (run by the failover loop):
    /// the shards they back up come to them first. Returns them.
    pub fn end_warming(&self) -> Result<Vec<AgentId>, ManagerError> {
        let done: Vec<AgentId> = {
            let mut w = self.warming.lock();
            let now = Instant::now();
            let done: Vec<AgentId> = w
                .iter()
                .filter(|(_, until)| **until <= now)
                .map(|(a, _)| *a)
                .collect();
            for a in &done {
                w.remove(a);
            }
            done
        };
        if done.is_empty() {
            return Ok(done);
        }
        self.update(|s| {
            let instances: std::collections::BTreeSet<String> = done
                .iter()
                .filter_map(|a| s.agents.get(a).map(|r| r.instance.clone()))
                .collect();
            for i in instances {
                s.rebalance_except(&i, &self.warming_agents());
            }
            Ok(())
        })?;
        Ok(done)
    }

    /// Counts every registered agent and memory node as heard from now (a manager
    /// that did not run for a while heard no heartbeats: it gives each a lease to
    /// check in again before failover acts).
    pub fn renew_members(&self) {
        let members: Vec<Member> = {
            let s = self.state.lock();
            s.agents
                .keys()
                .map(|id| Member::Agent(*id))
                .chain(s.nodes.keys().map(|id| Member::Node(*id)))
                .collect()
        };
        let now = Instant::now();
        let mut seen = self.seen.lock();
        for m in members {
            seen.insert(m, now);
        }
    }

    /// The agent registered at `listen`.
    pub fn agent_at(&self, listen: &str) -> Option<AgentId> {
        self.state
            .lock()
            .agents
            .values()
            .find(|a| a.listen == listen)
            .map(|a| a.id)
    }

    /// The instance agent `id` serves.
    pub fn instance_of(&self, id: AgentId) -> Option<String> {
        self.state
            .lock()
            .agents
            .get(&id)
            .map(|a| a.instance.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use dmc_proto::ByteSize;
    use dmc_proto::cluster::DEFAULT_INSTANCE as D;

    use crate::manager::{Manager, Member, PoolSettings};
    use crate::state::StateFile;

    /// A manager of 8 shards with `lease`, its state in `dir`.
    fn manager(dir: &std::path::Path, lease: Duration) -> Manager {
        Manager::open(
            StateFile::new(dir.join("state.json")),
            8,
            lease,
            PoolSettings::default(),
        )
        .unwrap()
    }

    #[test]
    fn membership_and_shards_persist_and_leases_lapse() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let lease = Duration::from_millis(200);
        let m = Manager::open(StateFile::new(&path), 8, lease, PoolSettings::default()).unwrap();
        m.add_node(1, "127.0.0.1:7000".into(), ByteSize(1 << 30))
            .unwrap();
        assert!(
            m.add_node(2, "127.0.0.1:7000".into(), ByteSize(1)).is_err(),
            "duplicate endpoint"
        );
        let a = m.register_agent("127.0.0.1:6379".into(), D).unwrap();
        let b = m.register_agent("127.0.0.1:6380".into(), D).unwrap();
        let st = m.status();
        assert_eq!(st.agents.iter().map(|x| x.shards).sum::<usize>(), 8);
        assert!(st.agents.iter().all(|x| x.shards == 4 && x.alive));
        // Leases lapse without heartbeats, and come back with one.
        std::thread::sleep(Duration::from_millis(300));
        m.heartbeat(Member::Agent(a)).unwrap();
        let st = m.status();
        let alive: Vec<bool> = st.agents.iter().map(|x| x.alive).collect();
        assert_eq!(alive, vec![true, false]);
        assert!(!st.nodes[0].alive);
        assert!(m.heartbeat(Member::Agent(99)).is_err());
        // A restarted manager has the same members and map.
        let before = m.snapshot();
        drop(m);
        let m = Manager::open(StateFile::new(&path), 8, lease, PoolSettings::default()).unwrap();
        assert_eq!(m.snapshot(), before);
        m.remove_agent(b).unwrap();
        assert_eq!(m.status().agents[0].shards, 8);
        assert!(m.slots(D).unwrap().iter().all(|r| r.primary == Some(a)));
        assert!(m.remove_agent(b).is_err());
    }

    /// With backup agents, a newcomer backs shards up while it warms up and then takes
    /// its share of primaries: the shards it backed.
    #[test]
    fn a_new_agent_warms_up_as_a_backup_before_it_takes_primaries() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path(), Duration::from_millis(200));
        m.resize_instance(
            D,
            crate::api::ResizeInstance {
                backups: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
        let a = m.register_agent("127.0.0.1:6379".into(), D).unwrap();
        let b = m.register_agent("127.0.0.1:6380".into(), D).unwrap();
        let shards = |m: &Manager| m.snapshot().instances[D].shards.clone();
        let warming = shards(&m);
        assert!(warming.shards.iter().all(|s| s.primary == Some(a)));
        assert!(warming.shards.iter().all(|s| s.backups == [b]));
        assert!(m.end_warming().unwrap().is_empty(), "not warm yet");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while m.end_warming().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "warm-up ends");
            std::thread::sleep(Duration::from_millis(20));
        }
        let warm = shards(&m);
        assert_eq!(warm.counts()[&b], 4);
        assert!(warm.shards.iter().all(|s| s.backups.len() == 1));
    }

    /// An agent whose process exited is removed at once, and the agent gaining its
    /// shards may write them after the exit grace, not one and a half leases later.
    #[test]
    fn an_exited_agent_releases_its_shards_after_the_grace_not_the_lease() {
        let dir = tempfile::tempdir().unwrap();
        let lease = Duration::from_secs(60);
        let m = manager(dir.path(), lease);
        let a = m.register_agent("127.0.0.1:6379".into(), D).unwrap();
        let b = m.register_agent("127.0.0.1:6380".into(), D).unwrap();
        let v = m.snapshot().map_version;
        m.applied(a, v).unwrap();
        m.applied(b, v).unwrap();
        m.agents_exited(&[b]).unwrap();
        let after = m.snapshot();
        assert!(!after.agents.contains_key(&b));
        assert_eq!(m.status().agents[0].shards, 8);
        m.applied(a, after.map_version).unwrap();
        // The dead agent never applies the new map, and its last heartbeat is fresh:
        // without the exit, `a` would wait 90 s.
        assert!(!m.released(a, after.map_version), "not before the grace");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !m.released(a, after.map_version) {
            assert!(
                std::time::Instant::now() < deadline,
                "released after the grace"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Agent failover (issue 15): an agent silent for a lease is removed and its shards
    /// go to the live agents; an instance whose agents are all silent keeps them.
    /// A removed agent's report of the map that removed it is accepted (it was refused
    /// as an unknown member, which left the agent retrying until it exited) and
    /// releases its shards.
    #[test]
    fn a_removed_agent_reporting_its_removal_releases_its_shards() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path(), Duration::from_secs(60));
        let a = m.register_agent("127.0.0.1:6379".into(), D).unwrap();
        let b = m.register_agent("127.0.0.1:6380".into(), D).unwrap();
        m.remove_agents(&[b]).unwrap();
        let after = m.snapshot().map_version;
        m.applied(a, after).unwrap();
        assert!(!m.released(a, after));
        m.applied(b, after)
            .expect("a draining agent's report is accepted");
        assert!(m.released(a, after));
        assert!(m.heartbeat(Member::Agent(b)).is_err(), "no lease to renew");
    }

    /// An agent removed by `agents scale` that exited before reporting the map that
    /// removed it (a scaled-in agent the manager stopped at once) releases its shards
    /// once its exit is seen and the grace has passed, not one and a half leases later.
    #[test]
    fn a_removed_agent_seen_exiting_releases_its_shards_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path(), Duration::from_secs(60));
        let a = m.register_agent("127.0.0.1:6379".into(), D).unwrap();
        let b = m.register_agent("127.0.0.1:6380".into(), D).unwrap();
        let v = m.snapshot().map_version;
        m.applied(a, v).unwrap();
        m.applied(b, v).unwrap();
        m.remove_agents(&[b]).unwrap();
        let after = m.snapshot().map_version;
        m.applied(a, after).unwrap();
        assert!(
            !m.released(a, after),
            "b may still write until it reports or exits"
        );
        // Only departed agents are noted: a member's exit is failover's business.
        m.removed_agents_exited(&[a]);
        assert!(!m.exited.lock().contains_key(&a));
        m.removed_agents_exited(&[b]);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !m.released(a, after) {
            assert!(
                std::time::Instant::now() < deadline,
                "released within the grace, not after 90 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn lapsed_agents_are_removed_while_their_instance_has_a_live_one() {
        let dir = tempfile::tempdir().unwrap();
        let lease = Duration::from_millis(200);
        let m = manager(dir.path(), lease);
        let a = m.register_agent("127.0.0.1:6379".into(), D).unwrap();
        let b = m.register_agent("127.0.0.1:6380".into(), D).unwrap();
        assert!(m.remove_lapsed_agents().unwrap().is_empty(), "both alive");
        std::thread::sleep(Duration::from_millis(250));
        assert!(
            m.remove_lapsed_agents().unwrap().is_empty(),
            "all silent: nobody to hand the shards to"
        );
        m.heartbeat(Member::Agent(a)).unwrap();
        let version = m.map_version();
        let gone: Vec<_> = m.remove_lapsed_agents().unwrap();
        assert_eq!(gone.iter().map(|a| a.id).collect::<Vec<_>>(), vec![b]);
        assert!(m.map_version() > version, "a new map moves b's shards");
        assert!(m.slots(D).unwrap().iter().all(|r| r.primary == Some(a)));
        // b is gone for good: its heartbeats are refused, so it stops by itself.
        assert!(m.heartbeat(Member::Agent(b)).is_err());
        // a may write b's old shards only once b has been silent 1.5 leases.
        let v = m.map_version();
        m.applied(a, v).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        m.heartbeat(Member::Agent(a)).unwrap();
        assert!(m.released(a, v), "b has been silent 1.75 leases");
    }

    /// A gained shard is written only once every other agent of the instance, removed
    /// ones included, applied the map that moved it (issue 14's handoff).
    #[test]
    fn gained_shards_are_released_once_every_other_agent_applied_the_map() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let lease = Duration::from_secs(60);
        let m = Manager::open(StateFile::new(&path), 8, lease, PoolSettings::default()).unwrap();
        let a = m.register_agent("127.0.0.1:6379".into(), D).unwrap();
        let b = m.register_agent("127.0.0.1:6380".into(), D).unwrap();
        let v = m.map_version();
        assert!(
            !m.released(b, v),
            "a has not applied the map that moved shards to b"
        );
        m.applied(a, v).unwrap();
        assert!(m.released(b, v));
        // b is removed: it may still write what it held until it applies the new map,
        // though it renews no lease any more.
        m.remove_agent(b).unwrap();
        let v2 = m.map_version();
        assert!(
            !m.released(a, v2),
            "the removed agent has not applied the map"
        );
        m.applied(b, v2)
            .expect("a draining agent's report is accepted");
        assert!(
            m.heartbeat(Member::Agent(b)).is_err(),
            "a removed agent renews no lease"
        );
        assert!(m.released(a, v2));
        assert!(
            !m.released(b, v2),
            "an agent the manager does not know gains nothing"
        );
    }
}
