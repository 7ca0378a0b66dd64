//! Single-key commits with one-sided verbs: no commit RPC, no memory-node CPU on
//! backends that reach the memory directly (`shm`, later `rdma`).
//!
//! A shard has one writer, its owner, so a single-key write needs no validation against
//! other writers, only an order readers and recovery can rely on. The slot is a pair of
//! words (the slot word, then its metadata), and no verb swaps 16 bytes, so the
//! primary's slot word is the pair's lock:
//!
//! 1. CAS the primary's slot word from `old` to `old | WORD_LOCK` (the object was
//!    written to every copy before). Readers mask the bit and keep reading `old`'s
//!    object; a two-phase commit's prepare (which sets the same bit) and other
//!    one-sided writers fail on it and wait.
//! 2. WRITE `new` and the metadata to every backup's slot, blind: holding the primary's
//!    lock is holding the slot.
//! 3. WRITE the primary's metadata, then CAS its slot word from `old | WORD_LOCK` to
//!    `new`, which unlocks and publishes the pair at once.
//!
//! Readers use the primary only, so they never see a word a backup lacks. A failed step
//! is undone while the nodes answer: a lost lock reply is checked and undone, a failed
//! backup write puts the old pair back on the backups and unlocks the primary, and a
//! failed last step is retried (it finishes the write). Only a node that stops
//! answering mid-write leaves the primary locked or backups ahead of it; such a write is
//! in doubt (the caller must not free the object) and waits for the recovery
//! `docs/architecture.md` describes: roll the primary forward to a backup that differs
//! from it (the backup points at a complete object), or unlock it.
//!
//! Called by the hash table's single-key write path, under an ownership lease.

use dmc_verbs::Verb;
use dmc_verbs::node::WORD_LOCK;
use futures::FutureExt;

use super::failover::FAILOVER_RETRIES;
use super::{Pool, TxOutcome};
use crate::addr::GlobalAddr;
use crate::error::UmoError;

/// How a slot commit's steps reach a node: [`Awaited`] waits for a remote node,
/// [`Inline`] only posts verbs that complete inline, so its futures are ready at once.
trait Post {
    fn post(
        &self,
        pool: &Pool,
        n: usize,
        verbs: &mut [Verb<'_>],
    ) -> impl std::future::Future<Output = Result<(), UmoError>>;
}

/// Inline when the node's backend completes verbs inline, else awaited.
struct Awaited;

impl Post for Awaited {
    fn post(
        &self,
        pool: &Pool,
        n: usize,
        verbs: &mut [Verb<'_>],
    ) -> impl std::future::Future<Output = Result<(), UmoError>> {
        pool.post_on(n, verbs)
    }
}

/// Inline only, for nodes that complete verbs inline: a node that cannot now (its
/// connection not open yet, its region not mapped yet) is [`UmoError::NotInline`],
/// never a wait.
struct Inline;

impl Post for Inline {
    fn post(
        &self,
        pool: &Pool,
        n: usize,
        verbs: &mut [Verb<'_>],
    ) -> impl std::future::Future<Output = Result<(), UmoError>> {
        let node = &pool.nodes[n];
        let done = match node.post_now(verbs) {
            Some(r) => r.map_err(UmoError::node(node.node())),
            None => Err(UmoError::NotInline(node.node())),
        };
        std::future::ready(done)
    }
}

/// The most copies a region has that a slot commit writes (primary and backups).
const MAX_COPIES: usize = 8;
/// Tries of the last step when the primary's node fails to answer it: a lost reply
/// must not leave the slot locked while the node is there to finish the write.
const PUBLISH_TRIES: usize = 3;

/// One slot's update: the slot word at `addr` from `old` to `new`, with its metadata
/// word (at `addr + 8`) from `old_meta` to `meta`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotWrite {
    pub addr: GlobalAddr,
    pub old: u64,
    pub old_meta: u64,
    pub new: u64,
    pub meta: u64,
}

/// A slot word and its metadata word as one 16-byte write.
pub(super) fn pair(word: u64, meta: u64) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[..8].copy_from_slice(&word.to_le_bytes());
    p[8..].copy_from_slice(&meta.to_le_bytes());
    p
}

impl Pool {
    /// Commits one slot update with one-sided verbs (see the module doc). Outcomes:
    /// `Committed`; `Conflict` (the primary's word is not `old`) and `Locked` (another
    /// writer holds it) changed nothing; `Failed` is in doubt, so the caller must not
    /// free the new object. A failure is undone where the nodes answer (the lock
    /// released, backups written back); only a node that stops answering mid-write
    /// leaves the slot locked, for recovery.
    ///
    /// A node that failed mid-write is waited out (its failover promotes a backup) and
    /// the commit retried on the copies left. A write that had reached every backup
    /// before the primary failed is found there, on the promoted backup: that retry
    /// meets `new` instead of `old` and reports the write committed.
    pub async fn commit_slot(&self, w: SlotWrite) -> TxOutcome {
        let mut tries = 0;
        loop {
            match self.commit_slot_once(w).await {
                TxOutcome::Conflict { actual, .. } if tries > 0 && actual == w.new => {
                    return TxOutcome::Committed;
                }
                TxOutcome::Failed(e)
                    if tries < FAILOVER_RETRIES
                        && self.failed_over(&e, &[w.addr.region()]).await =>
                {
                    tries += 1
                }
                outcome => return outcome,
            }
        }
    }

    async fn commit_slot_once(&self, w: SlotWrite) -> TxOutcome {
        if (w.old | w.new) & WORD_LOCK != 0 {
            return TxOutcome::Locked;
        }
        if self.lease_lapsed() {
            return TxOutcome::Failed(UmoError::LeaseLapsed);
        }
        let region = w.addr.region();
        let primary = match self.discover(region).await {
            Ok(n) => n,
            Err(e) => return TxOutcome::Failed(e),
        };
        let _permit = match self.gate.enter(region).await {
            Ok(p) => p,
            // Nothing was written: not in doubt, but the caller cannot tell; a
            // recovery of this slot finds its copies agreeing.
            Err(e) => return TxOutcome::Failed(e),
        };
        let (copies, n_copies) = match self.slot_copies(w) {
            Ok(c) => c,
            Err(e) => return TxOutcome::Failed(e),
        };
        self.run_slot_commit(w, primary, &copies[..n_copies], &Awaited)
            .await
    }

    /// [`commit_slot`](Self::commit_slot) right now, if every copy of the slot's region
    /// completes verbs inline (`local`, `shm`): the same steps, none awaited. `None`:
    /// nothing is left applied (the region is frozen, not learned or remote, or a copy
    /// could not take a verb now and what went before was undone); use `commit_slot`.
    /// A `Failed` outcome was not retried after a failover, as `commit_slot` does: it
    /// is in doubt.
    pub fn commit_slot_now(&self, w: SlotWrite) -> Option<TxOutcome> {
        if (w.old | w.new) & WORD_LOCK != 0 {
            return Some(TxOutcome::Locked);
        }
        if self.lease_lapsed() {
            return Some(TxOutcome::Failed(UmoError::LeaseLapsed));
        }
        let region = w.addr.region();
        let primary = self.primary(region).ok()?;
        let _permit = self.gate.try_enter([region]).ok()?;
        let (copies, n_copies) = self.slot_copies(w).ok()?;
        let copies = &copies[..n_copies];
        if copies.iter().any(|&n| !self.nodes[n].completes_inline()) {
            return None;
        }
        // Every verb of the steps completes inline, so the future is done on its first
        // poll. Were it ever not, it would be dropped half run: in doubt.
        match self
            .run_slot_commit(w, primary, copies, &Inline)
            .now_or_never()
        {
            Some(TxOutcome::Failed(UmoError::NotInline(_))) => None,
            Some(outcome) => Some(outcome),
            None => Some(TxOutcome::Failed(UmoError::Config(
                "an inline slot commit waited".into(),
            ))),
        }
    }

    /// The nodes of every copy of `w`'s region (primary included) and how many there
    /// are; the slot is marked dirty for a copy being filled.
    fn slot_copies(&self, w: SlotWrite) -> Result<([usize; MAX_COPIES], usize), UmoError> {
        let region = w.addr.region();
        let mut copies = [0usize; MAX_COPIES];
        let mut n_copies = 0;
        let regions = self.regions.read();
        let Some(Some(entry)) = regions.get(region as usize) else {
            return Err(UmoError::UnknownRegion(region));
        };
        if !entry.filling.is_empty() {
            self.dirty.mark(region, w.addr.offset(), 16);
        }
        for n in entry.copies().take(MAX_COPIES) {
            copies[n_copies] = n;
            n_copies += 1;
        }
        Ok((copies, n_copies))
    }

    /// The three steps of the module doc on `copies` (the primary among them), with the
    /// region's write permit held, posting through `post`.
    async fn run_slot_commit<P: Post>(
        &self,
        w: SlotWrite,
        primary: usize,
        backups: &[usize],
        post: &P,
    ) -> TxOutcome {
        let region = w.addr.region();
        let locked = w.old | WORD_LOCK;

        // 1. Lock the pair on the primary.
        let seen = match self.cas_with(post, primary, w.addr, w.old, locked).await {
            Ok(seen) => seen,
            Err(e) => {
                // The CAS may have applied and only its reply been lost: undo it if so.
                let _ = self.cas_with(post, primary, w.addr, locked, w.old).await;
                return TxOutcome::Failed(e);
            }
        };
        if seen != w.old {
            return if seen & WORD_LOCK != 0 {
                TxOutcome::Locked
            } else {
                TxOutcome::Conflict {
                    index: 0,
                    actual: seen,
                }
            };
        }

        // A writer process paused right here, its lease checked and the primary
        // locked (the revocation test): the fail point stops the whole process as
        // SIGSTOP would; it goes on when continued.
        #[cfg(feature = "failpoints")]
        if fail::eval("umo-slot-commit-stop", |_| ()).is_some() {
            tracing::error!("fail point umo-slot-commit-stop: the process stops mid-commit");
            // SAFETY: raise(3) with a signal number; nothing else is touched.
            unsafe { libc::raise(libc::SIGSTOP) };
        }

        // 2. Every backup, blind: the slot word and its metadata in one write.
        let new_pair = pair(w.new, w.meta);
        for (k, &n) in backups.iter().enumerate() {
            if n == primary {
                continue;
            }
            if let Err(e) = self.write_pair(post, n, w.addr, &new_pair).await {
                // Write the old pair back where the new one went (this backup too: it
                // may have applied), then unlock the primary, which still holds `old`.
                let old_pair = pair(w.old, w.old_meta);
                let mut undone = true;
                for &m in backups[..=k].iter().filter(|&&m| m != primary) {
                    undone &= match self.write_pair(post, m, w.addr, &old_pair).await {
                        Ok(()) => true,
                        // This backup took no verb, the new pair either.
                        Err(UmoError::NotInline(_)) => m == n,
                        Err(_) => false,
                    };
                }
                undone &= self
                    .cas_with(post, primary, w.addr, locked, w.old)
                    .await
                    .is_ok_and(|seen| seen == locked);
                return TxOutcome::Failed(match e {
                    // Declined, and nothing is left applied: the caller may go another way.
                    UmoError::NotInline(_) if undone => e,
                    UmoError::NotInline(node) => UmoError::Config(format!(
                        "an inline slot commit stopped at node {node} and was not fully undone"
                    )),
                    e => e,
                });
            }
        }

        // 3. The primary: metadata, then the word (which unlocks).
        let meta = w.meta.to_le_bytes();
        let mut last = None;
        for _ in 0..PUBLISH_TRIES {
            let mut verbs = [
                Verb::Write {
                    region,
                    offset: w.addr.offset() + 8,
                    data: &meta,
                },
                Verb::Cas {
                    region,
                    offset: w.addr.offset(),
                    expected: locked,
                    new: w.new,
                    old: 0,
                },
            ];
            match post.post(self, primary, &mut verbs).await {
                Ok(()) => {
                    return match verbs[1] {
                        Verb::Cas { old, .. } if old == locked => TxOutcome::Committed,
                        // An earlier try applied and only its reply was lost.
                        Verb::Cas { old, .. } if old == w.new => TxOutcome::Committed,
                        // Nothing but this writer changes a word it locked: the pool is
                        // corrupt or a client wrote this shard without owning it.
                        Verb::Cas { old, .. } => TxOutcome::Failed(UmoError::Layout(format!(
                            "slot word {:#x} changed from {locked:#x} while locked (now {old:#x})",
                            w.addr.bits(),
                        ))),
                        _ => unreachable!("the batch holds the CAS it was built with"),
                    };
                }
                Err(e) => last = Some(e),
            }
        }
        // The backups hold the new pair: whatever stopped the last step, it is in doubt.
        TxOutcome::Failed(match last {
            Some(UmoError::NotInline(node)) => UmoError::Config(format!(
                "an inline slot commit could not publish at node {node}"
            )),
            Some(e) => e,
            None => UmoError::UnknownRegion(region),
        })
    }

    /// Writes a slot's word and metadata to node `n`'s copy.
    async fn write_pair<P: Post>(
        &self,
        post: &P,
        n: usize,
        addr: GlobalAddr,
        data: &[u8; 16],
    ) -> Result<(), UmoError> {
        let mut verbs = [Verb::Write {
            region: addr.region(),
            offset: addr.offset(),
            data,
        }];
        post.post(self, n, &mut verbs).await
    }

    /// Compare-and-swap on node `n`'s copy; returns the word found.
    pub(super) async fn cas_on(
        &self,
        n: usize,
        addr: GlobalAddr,
        expected: u64,
        new: u64,
    ) -> Result<u64, UmoError> {
        self.cas_with(&Awaited, n, addr, expected, new).await
    }

    async fn cas_with<P: Post>(
        &self,
        post: &P,
        n: usize,
        addr: GlobalAddr,
        expected: u64,
        new: u64,
    ) -> Result<u64, UmoError> {
        let mut verbs = [Verb::Cas {
            region: addr.region(),
            offset: addr.offset(),
            expected,
            new,
            old: 0,
        }];
        post.post(self, n, &mut verbs).await?;
        match verbs {
            [Verb::Cas { old, .. }] => Ok(old),
            _ => unreachable!("the batch holds the CAS it was built with"),
        }
    }

    /// Posts a batch to node `n`, inline when its backend completes verbs inline.
    pub(super) async fn post_on(&self, n: usize, verbs: &mut [Verb<'_>]) -> Result<(), UmoError> {
        let node = &self.nodes[n];
        let result = match node.post_now(verbs) {
            Some(r) => r,
            None => node.post(verbs).await,
        };
        result.map_err(|e| UmoError::Node {
            node: node.node(),
            source: e,
        })
    }
}
