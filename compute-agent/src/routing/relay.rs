//! The engine's relay on its way out: messages this agent published outside a client's
//! own PUBLISH (keyspace notifications, PUBLISH inside EXEC or a script; see
//! `dmc_engine::relay`) go to every other agent of the instance as PUBLISH (or
//! SPUBLISH) over the peer connections, where they reach that agent's subscribers;
//! keys that changed here go as `DMC.INVALIDATE` to the agents that announced
//! tracking clients (`tracking.rs`).
//!
//! One task sends them, in batches of up to [`BATCH`] pipelined commands, to all
//! peers at once: each peer gets them in the order they were published here. A peer
//! that does not answer within the peer timeout misses that batch (its subscribers are
//! on a failing agent), and the others are not held up beyond it. Only a cluster
//! member relays: a standalone agent has no one to tell.

use std::sync::Arc;

use bytes::Bytes;
use dmc_engine::relay::Relayed;
use dmc_engine::tracking::Modifier;

use super::Router;

/// A relayed message as the command a peer runs, and whether it is an invalidation
/// (`me`: this agent's address, naming its own NOLOOP writers).
fn command(m: Relayed, me: &Option<String>) -> (bool, Vec<Bytes>) {
    match m {
        Relayed::Publish {
            shard,
            channel,
            payload,
        } => {
            let name: &'static [u8] = if shard { b"SPUBLISH" } else { b"PUBLISH" };
            (false, vec![Bytes::from_static(name), channel, payload])
        }
        Relayed::Invalidate(key, by) => {
            let mut c = vec![Bytes::from_static(b"DMC.INVALIDATE")];
            let origin = match by {
                Some(Modifier::Here(id)) => me.clone().map(|me| (Bytes::from(me), id)),
                Some(Modifier::Peer(addr, id)) => Some((addr, id)),
                None => None,
            };
            if let Some(key) = key {
                c.push(key);
                if let Some((addr, id)) = origin {
                    c.push(addr);
                    c.push(Bytes::from(id.to_string()));
                }
            }
            (true, c)
        }
    }
}

/// Messages sent to the peers in one pipelined write at most.
const BATCH: usize = 256;

impl Router {
    /// Starts the relay's sender (cluster members only; a no-op otherwise).
    pub fn spawn_relay(self: &Arc<Self>) {
        if self.manager.is_none() {
            return;
        }
        self.spawn_tracking_announcer();
        let engine = self.engine.clone();
        engine.relay.attach();
        let router = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let batch = engine.relay.take(BATCH).await;
                let Some(router) = router.upgrade() else {
                    return;
                };
                let trackers = match batch.iter().any(|m| matches!(m, Relayed::Invalidate(..))) {
                    true => engine.tracking.peers(),
                    false => Vec::new(),
                };
                let me = router.my_address();
                let commands: Vec<(bool, Vec<Bytes>)> =
                    batch.into_iter().map(|m| command(m, &me)).collect();
                let sends = router.other_agents().into_iter().map(|addr| {
                    let router = &router;
                    // Invalidations only to the agents with tracking clients.
                    let tracks = trackers.contains(&addr);
                    let commands: Vec<&[Bytes]> = commands
                        .iter()
                        .filter(|(invalidation, _)| tracks || !invalidation)
                        .map(|(_, c)| &c[..])
                        .collect();
                    async move {
                        if commands.is_empty() {
                            return;
                        }
                        if let Err(e) = router
                            .forward_many(&addr, super::peers::Sender::AGENT, &commands)
                            .await
                        {
                            tracing::warn!(%addr, error = %e, "a peer missed relayed messages");
                        }
                    }
                });
                futures::future::join_all(sends).await;
            }
        });
    }
}
