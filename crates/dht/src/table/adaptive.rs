//! The adaptive policy in the table (`maxmemory-policy adaptive`; the arithmetic is
//! `crate::adaptive`): choosing a victim by the experts' weights, leaving a history
//! entry in its slot, charging regret when a miss finds one, and keeping the instance's
//! history counter and regret sums in one pool block.
//!
//! The block (64 bytes, found through the table root at byte
//! [`ADAPTIVE_BLOCK`](crate::layout::ADAPTIVE_BLOCK), made with the table, or by the
//! first agent that needs it in a table made before it existed) holds the history counter (one FAA per eviction) and each expert's summed
//! regret in fixed point. Every agent adds its local regrets there every
//! [`MERGE_EVERY`] and reads the sums back (and on every maintenance tick), so all
//! agents of the instance compute the same weights.

use std::sync::atomic::Ordering;

use dmc_umo::pool::POOL_SHARD;
use dmc_umo::{GlobalAddr, Tx, TxOutcome, TxWrite};
use parking_lot::Mutex;

use super::{Dht, DhtError, Loc};
use crate::adaptive::{self, Expert, MAX_EXPERTS};
use crate::layout::{self, SlotMeta, SlotWord, le64};

/// Bytes of the pool block: the counter, then one regret sum per expert index.
pub(super) const BLOCK_LEN: u64 = 8 * (1 + MAX_EXPERTS as u64);
/// History entries a client remembers having charged, so one entry costs its experts
/// once per client however often the key misses.
const CHARGED_MAX: usize = 4096;

/// One client's adaptive-policy state.
pub(super) struct Adaptive {
    experts: Mutex<Vec<Expert>>,
    block: tokio::sync::OnceCell<GlobalAddr>,
    /// The instance's regret sums as last read from the pool.
    global: Mutex<[f64; MAX_EXPERTS]>,
    /// Regrets charged here and not yet added to the pool's sums.
    local: Mutex<[f64; MAX_EXPERTS]>,
    pending: std::sync::atomic::AtomicU64,
    /// Regrets charged by this client (INFO).
    regrets: std::sync::atomic::AtomicU64,
    /// The history counter as last seen (an FAA's result or a read).
    counter: std::sync::atomic::AtomicU64,
    charged: Mutex<std::collections::HashSet<u64>>,
}

impl Adaptive {
    pub(super) fn new(experts: Vec<Expert>) -> Self {
        Adaptive {
            experts: Mutex::new(experts),
            block: tokio::sync::OnceCell::new(),
            global: Mutex::new([0.0; MAX_EXPERTS]),
            local: Mutex::new([0.0; MAX_EXPERTS]),
            pending: Default::default(),
            regrets: Default::default(),
            counter: Default::default(),
            charged: Mutex::new(Default::default()),
        }
    }
}

/// What INFO shows of the adaptive policy.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveStatus {
    /// Each expert with its current weight.
    pub weights: Vec<(&'static str, f64)>,
    /// Regrets this client charged (misses on keys the policy evicted).
    pub regrets: u64,
    /// The instance's history counter: evictions by the adaptive policy, every
    /// agent's.
    pub history: u64,
}

impl Dht {
    /// The experts `maxmemory-policy adaptive` runs.
    pub fn adaptive_experts(&self) -> Vec<Expert> {
        self.adaptive.experts.lock().clone()
    }

    /// Sets the experts (`adaptive-experts`); weights of experts kept carry on.
    pub fn set_adaptive_experts(&self, experts: Vec<Expert>) {
        *self.adaptive.experts.lock() = experts;
    }

    /// The experts' weights as this client computes them now: the instance's summed
    /// regrets (as last read) plus its own not yet merged.
    pub fn adaptive_weights(&self) -> Vec<(Expert, f64)> {
        let experts = self.adaptive_experts();
        let mut sums = *self.adaptive.global.lock();
        for (s, l) in sums.iter_mut().zip(self.adaptive.local.lock().iter()) {
            *s += l;
        }
        let w = adaptive::weights(&experts, &sums);
        experts.into_iter().zip(w).collect()
    }

    pub fn adaptive_status(&self) -> AdaptiveStatus {
        AdaptiveStatus {
            weights: self
                .adaptive_weights()
                .into_iter()
                .map(|(e, w)| (e.name(), w))
                .collect(),
            regrets: self.adaptive.regrets.load(Ordering::Relaxed),
            history: self.adaptive.counter.load(Ordering::Relaxed),
        }
    }

    /// The pool block of the instance's counter and regret sums, made if the table has
    /// none yet.
    async fn adaptive_block(&self) -> Result<GlobalAddr, DhtError> {
        self.adaptive
            .block
            .get_or_try_init(|| async {
                let at = self.root.offset_by(layout::ADAPTIVE_BLOCK);
                loop {
                    let mut word = [0u8; 8];
                    self.pool.read(at, &mut word).await?;
                    let found = u64::from_le_bytes(word);
                    if found != 0 {
                        return Ok(GlobalAddr::from_bits(found));
                    }
                    // A table made before the block existed: no eviction to make room
                    // (eviction itself needs the block).
                    let block = self.pool.alloc(BLOCK_LEN, true).await?;
                    self.pool
                        .write_all(&[(block.addr, &[0u8; BLOCK_LEN as usize])])
                        .await?;
                    let tx = Tx {
                        shard: POOL_SHARD,
                        epoch: 0,
                        writes: vec![TxWrite {
                            addr: at,
                            expect: Some(0),
                            new: block.addr.bits(),
                            in_word_lock: false,
                        }],
                    };
                    match self.pool.commit(std::slice::from_ref(&tx)).await.remove(0) {
                        TxOutcome::Committed => return Ok(block.addr),
                        TxOutcome::Failed(e) => return Err(e.into()),
                        // Another client made it first: use theirs.
                        _ => self.pool.free(block),
                    }
                }
            })
            .await
            .copied()
    }

    /// Takes the next history counter value (one FAA on the instance's counter).
    pub(super) async fn next_history(&self) -> Result<u64, DhtError> {
        let block = self.adaptive_block().await?;
        let id = self.pool.faa_mirrored(block, 1).await?;
        self.adaptive.counter.fetch_max(id + 1, Ordering::Relaxed);
        Ok(id)
    }

    /// The history entry (counter value, expert bits) an eviction chosen by the
    /// experts `bits` leaves, or `None` when the counter is unreachable: eviction then
    /// goes on without history rather than not at all.
    pub(super) async fn history_entry(&self, bits: u8) -> Option<(u64, u8)> {
        match self.next_history().await {
            Ok(id) => Some((id, bits)),
            Err(e) => {
                static WARNED: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                if !WARNED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "evicting without history: the adaptive policy's counter is unreachable");
                }
                None
            }
        }
    }

    /// Picks the victim among `candidates` (their slot words and metadata): every
    /// expert names its lowest priority, and an expert drawn by weight decides.
    /// Returns the victim's index and the bits of every expert that named it.
    pub(super) fn adaptive_pick(
        &self,
        candidates: &[(SlotWord, SlotMeta)],
        now: &crate::policy::Now,
    ) -> Option<(usize, u8)> {
        if candidates.is_empty() {
            return None;
        }
        let weighted = self.adaptive_weights();
        let picks: Vec<(Expert, usize)> = weighted
            .iter()
            .map(|(e, _)| {
                let best = candidates
                    .iter()
                    .enumerate()
                    .min_by(|(_, a), (_, b)| {
                        e.priority(a.0, a.1, now)
                            .total_cmp(&e.priority(b.0, b.1, now))
                    })
                    .map_or(0, |(i, _)| i);
                (*e, best)
            })
            .collect();
        let weights: Vec<f64> = weighted.iter().map(|(_, w)| *w).collect();
        let chosen = picks[adaptive::draw(&weights, crate::rng::next_f64())].1;
        let bits = picks
            .iter()
            .filter(|(_, i)| *i == chosen)
            .fold(0u8, |b, (e, _)| b | 1 << e.index());
        Some((chosen, bits))
    }

    /// A miss on `loc` read `word` and `meta` in one of its buckets: if they are a
    /// history entry of this key, charges its experts their regret.
    pub(super) fn note_history(&self, loc: &Loc, word: SlotWord, meta: SlotMeta) {
        // The hash's low 40 bits (with the fingerprint, 48 bits of the key): a hit's
        // late FAA on this metadata word (its counter and clock, bits 40 and up) may
        // have changed the rest.
        if (meta.0 ^ loc.hash) & layout::EXPIRE_MASK != 0 || word.fp() != loc.fp {
            return;
        }
        let Some((id, bits)) = adaptive::history_of(word.0) else {
            return;
        };
        {
            let mut charged = self.adaptive.charged.lock();
            if charged.len() >= CHARGED_MAX {
                charged.clear();
            }
            if !charged.insert(word.unlocked().0) {
                return;
            }
        }
        let now = self.adaptive.counter.load(Ordering::Relaxed);
        let regret = adaptive::regret(now.saturating_sub(id), self.history_len());
        if regret == 0.0 {
            return;
        }
        {
            let experts = self.adaptive_experts();
            let global = *self.adaptive.global.lock();
            let mut local = self.adaptive.local.lock();
            let mut sums = global;
            for (s, l) in sums.iter_mut().zip(local.iter()) {
                *s += l;
            }
            let charges = adaptive::charges(&experts, &sums, bits, regret);
            for (l, c) in local.iter_mut().zip(charges) {
                *l += c;
            }
        }
        self.adaptive.regrets.fetch_add(1, Ordering::Relaxed);
        self.adaptive.pending.fetch_add(1, Ordering::Relaxed);
    }

    /// A miss in a probe's slots: looks for the key's history entry.
    pub(super) fn note_history_in(
        &self,
        loc: &Loc,
        slots: impl Iterator<Item = (SlotWord, SlotMeta)>,
    ) {
        if self.policy() != crate::RedisPolicy::Adaptive {
            return;
        }
        for (w, m) in slots {
            self.note_history(loc, w, m);
        }
    }

    /// The history's length: about the keys the instance holds (this client's owned
    /// keys, scaled to every slot), so entries older than one cache's worth of
    /// evictions charge nothing.
    fn history_len(&self) -> u64 {
        let owned = u64::from(self.owner.owned_count().max(1));
        let keys = self.key_count().max(1) as u64;
        keys.saturating_mul(layout::HASH_SLOTS as u64) / owned
    }

    /// Adds this client's pending regrets to the instance's sums and reads the sums and
    /// the counter back, if [`MERGE_EVERY`](adaptive::MERGE_EVERY) regrets are
    /// pending or `force` (the maintenance tick).
    pub async fn sync_adaptive(&self, force: bool) -> Result<(), DhtError> {
        if self.policy() != crate::RedisPolicy::Adaptive {
            return Ok(());
        }
        let pending = self.adaptive.pending.load(Ordering::Relaxed);
        if !force && pending < adaptive::MERGE_EVERY {
            return Ok(());
        }
        let block = self.adaptive_block().await?;
        self.adaptive.pending.store(0, Ordering::Relaxed);
        let mut local = std::mem::replace(&mut *self.adaptive.local.lock(), [0.0; MAX_EXPERTS]);
        // Against the sums as they are now, not as of the last merge: another agent's
        // charges since may have taken an expert to the gap already, and what would
        // carry it past is dropped here (`adaptive::capped`).
        let mut bytes = [0u8; BLOCK_LEN as usize];
        if self.pool.read(block, &mut bytes).await.is_ok() {
            let global: [f64; MAX_EXPERTS] =
                std::array::from_fn(|i| le64(&bytes, 8 * (1 + i)) as f64 / adaptive::FIXED_POINT);
            local = adaptive::capped(&self.adaptive_experts(), &global, &local);
        }
        // One FAA per expert charged (at most seven every hundred regrets), each
        // checked: a sum that fails is kept for the next merge, never dropped.
        let mut failed = None;
        for (i, regret) in local.iter().enumerate().filter(|(_, r)| **r > 0.0) {
            let add = (regret * adaptive::FIXED_POINT).round() as u64;
            let addr = block.offset_by(8 * (1 + i as u64));
            if let Err(e) = self.pool.faa_mirrored(addr, add).await {
                self.adaptive.local.lock()[i] += regret;
                failed = Some(e);
            }
        }
        if let Some(e) = failed {
            return Err(e.into());
        }
        self.pool.read(block, &mut bytes).await?;
        self.adaptive
            .counter
            .fetch_max(le64(&bytes, 0), Ordering::Relaxed);
        let mut global = self.adaptive.global.lock();
        for (i, g) in global.iter_mut().enumerate() {
            *g = le64(&bytes, 8 * (1 + i)) as f64 / adaptive::FIXED_POINT;
        }
        Ok(())
    }
}
