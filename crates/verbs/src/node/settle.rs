//! Settling transactions whose coordinator is gone. A coordinator prepares a
//! transaction on every participant, then commits it on each; killed in between, it
//! leaves the transaction committed on some nodes and prepared (locked) on others. A
//! node alone cannot tell which, so it keeps a named coordinator's prepared
//! transactions when the coordinator's session ends or its epoch is fenced, and
//! remembers what each coordinator committed lately. The shard's owner then settles
//! them across all nodes (`dmc_umo::Pool::settle`):
//!
//! 1. `Settle { shard }` on every node freezes the shard's transactions of a fenced
//!    epoch or an ended session (their coordinator's commit is refused from then on)
//!    and lists them;
//! 2. `Committed(ids)` asks every node which of those it committed: a commit anywhere
//!    means every participant had voted yes;
//! 3. `Resolve` applies those everywhere they are still prepared and undoes the rest.
//!
//! Frozen before asked, a transaction cannot be committed anywhere between the
//! question and the answer, so the decision is the same on every node.

use super::{NodeCore, TxKey, TxState};

/// Transactions remembered as committed per coordinator: more than one coordinator can
/// have in flight (its group committer's batches).
const COMMITS_REMEMBERED: usize = 4096;
/// Coordinators whose commits are remembered at once.
const COORDINATORS_REMEMBERED: usize = 1024;

impl NodeCore {
    /// Remembers that `client` committed `txid` here.
    pub(super) fn log_commit(tx: &mut TxState, client: u64, txid: u64) {
        if client == 0 {
            return;
        }
        if !tx.committed.contains_key(&client) && tx.committed.len() >= COORDINATORS_REMEMBERED {
            // Forget some coordinator (rarely reached: agents are few, and long lived).
            if let Some(victim) = tx.committed.keys().next().copied() {
                tx.committed.remove(&victim);
            }
        }
        let log = tx.committed.entry(client).or_default();
        if log.len() >= COMMITS_REMEMBERED {
            log.pop_front();
        }
        log.push_back(txid);
    }

    /// Step 1: freezes `shard`'s prepared transactions whose coordinator is gone (a
    /// fenced epoch, or a session that ended) and lists them as (client, txid).
    pub fn settle(&self, shard: u32) -> Vec<(u64, u64)> {
        let mut tx = self.tx.lock();
        let current = tx.epochs.get(&shard).copied().unwrap_or(0);
        let gone: Vec<(TxKey, u64)> = tx
            .pending
            .iter()
            .filter(|(k, p)| {
                p.shard == shard && p.client != 0 && (p.epoch < current || tx.ended.contains(&k.0))
            })
            .map(|(k, p)| (*k, p.client))
            .collect();
        gone.into_iter()
            .map(|(key, client)| {
                tx.frozen.insert(key);
                (client, key.1)
            })
            .collect()
    }

    /// Step 2: which of `ids` this node committed (as remembered).
    pub fn committed_among(&self, ids: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let tx = self.tx.lock();
        ids.iter()
            .filter(|(client, txid)| {
                tx.committed
                    .get(client)
                    .is_some_and(|log| log.contains(txid))
            })
            .copied()
            .collect()
    }

    /// Step 3: applies the frozen transactions in `commit` and undoes those in
    /// `abort`; ids this node does not hold frozen are ignored.
    pub fn resolve(&self, commit: &[(u64, u64)], abort: &[(u64, u64)]) {
        let mut tx = self.tx.lock();
        let frozen: Vec<(TxKey, u64)> = tx
            .frozen
            .iter()
            .filter_map(|k| tx.pending.get(k).map(|p| (*k, p.client)))
            .collect();
        for (key, client) in frozen {
            let id = (client, key.1);
            if commit.contains(&id) {
                tx.frozen.remove(&key);
                if let Some(p) = Self::release(&mut tx, key) {
                    Self::apply(&p.writes);
                    Self::log_commit(&mut tx, client, key.1);
                    self.counters
                        .committed
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            } else if abort.contains(&id) {
                tx.frozen.remove(&key);
                if Self::drop_tx(&mut tx, key) {
                    self.counters
                        .aborted
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        // Frozen ids no longer prepared (a coordinator's abort) are forgotten, and so
        // are ended sessions with nothing left to settle.
        let TxState {
            frozen,
            pending,
            ended,
            ..
        } = &mut *tx;
        frozen.retain(|k| pending.contains_key(k));
        ended.retain(|s| pending.keys().any(|k| k.0 == *s));
    }
}
