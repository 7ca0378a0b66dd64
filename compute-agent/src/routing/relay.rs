//! The engine's relay on its way out: messages this agent published outside a client's
//! own PUBLISH (keyspace notifications, PUBLISH inside EXEC or a script; see
//! `dmc_engine::relay`) go to every other agent of the instance as PUBLISH (or
//! SPUBLISH) over the peer connections, where they reach that agent's subscribers.
//!
//! One task sends them, in batches of up to [`BATCH`] pipelined commands, to all
//! peers at once: each peer gets them in the order they were published here. A peer
//! that does not answer within the peer timeout misses that batch (its subscribers are
//! on a failing agent), and the others are not held up beyond it. Only a cluster
//! member relays: a standalone agent has no one to tell.

use std::sync::Arc;

use bytes::Bytes;

use super::Router;

/// Messages sent to the peers in one pipelined write at most.
const BATCH: usize = 256;

impl Router {
    /// Starts the relay's sender (cluster members only; a no-op otherwise).
    pub fn spawn_relay(self: &Arc<Self>) {
        if self.manager.is_none() {
            return;
        }
        let engine = self.engine.clone();
        engine.relay.attach();
        let router = Arc::downgrade(self);
        tokio::spawn(async move {
            let publish = Bytes::from_static(b"PUBLISH");
            let spublish = Bytes::from_static(b"SPUBLISH");
            loop {
                let batch = engine.relay.take(BATCH).await;
                let Some(router) = router.upgrade() else {
                    return;
                };
                let commands: Vec<[Bytes; 3]> = batch
                    .into_iter()
                    .map(|(shard, channel, payload)| {
                        let name = if shard { &spublish } else { &publish };
                        [name.clone(), channel, payload]
                    })
                    .collect();
                let commands: Vec<&[Bytes]> = commands.iter().map(|c| &c[..]).collect();
                let sends = router.other_agents().into_iter().map(|addr| {
                    let router = &router;
                    let commands = &commands;
                    async move {
                        if let Err(e) = router.forward_many(&addr, (0, 2), commands).await {
                            tracing::warn!(%addr, error = %e, "a peer missed relayed messages");
                        }
                    }
                });
                futures::future::join_all(sends).await;
            }
        });
    }
}
