//! Fencing failed-over agents on the memory nodes: revocation.
//!
//! An agent the failover removed (its lease lapsed, or its process exited) may still
//! have verbs on their way, or wake up from a pause in the middle of a write that
//! passed its lease check. Every agent names itself to the memory nodes with a random
//! client id (registered with the manager), so the manager sends `Revoke { client }`
//! to every live memory node; a node answers once no request of that client runs, and
//! runs none after (`dmc_verbs::revoke`). [`Manager::released`] lets the agents gaining
//! the shards write them only once the removed agent is revoked on every live node:
//! on a `tcp` pool that alone suffices (every verb goes through a node), on `shm` it
//! fences the agent's RPCs and its lease fences its one-sided stores (as before).
//!
//! Revocations are kept an hour (at most [`KEPT`]) and sent again to a node that
//! registers anew (a restarted node forgot them). Not persisted: a restarted manager
//! knows no departed agents either, and relies on leases for those.

use std::time::{Duration, Instant};

use dmc_proto::shards::AgentId;
use std::collections::{HashMap, HashSet};

use super::{Manager, Member};
use crate::state::AgentRecord;

/// How long a revocation is kept for nodes that restart.
const KEEP_FOR: Duration = Duration::from_secs(3600);
/// The most revocations kept (oldest dropped first).
const KEPT: usize = 1024;

/// One failed-over agent's revocation.
#[derive(Debug)]
struct Revocation {
    client: u64,
    since: Instant,
    /// The nodes that confirmed it.
    done: HashSet<u32>,
}

/// The failed-over agents to revoke, and where that is done.
#[derive(Debug, Default)]
pub(crate) struct Revocations {
    by_agent: HashMap<AgentId, Revocation>,
}

/// How far an agent's revocation went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fenced {
    /// Never queued (it left by itself, or it named no client): the lease rule alone.
    NotRevoked,
    /// Queued, some live node has not confirmed yet.
    Pending,
    /// Every live memory node refuses it.
    Everywhere,
}

impl Manager {
    /// Queues the revocation of agents the failover removed.
    pub(super) fn revoke_later(&self, agents: &[AgentRecord]) {
        let mut r = self.revocations.lock();
        for a in agents.iter().filter(|a| a.client != 0) {
            r.by_agent.insert(
                a.id,
                Revocation {
                    client: a.client,
                    since: Instant::now(),
                    done: HashSet::new(),
                },
            );
        }
        if r.by_agent.len() > KEPT {
            let mut by_age: Vec<(Instant, AgentId)> =
                r.by_agent.iter().map(|(a, v)| (v.since, *a)).collect();
            by_age.sort();
            for (_, a) in by_age.iter().take(r.by_agent.len() - KEPT) {
                r.by_agent.remove(a);
            }
        }
    }

    /// Drops the queued revocations of `agents` (their removal failed).
    pub(super) fn forget_revocations(&self, agents: &[AgentId]) {
        let mut r = self.revocations.lock();
        for a in agents {
            r.by_agent.remove(a);
        }
    }

    /// A node that registered again may have restarted and forgotten its
    /// revocations: they are sent to it again.
    pub(super) fn node_registered(&self, node: u32) {
        for v in self.revocations.lock().by_agent.values_mut() {
            v.done.remove(&node);
        }
    }

    /// The live memory nodes (lease not lapsed).
    fn live_nodes(&self) -> Vec<u32> {
        let ids: Vec<u32> = self.state.lock().nodes.keys().copied().collect();
        ids.into_iter()
            .filter(|n| self.alive(Member::Node(*n)))
            .collect()
    }

    /// Sends every queued revocation to the live nodes that have not confirmed it
    /// (run by the failover loop after it removes agents, and on every check).
    /// Returns how many confirmations arrived.
    pub async fn revoke_departed(&self) -> usize {
        let live = self.live_nodes();
        let todo: Vec<(AgentId, u64, u32)> = {
            let mut r = self.revocations.lock();
            r.by_agent.retain(|_, v| v.since.elapsed() < KEEP_FOR);
            r.by_agent
                .iter()
                .flat_map(|(a, v)| {
                    live.iter()
                        .filter(|n| !v.done.contains(*n))
                        .map(move |n| (*a, v.client, *n))
                })
                .collect()
        };
        let mut confirmed = 0;
        let s = self.snapshot();
        for (agent, client, node) in todo {
            let sent = match self.node_rpc(&s, node).await {
                Ok(t) => t.call(dmc_verbs::wire::Request::Revoke { client }).await,
                Err(e) => {
                    tracing::warn!(node, agent, error = %e, "cannot reach a node to revoke an agent");
                    continue;
                }
            };
            match sent {
                Ok(_) => {
                    if let Some(v) = self.revocations.lock().by_agent.get_mut(&agent) {
                        v.done.insert(node);
                        confirmed += 1;
                    }
                }
                Err(e) => {
                    self.node_rpc.lock().await.remove(&node);
                    tracing::warn!(node, agent, error = %e, "revoking a failed-over agent failed; retrying")
                }
            }
        }
        if confirmed > 0 {
            tracing::info!(confirmed, "failed-over agents revoked on memory nodes");
        }
        confirmed
    }

    /// How far each of `agents`' revocation went. Takes the state, `seen` and
    /// revocation locks: call it before taking `departed`, `applied` or `seen`.
    pub(super) fn fenced(&self, agents: &[AgentId]) -> HashMap<AgentId, Fenced> {
        let live = self.live_nodes();
        let r = self.revocations.lock();
        agents
            .iter()
            .map(|a| {
                let f = match r.by_agent.get(a) {
                    None => Fenced::NotRevoked,
                    Some(v) if live.iter().all(|n| v.done.contains(n)) => Fenced::Everywhere,
                    Some(_) => Fenced::Pending,
                };
                (*a, f)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use dmc_proto::ByteSize;
    use dmc_proto::cluster::{DEFAULT_INSTANCE as D, PoolTransport};
    use dmc_verbs::backend::{self, BackendKind};
    use dmc_verbs::server::LoopbackNode;
    use dmc_verbs::{NodeConfig, RpcOptions, Storage, VerbsError};

    use crate::manager::{Manager, PoolSettings};
    use crate::state::StateFile;

    /// A failed-over agent (heartbeat still fresh: a paused process) holds its shards
    /// until it is revoked on the memory node; over `tcp` the revocation alone
    /// releases them, over `shm` the lease must lapse too. Its connection is refused
    /// from then on, and a node that registers again is sent the revocation again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_over_agent_is_revoked_before_its_shards_are_written() {
        for transport in [PoolTransport::Tcp, PoolTransport::Shm] {
            let node = LoopbackNode::spawn(NodeConfig {
                id: 1,
                capacity: 1 << 20,
                storage: Storage::Heap,
                secret: None,
            })
            .await
            .unwrap();
            let dir = tempfile::tempdir().unwrap();
            let m = Manager::open(
                StateFile::new(dir.path().join("state.json")),
                8,
                Duration::from_secs(60),
                PoolSettings {
                    transport,
                    ..PoolSettings::default()
                },
            )
            .unwrap();
            let endpoint = node.endpoint.to_string();
            m.add_node(1, endpoint.clone(), ByteSize(1 << 20)).unwrap();
            let a = m
                .register_agent_with_tls("127.0.0.1:6379".into(), None, D, 0xa1)
                .unwrap();
            let b = m
                .register_agent_with_tls("127.0.0.1:6380".into(), None, D, 0xb1)
                .unwrap();
            let conn = backend::connect(
                BackendKind::Tcp,
                node.endpoint.clone(),
                RpcOptions {
                    client: 0xb1,
                    ..RpcOptions::default()
                },
            )
            .await
            .unwrap();
            conn.create_region(1, 4096).await.unwrap();
            let record = m.snapshot().agents[&b].clone();
            m.fail_over(&[record]).unwrap();
            let v = m.map_version();
            m.applied(a, v).unwrap();
            assert!(
                !m.released(a, v),
                "{transport:?}: not before the revocation"
            );
            assert_eq!(m.revoke_departed().await, 1);
            assert_eq!(
                conn.write(1, 0, &[1; 8]).await.err(),
                Some(VerbsError::Revoked(0xb1))
            );
            assert_eq!(
                m.released(a, v),
                transport == PoolTransport::Tcp,
                "{transport:?}: revocation alone fences a tcp pool's agent"
            );
            assert_eq!(m.revoke_departed().await, 0, "done once");
            m.add_node(1, endpoint, ByteSize(1 << 20)).unwrap();
            assert_eq!(m.revoke_departed().await, 1, "sent again to a new node");
        }
    }
}
