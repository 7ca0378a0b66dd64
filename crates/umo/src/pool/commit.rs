//! OCC + two-phase commit of word updates: planned per memory node, prepared (locked and
//! validated under the shard epoch) on every copy, committed on backups before primaries,
//! aborted on every participant of a transaction some participant refused. Called by the
//! hash table, segment claims and `set_root`.
//! A primary never commits before the backups: a reader of a primary must not see a
//! word that a backup lacks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;

use dmc_verbs::wire::{Request, Response, TxPrepare, TxVote, WordWrite};
use futures::future::join_all;

use dmc_verbs::RegionId;

use super::failover::FAILOVER_RETRIES;
use super::{Pool, Tx, TxOutcome};
use crate::error::UmoError;

/// What one commit sends one node: its prepares and, for each, the transaction's index,
/// the transaction's write indexes on this node, and whether the node is a primary.
type NodePlan = (Vec<TxPrepare>, Vec<(usize, Vec<usize>, bool)>);

impl Pool {
    /// Commits transactions with OCC + 2PC: prepare (lock and validate under the shard
    /// epoch) on every copy, then commit on backups, then on primaries, so a reader of a
    /// primary never sees a word that a backup lacks. One RPC per node per phase.
    ///
    /// A memory node that fails during a commit is waited out (see `failover.rs`): a
    /// transaction it failed in the prepare phase was aborted everywhere, so it is
    /// prepared again on the copies left; one it failed in the commit phase was
    /// committed on every other participant, so once the node is out of the region
    /// map the transaction is committed on every copy there is.
    pub async fn commit(&self, txs: &[Tx]) -> Vec<TxOutcome> {
        let outcomes = self.commit_retrying(txs).await;
        for (tx, outcome) in txs.iter().zip(&outcomes) {
            if matches!(outcome, TxOutcome::Failed(_)) {
                self.unsettled_commit(tx.shard);
            }
        }
        outcomes
    }

    async fn commit_retrying(&self, txs: &[Tx]) -> Vec<TxOutcome> {
        let (mut outcomes, mut committing) = self.commit_once(txs).await;
        for _ in 0..FAILOVER_RETRIES {
            let mut again = Vec::new();
            for (t, outcome) in outcomes.iter_mut().enumerate() {
                let TxOutcome::Failed(e) = &*outcome else {
                    continue;
                };
                let regions: Vec<RegionId> =
                    txs[t].writes.iter().map(|w| w.addr.region()).collect();
                if !self.failed_over(e, &regions).await {
                    continue;
                }
                if committing.contains(&t) {
                    *outcome = TxOutcome::Committed;
                } else {
                    again.push(t);
                }
            }
            if again.is_empty() {
                break;
            }
            let retry: Vec<Tx> = again.iter().map(|&t| txs[t].clone()).collect();
            let (redone, redone_committing) = self.commit_once(&retry).await;
            committing.retain(|t| !again.contains(t));
            for (k, (&t, outcome)) in again.iter().zip(redone).enumerate() {
                outcomes[t] = outcome;
                if redone_committing.contains(&k) {
                    committing.insert(t);
                }
            }
        }
        outcomes
    }

    /// One attempt of [`commit`](Self::commit); also returns the transactions that
    /// failed in the commit phase (every participant had voted yes), which are
    /// committed on every participant that answered.
    async fn commit_once(&self, txs: &[Tx]) -> (Vec<TxOutcome>, HashSet<usize>) {
        if self.lease_lapsed() {
            let refused = txs
                .iter()
                .map(|_| TxOutcome::Failed(UmoError::LeaseLapsed))
                .collect();
            return (refused, HashSet::new());
        }
        let base = self
            .next_txid
            .fetch_add(txs.len() as u64, Ordering::Relaxed);
        let mut outcomes: Vec<Option<TxOutcome>> = vec![None; txs.len()];
        // A region this client has not seen fails only its own transaction (below).
        let unknown = self.unknown(
            txs.iter()
                .flat_map(|t| t.writes.iter().map(|w| w.addr.region())),
        );
        let _ = self.discover_all(unknown).await;
        let _permit = loop {
            let regions = txs
                .iter()
                .flat_map(|t| t.writes.iter().map(|w| w.addr.region()));
            match self.gate.try_enter(regions) {
                Ok(p) => break p,
                Err(frozen) => {
                    if let Err(e) = self.gate.thawed(frozen).await {
                        let failed = txs.iter().map(|_| TxOutcome::Failed(e.clone())).collect();
                        return (failed, HashSet::new());
                    }
                }
            }
        };
        // node -> prepares, and for each: (tx index, write indexes, node is a primary)
        let mut plan: BTreeMap<usize, NodePlan> = BTreeMap::new();
        {
            let regions = self.regions.read();
            'tx: for (t, tx) in txs.iter().enumerate() {
                let mut per_node: BTreeMap<usize, (Vec<WordWrite>, Vec<usize>, bool)> =
                    BTreeMap::new();
                for (w, write) in tx.writes.iter().enumerate() {
                    let Some(entry) = regions[write.addr.region() as usize].as_ref() else {
                        outcomes[t] = Some(TxOutcome::Failed(UmoError::UnknownRegion(
                            write.addr.region(),
                        )));
                        continue 'tx;
                    };
                    if !entry.filling.is_empty() {
                        self.dirty.mark(write.addr.region(), write.addr.offset(), 8);
                    }
                    let complete = 1 + entry.backups.len();
                    for (k, n) in entry.copies().enumerate() {
                        // A copy being filled holds no word to validate yet: written
                        // blind, under the node's lock.
                        let filling = k >= complete;
                        let slot = per_node.entry(n).or_default();
                        slot.0.push(WordWrite {
                            region: write.addr.region(),
                            offset: write.addr.offset(),
                            expect: if filling { None } else { write.expect },
                            new: write.new,
                            in_word_lock: write.in_word_lock && !filling,
                        });
                        slot.1.push(w);
                        slot.2 |= n == entry.primary;
                    }
                }
                for (n, (writes, idx, is_primary)) in per_node {
                    let p = plan.entry(n).or_default();
                    p.0.push(TxPrepare {
                        txid: base + t as u64,
                        shard: self.fencing_domain(tx.shard),
                        epoch: tx.epoch,
                        writes,
                    });
                    p.1.push((t, idx, is_primary));
                }
            }
        }

        // Every word on one node: prepare and commit in one round.
        if plan.len() == 1
            && let Some((n, (prepares, meta))) = plan.pop_first()
        {
            let node = &self.nodes[n];
            let result = node.call(Request::PrepareCommit(prepares)).await;
            let list = match result {
                Ok(Response::Votes(v)) if v.len() == meta.len() => Ok(v),
                Ok(other) => Err(dmc_verbs::transport::unexpected(&other)),
                Err(e) => Err(e),
            };
            for (k, (t, idx, _)) in meta.iter().enumerate() {
                let outcome = match &list {
                    Ok(v) => Self::vote_outcome(v[k].clone(), idx, node.node()),
                    // The reply is lost: the transaction may or may not have applied.
                    Err(e) => Some(TxOutcome::Failed(UmoError::Node {
                        node: node.node(),
                        source: e.clone(),
                    })),
                };
                outcomes[*t].get_or_insert(outcome.unwrap_or(TxOutcome::Committed));
            }
            let outcomes = outcomes
                .into_iter()
                .map(|o| o.unwrap_or(TxOutcome::Committed))
                .collect();
            // A lost reply is in doubt (the node may have applied it): not retried.
            return (outcomes, HashSet::new());
        }

        // Phase 1: prepare everywhere.
        let votes = join_all(plan.iter_mut().map(|(n, (prepares, _))| {
            let node = &self.nodes[*n];
            let prepares = std::mem::take(prepares);
            async move { node.call(Request::Prepare(prepares)).await }
        }))
        .await;
        for ((n, (_, meta)), result) in plan.iter().zip(votes) {
            let node_id = self.nodes[*n].node();
            let list = match result {
                Ok(Response::Votes(v)) if v.len() == meta.len() => Ok(v),
                Ok(other) => Err(dmc_verbs::transport::unexpected(&other)),
                Err(e) => Err(e),
            };
            for (k, (t, idx, _)) in meta.iter().enumerate() {
                let vote = match &list {
                    Ok(v) => v[k].clone(),
                    Err(e) => TxVote::Failed(e.clone()),
                };
                match vote {
                    TxVote::Yes => {}
                    TxVote::Conflict { index, actual } => {
                        let w = idx.get(index as usize).copied().unwrap_or(0);
                        outcomes[*t].get_or_insert(TxOutcome::Conflict { index: w, actual });
                    }
                    TxVote::Locked { .. } => {
                        outcomes[*t].get_or_insert(TxOutcome::Locked);
                    }
                    TxVote::StaleEpoch { current } => {
                        // A stale epoch outranks any other reason: the caller must stop.
                        outcomes[*t] = Some(TxOutcome::StaleEpoch { current });
                    }
                    TxVote::Failed(e) => {
                        outcomes[*t].get_or_insert(TxOutcome::Failed(UmoError::Node {
                            node: node_id,
                            source: e,
                        }));
                    }
                }
            }
        }

        // Abort what some participant refused; commit the rest, primaries last.
        let mut aborts: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        let mut first: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        let mut last: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for (n, (_, meta)) in &plan {
            for (t, _, is_primary) in meta {
                let txid = base + *t as u64;
                if outcomes[*t].is_some() {
                    // Every participant, not only those that voted yes: a prepare whose
                    // answer was lost may still hold locks there (abort is idempotent).
                    aborts.entry(*n).or_default().push(txid);
                } else if *is_primary {
                    last.entry(*n).or_default().push(txid);
                } else {
                    first.entry(*n).or_default().push(txid);
                }
            }
        }
        // A coordinator dying mid-commit, for the settlement tests: `return(stop)`
        // commits on one node of a transaction spanning several and fails the rest as
        // a lost connection would; `return(crash)` then aborts the process;
        // `return(none)` stops before any node committed. `MODE:N` acts only on a batch
        // with a transaction of at least N writes (not on the pool's own claims).
        #[cfg(feature = "failpoints")]
        if let Some(arg) = fail::eval("umo-commit-one-node", |arg| arg.unwrap_or_default()) {
            let (mode, min_writes) = match arg.split_once(':') {
                Some((m, n)) => (m.to_string(), n.parse::<usize>().unwrap_or(0)),
                None => (arg, 0),
            };
            let mut nodes: BTreeMap<usize, Vec<u64>> = first.clone();
            for (n, ids) in &last {
                nodes.entry(*n).or_default().extend(ids.iter().copied());
            }
            let big = txs.iter().any(|t| t.writes.len() >= min_writes);
            if nodes.len() >= 2
                && big
                && let Some((n, ids)) = nodes.pop_first()
            {
                if mode != "none" {
                    let _ = self.commit_phase(BTreeMap::from([(n, ids)])).await;
                }
                if mode == "crash" {
                    tracing::error!("fail point umo-commit-one-node: the process dies mid-commit");
                    std::process::abort();
                }
                let cut = UmoError::Config("cut off mid-commit by a fail point".into());
                let failed = txs.iter().map(|_| TxOutcome::Failed(cut.clone())).collect();
                return (failed, HashSet::new());
            }
        }
        let abort_calls = join_all(
            aborts
                .into_iter()
                .map(|(n, ids)| self.nodes[n].call(Request::Abort(ids))),
        );
        let failed_first = self.commit_phase(first).await;
        let failed_last = self.commit_phase(last).await;
        abort_calls.await;
        let mut committing = HashSet::new();
        for (t, o) in outcomes.iter_mut().enumerate() {
            let txid = base + t as u64;
            if o.is_none() {
                *o = Some(match failed_first.get(&txid).or(failed_last.get(&txid)) {
                    Some(e) => {
                        committing.insert(t);
                        TxOutcome::Failed(e.clone())
                    }
                    None => TxOutcome::Committed,
                });
            }
        }
        let outcomes = outcomes
            .into_iter()
            .map(|o| o.unwrap_or(TxOutcome::Committed))
            .collect();
        (outcomes, committing)
    }

    /// What a one-round vote means for its transaction (`None`: committed).
    fn vote_outcome(vote: TxVote, idx: &[usize], node: dmc_verbs::NodeId) -> Option<TxOutcome> {
        match vote {
            TxVote::Yes => None,
            TxVote::Conflict { index, actual } => Some(TxOutcome::Conflict {
                index: idx.get(index as usize).copied().unwrap_or(0),
                actual,
            }),
            TxVote::Locked { .. } => Some(TxOutcome::Locked),
            TxVote::StaleEpoch { current } => Some(TxOutcome::StaleEpoch { current }),
            TxVote::Failed(e) => Some(TxOutcome::Failed(UmoError::Node { node, source: e })),
        }
    }

    async fn commit_phase(&self, calls: BTreeMap<usize, Vec<u64>>) -> HashMap<u64, UmoError> {
        let results = join_all(
            calls
                .iter()
                .map(|(n, ids)| self.nodes[*n].call(Request::Commit(ids.clone()))),
        )
        .await;
        let mut failed = HashMap::new();
        for ((n, ids), r) in calls.iter().zip(results) {
            let node = self.nodes[*n].node();
            match r {
                Ok(Response::Votes(votes)) if votes.len() == ids.len() => {
                    for (id, v) in ids.iter().zip(votes) {
                        if let TxVote::Failed(e) = v {
                            failed.insert(*id, UmoError::Node { node, source: e });
                        }
                    }
                }
                other => {
                    let e = match other {
                        Err(e) => e,
                        Ok(resp) => dmc_verbs::transport::unexpected(&resp),
                    };
                    for id in ids {
                        failed.insert(
                            *id,
                            UmoError::Node {
                                node,
                                source: e.clone(),
                            },
                        );
                    }
                }
            }
        }
        failed
    }
}
