//! On-demand connections (DESIGN.md §3): a [`LazyTransport`] stands for a memory node
//! whose id and endpoint are known but which is not connected until a verb or an RPC
//! first needs it, and [`LazyTransport::close_if_idle`] closes the connection again
//! when nothing used it for a while. A memory node's failure then touches only the
//! agents that hold regions on it, and an agent of a large pool keeps connections only
//! to the nodes it works with.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwapOption;
use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::backend::{self, BackendKind};
use crate::error::VerbsError;
use crate::rpc::RpcOptions;
use crate::transport::{Transport, Verb};
use crate::wire::{Request, Response};
use crate::{Endpoint, NodeId, RegionId};

pub struct LazyTransport {
    node: NodeId,
    kind: BackendKind,
    endpoint: Endpoint,
    options: RpcOptions,
    /// The open connection. Verbs load it without a lock (a read lock's count is a
    /// write every core contends on, per verb); changes are made under `changing`.
    conn: ArcSwapOption<Connection>,
    /// Held to change `conn`, so an abort and a new connection's store do not cross.
    changing: Mutex<()>,
    /// One connection attempt at a time.
    connecting: tokio::sync::Mutex<()>,
    /// Set by every use, cleared by every idle check.
    used: AtomicBool,
    /// Connections opened over the transport's life.
    opened: AtomicU64,
    /// Bumped by every abort: a connection dialled across one is dropped unused.
    aborts: AtomicU64,
}

impl LazyTransport {
    /// Node `node` at `endpoint`, not connected yet.
    pub fn new(node: NodeId, kind: BackendKind, endpoint: Endpoint, options: RpcOptions) -> Self {
        LazyTransport {
            node,
            kind,
            endpoint,
            options,
            conn: ArcSwapOption::empty(),
            changing: Mutex::new(()),
            connecting: tokio::sync::Mutex::new(()),
            used: AtomicBool::new(false),
            opened: AtomicU64::new(0),
            aborts: AtomicU64::new(0),
        }
    }

    pub fn connected(&self) -> bool {
        self.conn.load().is_some()
    }

    /// The open connection, if any.
    fn open(&self) -> Option<Arc<dyn Transport>> {
        self.conn.load().as_ref().map(|c| c.0.clone())
    }

    /// Marks the connection used (for [`close_if_idle`](Self::close_if_idle)), writing
    /// the flag only when it changes: every verb would otherwise write a line all cores
    /// share.
    fn mark_used(&self) {
        if !self.used.load(Ordering::Relaxed) {
            self.used.store(true, Ordering::Relaxed);
        }
    }

    /// Connections opened so far (a reconnect after an idle close counts again).
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// The connection, opened now if there is none.
    async fn get(&self) -> Result<Arc<dyn Transport>, VerbsError> {
        // Read before anything: a use that began before an abort never connects anew.
        let aborts = self.aborts.load(Ordering::SeqCst);
        if let Some(c) = self.open() {
            return Ok(c);
        }
        let _one = self.connecting.lock().await;
        if let Some(c) = self.open() {
            return Ok(c);
        }
        let c = backend::connect(self.kind, self.endpoint.clone(), self.options.clone()).await?;
        if c.node() != self.node {
            return Err(VerbsError::Malformed(format!(
                "{} is memory node {}, expected node {}",
                self.endpoint,
                c.node(),
                self.node
            )));
        }
        {
            // Checked and stored under the lock `abort` takes too.
            let changing = self.changing.lock();
            if self.aborts.load(Ordering::SeqCst) == aborts {
                self.conn.store(Some(Arc::new(Connection(c.clone()))));
            } else {
                drop(changing);
                c.abort().await;
                return Err(VerbsError::Closed);
            }
        }
        tracing::debug!(node = self.node, endpoint = %self.endpoint, "connected on first use");
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(c)
    }

    /// Closes the connection if nothing used it since the last check; returns whether
    /// it did. Work in flight keeps its own reference and completes.
    pub fn close_if_idle(&self) -> bool {
        if self.used.swap(false, Ordering::Relaxed) {
            return false;
        }
        let closed = {
            let _changing = self.changing.lock();
            self.conn.swap(None).is_some()
        };
        if closed {
            tracing::debug!(node = self.node, "closed an idle connection");
        }
        closed
    }
}

/// An open connection, boxed once more so the lock-free slot holds a thin pointer.
struct Connection(Arc<dyn Transport>);

impl Transport for LazyTransport {
    fn node(&self) -> NodeId {
        self.node
    }

    fn backend(&self) -> &'static str {
        self.kind.name()
    }

    fn post<'a, 'b: 'a>(
        &'a self,
        verbs: &'a mut [Verb<'b>],
    ) -> BoxFuture<'a, Result<(), VerbsError>> {
        Box::pin(async move {
            let c = self.get().await?;
            self.mark_used();
            c.post(verbs).await
        })
    }

    fn post_now(&self, verbs: &mut [Verb<'_>]) -> Option<Result<(), VerbsError>> {
        let conn = self.conn.load();
        let c = conn.as_ref()?;
        self.mark_used();
        c.0.post_now(verbs)
    }

    fn completes_inline(&self) -> bool {
        self.kind == BackendKind::Shm
    }

    fn prefetch(&self, region: RegionId, offset: u64, len: usize) {
        if let Some(c) = self.conn.load().as_ref() {
            c.0.prefetch(region, offset, len);
        }
    }

    fn prefetch_many(&self, hints: &[(RegionId, u64, usize)]) {
        if let Some(c) = self.conn.load().as_ref() {
            c.0.prefetch_many(hints);
        }
    }

    fn abort(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let conn = {
                let _changing = self.changing.lock();
                self.aborts.fetch_add(1, Ordering::SeqCst);
                self.conn.swap(None)
            };
            if let Some(c) = conn.map(|c| c.0.clone()) {
                tracing::warn!(
                    node = self.node,
                    "dropped the connection to a memory node that holds no copy any more (failed over or drained)"
                );
                c.abort().await;
            }
        })
    }

    fn forget_region(&self, region: RegionId) {
        if let Some(c) = self.conn.load().as_ref() {
            c.0.forget_region(region);
        }
    }

    fn call(&self, req: Request) -> BoxFuture<'_, Result<Response, VerbsError>> {
        Box::pin(async move {
            let c = self.get().await?;
            self.mark_used();
            c.call(req).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::LoopbackNode;
    use crate::{NodeConfig, Storage};

    #[tokio::test]
    async fn connects_on_first_use_and_closes_when_idle() {
        let dir = tempfile::tempdir().unwrap();
        let node = LoopbackNode::spawn(NodeConfig {
            id: 4,
            capacity: 16 << 20,
            storage: Storage::Dir(dir.path().to_path_buf()),
            secret: None,
        })
        .await
        .unwrap();
        let lazy = LazyTransport::new(
            4,
            BackendKind::Shm,
            node.endpoint.clone(),
            RpcOptions::default(),
        );
        assert!(!lazy.connected(), "nothing is opened up front");
        let t: &dyn Transport = &lazy;
        t.create_region(1, 4 << 20).await.unwrap();
        t.write(1, 64, b"hello").await.unwrap();
        assert!(lazy.connected());
        assert!(!lazy.close_if_idle(), "used since the last check");
        assert!(lazy.close_if_idle(), "idle for a whole check");
        assert!(!lazy.connected());
        let mut buf = [0u8; 5];
        t.read(1, 64, &mut buf).await.unwrap();
        assert_eq!(&buf, b"hello", "reconnected on demand");
        assert_eq!(lazy.opened(), 2);

        let wrong = LazyTransport::new(
            9,
            BackendKind::Shm,
            node.endpoint.clone(),
            RpcOptions::default(),
        );
        let wrong: &dyn Transport = &wrong;
        assert!(
            wrong.list_regions().await.is_err(),
            "a node with another id is refused"
        );
    }
}
