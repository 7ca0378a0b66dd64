//! Client revocation: the memory node's fence for one-sided verbs over `tcp`.
//!
//! A memory node cannot refuse a one-sided CAS or WRITE by shard epoch (the verb names
//! an address, not a shard), so an agent that stalled in the middle of a write (SIGSTOP,
//! a paused VM, a long GC) could land it after its shards moved. Every RPC connection
//! names its client in `Hello` (agents: a random id per process; 0 for the manager and
//! tools, which are never revoked). When the manager fails an agent over it sends
//! `Revoke { client }` to every live node; from the moment that call is answered, the
//! node executes nothing more the client sends, on any connection it has or opens:
//! requests get [`VerbsError::Revoked`] (the connection stays open, so pipelined
//! requests get the same answer instead of a "closed" that reads as a node failure).
//!
//! Each connection of a named client holds a [`ClientFence`]; a request runs under its
//! read lock and [`ClientFences::revoke`] takes the write lock of every fence of the
//! client after marking it, so a request that passed the check before the mark has
//! finished when `Revoke` is answered. Over `shm` the agent maps region files and its
//! one-sided verbs bypass the node: there only the agent's lease fences them.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use hashbrown::{HashMap, HashSet};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};

use crate::error::VerbsError;

/// Revoked client ids a node remembers (oldest forgotten first). A revoked agent that
/// stays paused past thousands of later revocations is long since killed or fenced by
/// its lease.
const REMEMBERED: usize = 4096;

/// One connection's view of whether its client was revoked.
#[derive(Debug, Default)]
pub struct ClientFence {
    client: u64,
    revoked: RwLock<bool>,
}

/// Held while a request of the connection runs: no revocation completes meanwhile.
pub struct Admitted<'a>(#[allow(dead_code)] RwLockReadGuard<'a, bool>);

impl ClientFence {
    /// Admits one request, or refuses it if the client was revoked.
    pub fn admit(&self) -> Result<Admitted<'_>, VerbsError> {
        let g = self.revoked.read();
        if *g {
            return Err(VerbsError::Revoked(self.client));
        }
        Ok(Admitted(g))
    }
}

#[derive(Default)]
struct Inner {
    revoked: HashSet<u64>,
    order: VecDeque<u64>,
    live: HashMap<u64, Vec<Weak<ClientFence>>>,
}

/// A node's revoked clients and the fences of its live connections.
#[derive(Default)]
pub struct ClientFences {
    inner: Mutex<Inner>,
}

impl ClientFences {
    /// The fence of a new connection of `client` (none for the anonymous client 0),
    /// or `Revoked` if the client already is.
    pub fn register(&self, client: u64) -> Result<Option<Arc<ClientFence>>, VerbsError> {
        if client == 0 {
            return Ok(None);
        }
        let mut inner = self.inner.lock();
        if inner.revoked.contains(&client) {
            return Err(VerbsError::Revoked(client));
        }
        let fence = Arc::new(ClientFence {
            client,
            revoked: RwLock::new(false),
        });
        let list = inner.live.entry(client).or_default();
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&fence));
        Ok(Some(fence))
    }

    /// Revokes `client`: returns once no request of it runs and none will.
    pub fn revoke(&self, client: u64) {
        if client == 0 {
            return;
        }
        let fences: Vec<Arc<ClientFence>> = {
            let mut inner = self.inner.lock();
            if inner.revoked.insert(client) {
                inner.order.push_back(client);
                if inner.order.len() > REMEMBERED
                    && let Some(old) = inner.order.pop_front()
                {
                    inner.revoked.remove(&old);
                }
            }
            inner
                .live
                .remove(&client)
                .unwrap_or_default()
                .iter()
                .filter_map(Weak::upgrade)
                .collect()
        };
        for f in fences {
            // Waits for the request the connection is running, if any.
            *f.revoked.write() = true;
        }
        tracing::warn!(client = format_args!("{client:#x}"), "client revoked");
    }

    /// How many clients are remembered as revoked.
    pub fn revoked(&self) -> usize {
        self.inner.lock().revoked.len()
    }

    /// Forgets the fences of connections that ended (for tests of the bookkeeping).
    #[cfg(test)]
    fn live_fences(&self, client: u64) -> usize {
        let mut inner = self.inner.lock();
        let list = inner.live.entry(client).or_default();
        list.retain(|w| w.strong_count() > 0);
        list.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revoked_client_is_refused_on_every_connection_old_and_new() {
        let fences = ClientFences::default();
        let a = fences.register(7).unwrap().unwrap();
        let b = fences.register(7).unwrap().unwrap();
        let other = fences.register(8).unwrap().unwrap();
        assert!(a.admit().is_ok());
        fences.revoke(7);
        assert_eq!(a.admit().err(), Some(VerbsError::Revoked(7)));
        assert_eq!(b.admit().err(), Some(VerbsError::Revoked(7)));
        assert_eq!(fences.register(7).err(), Some(VerbsError::Revoked(7)));
        assert!(other.admit().is_ok(), "other clients go on");
        assert!(fences.register(0).unwrap().is_none(), "anonymous");
        fences.revoke(0);
        assert_eq!(fences.revoked(), 1);
    }

    #[test]
    fn revoke_waits_for_the_request_running() {
        let fences = Arc::new(ClientFences::default());
        let fence = fences.register(5).unwrap().unwrap();
        let running = fence.admit().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let f2 = fences.clone();
        let t = std::thread::spawn(move || {
            f2.revoke(5);
            tx.send(()).unwrap();
        });
        // Still running: the revocation cannot have been answered.
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(50))
                .is_err()
        );
        drop(running);
        rx.recv().unwrap();
        t.join().unwrap();
        assert!(fence.admit().is_err());
    }

    #[test]
    fn ended_connections_and_old_revocations_are_forgotten() {
        let fences = ClientFences::default();
        for _ in 0..10 {
            let f = fences.register(3).unwrap();
            drop(f);
        }
        let kept = fences.register(3).unwrap();
        assert_eq!(fences.live_fences(3), 1);
        drop(kept);
        for c in 1..=(REMEMBERED as u64 + 1) {
            fences.revoke(c);
        }
        assert_eq!(fences.revoked(), REMEMBERED);
        assert!(fences.register(1).is_ok(), "the oldest was forgotten");
        assert!(fences.register(2).is_err());
    }
}
