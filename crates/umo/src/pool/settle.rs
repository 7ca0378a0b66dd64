//! Settling a shard's transactions whose coordinator is gone (see the memory node's
//! `settle.rs`): a coordinator killed between committing a transaction on one memory
//! node and on another leaves it committed on some and prepared (its words locked) on
//! the rest. The shard's new owner — and a coordinator whose connection to a node
//! broke mid-commit — calls [`Pool::settle`]: every node freezes and lists the
//! shard's transactions of a fenced epoch or an ended session, every node says which
//! of those it committed, and each is then committed everywhere if any node committed
//! it (every participant had voted yes), undone everywhere otherwise.

use dmc_verbs::wire::{Request, Response};
use futures::future::join_all;

use super::{POOL_SHARD, Pool};
use crate::error::UmoError;

/// What a settlement did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settled {
    /// Transactions committed everywhere (some node had committed them).
    pub committed: usize,
    /// Transactions undone everywhere (no node had committed them).
    pub aborted: usize,
}

impl Pool {
    /// Settles `shard`'s transactions whose coordinator is gone, on every memory node.
    /// An error (a node not answering) decides nothing: what was frozen stays locked
    /// until a later settlement, since a node that cannot be asked may hold the commit
    /// that decides.
    /// The pool's own transactions (segment claims, roots) are settled with every
    /// shard's: any client may settle them.
    pub async fn settle(&self, shard: u32) -> Result<Settled, UmoError> {
        let domain = self.fencing_domain(shard);
        let mut gone = self.ask_all(Request::Settle { shard: domain }).await?;
        gone.extend(self.ask_all(Request::Settle { shard: POOL_SHARD }).await?);
        gone.sort_unstable();
        gone.dedup();
        if gone.is_empty() {
            return Ok(Settled::default());
        }
        let mut commit = self.ask_all(Request::Committed(gone.clone())).await?;
        commit.sort_unstable();
        commit.dedup();
        let abort: Vec<(u64, u64)> = gone
            .iter()
            .filter(|id| commit.binary_search(id).is_err())
            .copied()
            .collect();
        let settled = Settled {
            committed: commit.len(),
            aborted: abort.len(),
        };
        let request = Request::Resolve { commit, abort };
        let calls = join_all(self.nodes.iter().map(|n| n.call(request.clone()))).await;
        for (n, r) in self.nodes.iter().zip(calls) {
            match r {
                Ok(Response::Ok) => {}
                Ok(other) => {
                    return Err(UmoError::node(n.node())(dmc_verbs::transport::unexpected(
                        &other,
                    )));
                }
                Err(e) => return Err(UmoError::node(n.node())(e)),
            }
        }
        tracing::info!(
            shard = domain,
            committed = settled.committed,
            aborted = settled.aborted,
            "settled transactions whose coordinator was gone"
        );
        Ok(settled)
    }

    /// Has [`settle_unsettled`](Self::settle_unsettled) settle `shard` (a settlement
    /// that failed).
    pub fn retry_settle(&self, shard: u32) {
        self.unsettled_commit(shard);
    }

    /// Remembers that a transaction of `shard` failed mid-commit, for
    /// [`settle_unsettled`](Self::settle_unsettled).
    pub(super) fn unsettled_commit(&self, shard: u32) {
        let mut unsettled = self.unsettled.lock();
        if !unsettled.contains(&shard) {
            unsettled.push(shard);
        }
    }

    /// Settles the shards of this client's commits that failed mid-way (a connection
    /// broken by a node: that node keeps the transaction prepared for the ended
    /// session), those for which `owned` holds — a shard given away is its next
    /// owner's to settle — and the pool's own. Failed settlements are kept for the next
    /// call; returns what was settled.
    pub async fn settle_unsettled(&self, owned: impl Fn(u32) -> bool) -> Settled {
        let shards = std::mem::take(&mut *self.unsettled.lock());
        let mut total = Settled::default();
        for shard in shards {
            if shard != POOL_SHARD && !owned(shard) {
                continue;
            }
            match self.settle(shard).await {
                Ok(s) => {
                    total.committed += s.committed;
                    total.aborted += s.aborted;
                }
                Err(e) => {
                    tracing::warn!(shard, error = %e, "settling a failed commit's transactions failed; retrying");
                    self.unsettled_commit(shard);
                }
            }
        }
        total
    }

    /// Sends `request` to every node and gathers the transactions they answer.
    async fn ask_all(&self, request: Request) -> Result<Vec<(u64, u64)>, UmoError> {
        let calls = join_all(self.nodes.iter().map(|n| n.call(request.clone()))).await;
        let mut out = Vec::new();
        for (n, r) in self.nodes.iter().zip(calls) {
            match r {
                Ok(Response::Txs(ids)) => out.extend(ids),
                Ok(other) => {
                    return Err(UmoError::node(n.node())(dmc_verbs::transport::unexpected(
                        &other,
                    )));
                }
                Err(e) => return Err(UmoError::node(n.node())(e)),
            }
        }
        Ok(out)
    }
}
