//! Committing transactions: straight to in-process memory nodes, or through the group
//! committer (`commit_loop`), which sends together what queued while a batch was in
//! flight; and `backoff`, the pacing of optimistic retries.
//!
//! Every write path commits here. The committer batches transactions but never drops
//! or reorders one: each caller gets its own transaction's outcome.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dmc_umo::{Pool, Tx, TxOutcome, UmoError};
use tokio::sync::{mpsc, oneshot};

use super::Dht;

/// Transactions one commit RPC batch carries at most.
const MAX_COMMIT_BATCH: usize = 256;
/// Commit batches in flight at once: a slow batch (a node that answers late, a
/// transaction waiting on locks) holds up only its own transactions.
const BATCHES_IN_FLIGHT: usize = 4;

pub(super) type CommitJob = (Tx, oneshot::Sender<TxOutcome>);

impl Dht {
    pub(super) async fn commit(&self, tx: Tx) -> TxOutcome {
        if self.inline_calls {
            // In-process nodes: commit here; a batch would only add a task hop.
            return self.pool.commit(std::slice::from_ref(&tx)).await.remove(0);
        }
        let (done, wait) = oneshot::channel();
        if self.commits.send((tx, done)).is_err() {
            return TxOutcome::Failed(UmoError::Config("the commit task stopped".into()));
        }
        wait.await.unwrap_or_else(|_| {
            TxOutcome::Failed(UmoError::Config("the commit task stopped".into()))
        })
    }

    /// Counts an optimistic retry and lets the competing writer finish first. A
    /// conflict (the word changed) is retried at once; a word still `locked` by a
    /// commit in flight is retried at once a few dozen times, then after sleeps
    /// growing to 1 ms, so a long-held lock (the previous owner's commit across a
    /// rescale) is waited for, about 200 ms at most, rather than reported as
    /// contention.
    pub(super) async fn backoff(&self, attempt: usize, locked: bool) {
        self.counters.retries.fetch_add(1, Ordering::Relaxed);
        const SPIN: usize = 32;
        if !locked || attempt < SPIN {
            tokio::task::yield_now().await;
        } else {
            let micros = (50u64 << ((attempt - SPIN) / 8).min(5)).min(1000);
            tokio::time::sleep(std::time::Duration::from_micros(micros)).await;
        }
    }
}

/// Group commit: transactions queued while batches are in flight go out together, so
/// pipelined clients cost one commit RPC per node per batch. Up to
/// [`BATCHES_IN_FLIGHT`] batches run at once; the next one gathers what queued while
/// it waited for a free place.
pub(super) async fn commit_loop(
    pool: Arc<Pool>,
    mut rx: mpsc::UnboundedReceiver<CommitJob>,
    in_flight: Arc<std::sync::atomic::AtomicU64>,
) {
    let places = Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        let Ok(place) = places.clone().acquire_owned().await else {
            return;
        };
        let mut batch: Vec<CommitJob> = Vec::with_capacity(MAX_COMMIT_BATCH);
        batch.push(first);
        while batch.len() < MAX_COMMIT_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let pool = pool.clone();
        let in_flight = in_flight.clone();
        in_flight.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let txs: Vec<Tx> = batch.iter().map(|(tx, _)| tx.clone()).collect();
            // A slow batch, for the test that others pass it: `return(SHARD)` holds a
            // batch with a transaction of that shard until the fail point is removed.
            #[cfg(feature = "failpoints")]
            while let Some(Some(shard)) = fail::eval("dht-commit-batch-hold", |arg| {
                arg.and_then(|s| s.parse::<u32>().ok())
            }) {
                if !txs.iter().any(|t| t.shard == shard) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            let outcomes = pool.commit(&txs).await;
            for ((_, done), outcome) in batch.into_iter().zip(outcomes) {
                let _ = done.send(outcome);
            }
            in_flight.fetch_sub(1, Ordering::Relaxed);
            drop(place);
        });
    }
}
