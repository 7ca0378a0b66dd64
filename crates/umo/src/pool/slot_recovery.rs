//! Recovery of a single-key commit that stopped half-way ([`super::slot_commit`]): a
//! primary slot word left locked by a writer that is gone, and backups that may be
//! ahead of it.
//!
//! The rule is **roll forward**. A writer locks the primary only after its object is
//! on every copy, and writes the new pair to the backups only while it holds that
//! lock, so a backup whose pair differs from the primary's holds the new pair, pointing
//! at a complete object: it is copied to the primary and to every lagging backup, and
//! the primary's CAS from the locked word to the new one unlocks it. When no backup
//! differs the write never reached step 2: the primary is unlocked to its old word.
//! Either way the copies agree afterwards.
//!
//! Called by the hash table on slot words it finds locked with no writer of its own in
//! flight: when it gains a shard (the previous owner released it or died) and for its
//! own commits that failed with a node unreachable. Only the owner of the slot may call
//! it, or it would race the owner's own writes.

use super::Pool;
use super::slot_commit::pair;
use crate::addr::GlobalAddr;
use crate::error::UmoError;
use dmc_verbs::node::WORD_LOCK;

/// What [`Pool::roll_forward_slot`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRecovery {
    /// The primary's word was not locked: nothing to do.
    NotLocked,
    /// No backup was ahead: the primary was unlocked to its old word.
    Unlocked { word: u64 },
    /// A backup was ahead: its pair is now on every copy.
    RolledForward { word: u64, meta: u64 },
}

impl Pool {
    /// Resolves a slot a single-key commit left locked (see the module doc). Fails only
    /// when a copy cannot be read or written; the slot is then as locked as before and
    /// the call can be repeated.
    pub async fn roll_forward_slot(&self, addr: GlobalAddr) -> Result<SlotRecovery, UmoError> {
        let copies = self.copy_count(addr.region()).await?;
        let mut pairs = Vec::with_capacity(copies);
        for copy in 0..copies {
            let mut buf = [0u8; 16];
            self.read_copy(addr, copy, &mut buf).await?;
            let word = u64::from_le_bytes(buf[..8].try_into().unwrap_or_default());
            let meta = u64::from_le_bytes(buf[8..].try_into().unwrap_or_default());
            pairs.push((word, meta));
        }
        let Some(&(locked, primary_meta)) = pairs.first() else {
            return Ok(SlotRecovery::NotLocked);
        };
        if locked & WORD_LOCK == 0 {
            return Ok(SlotRecovery::NotLocked);
        }
        let old = locked & !WORD_LOCK;
        let ahead = pairs[1..]
            .iter()
            .copied()
            .find(|&(word, meta)| (word, meta) != (old, primary_meta));
        let (word, meta) = match ahead {
            Some(p) => p,
            None => {
                self.cas_copy(addr, 0, locked, old).await?;
                return Ok(SlotRecovery::Unlocked { word: old });
            }
        };
        let new_pair = pair(word, meta);
        for (copy, &p) in pairs.iter().enumerate().skip(1) {
            if p != (word, meta) {
                self.write_copy(addr, copy, &new_pair).await?;
            }
        }
        self.write_copy(addr.offset_by(8), 0, &meta.to_le_bytes())
            .await?;
        let seen = self.cas_copy(addr, 0, locked, word).await?;
        if seen != locked && seen != word {
            return Err(UmoError::Layout(format!(
                "slot word {:#x} changed from {locked:#x} while rolled forward (now {seen:#x})",
                addr.bits()
            )));
        }
        Ok(SlotRecovery::RolledForward { word, meta })
    }
}
