//! The relay: messages published on this agent by something other than a client's own
//! PUBLISH (keyspace notifications, PUBLISH or SPUBLISH inside EXEC or a script), and
//! keys that changed here for the agents whose clients track keys (CLIENT TRACKING),
//! on their way to the other agents of the instance. The agent's router publishes a
//! client's PUBLISH on every agent itself; these arise deep in the engine, where no
//! peer connection is at hand, so they queue here, in order, and one task of the
//! router sends them on (`compute-agent/src/routing/relay.rs`).
//!
//! The queue is bounded: past [`CAPACITY`] messages (peers far behind, or none draining
//! yet) the oldest go and are counted, never the agent's memory. A standalone agent
//! (no router task attached) queues nothing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Messages held for the peers at most.
pub const CAPACITY: usize = 65_536;

/// One message for the other agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relayed {
    /// PUBLISH (or SPUBLISH: `shard`) `channel payload`, for every agent.
    Publish {
        shard: bool,
        channel: Bytes,
        payload: Bytes,
    },
    /// This key changed (`None`: a flush), for the agents with tracking clients; by
    /// this NOLOOP client, if any.
    Invalidate(Option<Bytes>, Option<crate::tracking::Modifier>),
}

#[derive(Debug, Default)]
pub struct Relay {
    queue: Mutex<VecDeque<Relayed>>,
    ready: Notify,
    attached: AtomicBool,
    /// Messages dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Messages handed to the sender.
    pub relayed: AtomicU64,
}

impl Relay {
    /// The router's sender starts taking messages: from now on they queue.
    pub fn attach(&self) {
        self.attached.store(true, Ordering::Release);
    }

    /// Queues a message for the other agents (nothing without a sender attached).
    pub fn push(&self, shard: bool, channel: Bytes, payload: Bytes) {
        self.queue(Relayed::Publish {
            shard,
            channel,
            payload,
        });
    }

    /// Queues a changed key for the agents that track keys.
    pub fn push_invalidation(&self, key: Option<Bytes>, by: Option<crate::tracking::Modifier>) {
        self.queue(Relayed::Invalidate(key, by));
    }

    fn queue(&self, m: Relayed) {
        if !self.attached.load(Ordering::Acquire) {
            return;
        }
        let mut q = self.queue.lock();
        if q.len() >= CAPACITY {
            q.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        q.push_back(m);
        drop(q);
        self.ready.notify_one();
    }

    /// Waits for messages and takes up to `max` of them, oldest first.
    pub async fn take(&self, max: usize) -> Vec<Relayed> {
        loop {
            {
                let mut q = self.queue.lock();
                if !q.is_empty() {
                    let n = q.len().min(max);
                    self.relayed.fetch_add(n as u64, Ordering::Relaxed);
                    return q.drain(..n).collect();
                }
            }
            self.ready.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn in_order_bounded_and_only_when_attached() {
        let r = Relay::default();
        r.push(false, Bytes::from_static(b"c"), Bytes::from_static(b"lost"));
        r.attach();
        for i in 0..CAPACITY + 2 {
            r.push(false, Bytes::from_static(b"c"), Bytes::from(i.to_string()));
        }
        assert_eq!(r.dropped.load(Ordering::Relaxed), 2);
        let first = r.take(3).await;
        let payloads: Vec<&[u8]> = first
            .iter()
            .filter_map(|m| match m {
                Relayed::Publish { payload, .. } => Some(&payload[..]),
                Relayed::Invalidate(..) => None,
            })
            .collect();
        assert_eq!(payloads, [&b"2"[..], b"3", b"4"]);
        assert_eq!(r.take(usize::MAX).await.len(), CAPACITY - 3);
    }
}
